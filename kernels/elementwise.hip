// Elementwise kernels: fill, cast, strided copy, unary, binary with
// broadcast strides, RoPE, pad, nearest upsampling, average pooling,
// embedding. Blocks are 256 threads; the grid is one-dimensional, sized by
// the host to cover the elements.

#define EW_BS 256

// ---- fill / cast ----

template <typename T> DI void fill_impl(T *R y, long long n, double v) {
	long long i = BIDX * EW_BS + TID;
	if (i < n)
		std_(y + i, v);
}

#define FILL(sfx, T) \
	KERNEL void fill_##sfx(T *R y, long long n, double v) { fill_impl<T>(y, n, v); }
FILL(f32, float)
FILL(f16, h16)
FILL(bf16, b16)
FILL(i64, long long)
FILL(i32, int)
FILL(u8, unsigned char)
FILL(bool, bl)

template <typename S, typename D> DI void cast_impl(D *R y, const S *R x, long long n) {
	long long i = BIDX * EW_BS + TID;
	if (i < n)
		std_(y + i, ldd(x + i));
}

#define CAST(ss, S, ds, D) \
	KERNEL void cast_##ss##_##ds(D *R y, const S *R x, long long n) { cast_impl<S, D>(y, x, n); }
#define CASTS_FROM(ss, S)                 \
	CAST(ss, S, f32, float)               \
	CAST(ss, S, f16, h16)                 \
	CAST(ss, S, bf16, b16)                \
	CAST(ss, S, i64, long long)           \
	CAST(ss, S, i32, int)                 \
	CAST(ss, S, u8, unsigned char)        \
	CAST(ss, S, bool, bl)
CASTS_FROM(f32, float)
CASTS_FROM(f16, h16)
CASTS_FROM(bf16, b16)
CASTS_FROM(i64, long long)
CASTS_FROM(i32, int)
CASTS_FROM(u8, unsigned char)
CASTS_FROM(bool, bl)

// ---- strided copy ----

struct CopyArgs {
	long long n, rank, dst_off, src_off;
	long long shape[MAXR], dst_st[MAXR], src_st[MAXR];
};

template <typename W> DI void copy_impl(W *R d, const W *R s, const CopyArgs &a) {
	long long i = BIDX * EW_BS + TID;
	if (i >= a.n)
		return;
	long long od = a.dst_off, os = a.src_off, r = i;
	for (int ax = (int)a.rank - 1; ax >= 0; ax--) {
		long long c = r % a.shape[ax];
		r /= a.shape[ax];
		od += c * a.dst_st[ax];
		os += c * a.src_st[ax];
	}
	d[od] = s[os];
}

// v16 moves 16 bytes at once: copies whose contiguous runs, offsets and
// strides allow it go in 16-byte words (the host picks the widest word).
struct alignas(16) v16 {
	unsigned long long lo, hi;
};

#define COPY(sfx, W) \
	KERNEL void copy_##sfx(W *R d, const W *R s, CopyArgs a) { copy_impl<W>(d, s, a); }
COPY(b1, unsigned char)
COPY(b2, unsigned short)
COPY(b4, unsigned int)
COPY(b8, unsigned long long)
COPY(b16, v16)

// ---- unary ----

DI float unary_op(int op, float x, float a, float b) {
	switch (op) {
	case 0:
		return -x;
	case 1:
		return fexp(x);
	case 2:
		return flog(x);
	case 3:
		return fsin(x);
	case 4:
		return fcos(x);
	case 5:
		return FP_SQRT(x);
	case 6:
		return 1.0f / FP_SQRT(x);
	case 7:
		return FP_FABS(x);
	case 8:
		return x * x;
	case 9: // SiLU
		return x * fsigmoid(x);
	case 10: // GELU, erf form: 0.5·x·(1 + erf(x/√2)) = 0.5·x·erfc(−x/√2)
		return 0.5f * x * ferfc(-0.70710678118654752f * x);
	case 11: { // GELU, tanh approximation; 0.5·(1 + tanh(u)) = sigmoid(2u) without cancellation
		float u = 0.79788456080286536f * (x + 0.044715f * x * x * x);
		return x * fsigmoid(2.0f * u);
	}
	case 12: // QuickGELU
		return x * fsigmoid(1.702f * x);
	case 13:
		return fsigmoid(x);
	case 14:
		return ftanh(x);
	case 15:
		return x * a;
	case 16:
		return x + a;
	case 17: // clamp; NaN passes through
		return x < a ? a : (x > b ? b : x);
	case 18:
		return fpow(x, a);
	case 19:
		return 1.0f / x;
	}
	return FP_NAN;
}

// The op switch sits outside the per-element loop so each case is a tight
// vectorisable loop.
#define UCASE(n, expr)                 \
	case n:                            \
		_Pragma("unroll") for (int e = 0; e < E; e++) { \
			float x = in[e];           \
			out[e] = (expr);           \
		}                              \
		break;

template <int E> DI void unary_vec(int op, const float *in, float *out, float a, float b) {
	switch (op) {
		UCASE(0, -x)
		UCASE(9, x * fsigmoid(x))
		UCASE(11, x * fsigmoid(1.59576912160573071f * (x + 0.044715f * x * x * x)))
		UCASE(15, x * a)
		UCASE(16, x + a)
	default:
#pragma unroll
		for (int e = 0; e < E; e++)
			out[e] = unary_op(op, in[e], a, b);
	}
}

template <typename T> DI void unary_impl(T *R y, const T *R x, long long n, int op, float a, float b) {
	const int E = 16 / sizeof(T);
	long long i0 = (BIDX * EW_BS + TID) * E;
	if (i0 + E <= n && aligned16(x) && aligned16(y)) {
		V16<T> vx = *(const V16<T> *)(x + i0), vy;
		float in[E], out[E];
#pragma unroll
		for (int e = 0; e < E; e++)
			in[e] = ld(&vx.v[e]);
		unary_vec<E>(op, in, out, a, b);
#pragma unroll
		for (int e = 0; e < E; e++)
			st(&vy.v[e], out[e]);
		*(V16<T> *)(y + i0) = vy;
		return;
	}
	for (long long i = i0; i < i0 + E && i < n; i++)
		st(y + i, unary_op(op, ld(x + i), a, b));
}

#define UNARY(sfx, T)                                                                      \
	KERNEL void unary_##sfx(T *R y, const T *R x, long long n, int op, float a, float b) { \
		unary_impl<T>(y, x, n, op, a, b);                                                 \
	}
UNARY(f32, float)
UNARY(f16, h16)
UNARY(bf16, b16)

// ---- binary with broadcast strides ----

struct BinArgs {
	long long n, rank, op;
	long long shape[MAXR], ast[MAXR], bst[MAXR];
};

DI float binary_op(int op, float x, float y) {
	switch (op) {
	case 0:
		return x + y;
	case 1:
		return x - y;
	case 2:
		return x * y;
	case 3:
		return x / y;
	case 4:
		return (x != x || y != y) ? FP_NAN : (x > y ? x : y);
	case 5:
		return (x != x || y != y) ? FP_NAN : (x < y ? x : y);
	}
	return FP_NAN;
}

template <typename I> DI I binary_int(int op, I x, I y) {
	switch (op) {
	case 0:
		return x + y;
	case 1:
		return x - y;
	case 2:
		return x * y;
	case 3:
		return y != 0 ? x / y : 0; // truncating; 0 for a zero divisor
	case 4:
		return x > y ? x : y;
	case 5:
		return x < y ? x : y;
	}
	return 0;
}

DI void bin_offsets(const BinArgs &a, long long i, long long *oa, long long *ob) {
	long long pa = 0, pb = 0, r = i;
	for (int ax = (int)a.rank - 1; ax >= 0; ax--) {
		long long c = r % a.shape[ax];
		r /= a.shape[ax];
		pa += c * a.ast[ax];
		pb += c * a.bst[ax];
	}
	*oa = pa;
	*ob = pb;
}

// When the innermost axis is a multiple of the vector width and each
// operand is contiguous (stride 1) or broadcast (stride 0) along it, a
// thread handles one 16-byte vector, locating it once.
template <typename T> DI void binary_impl(T *R y, const T *R x, const T *R z, const BinArgs &a) {
	const int E = 16 / sizeof(T);
	int op = (int)a.op;
	long long i0 = (BIDX * EW_BS + TID) * E;
	int r = (int)a.rank - 1;
	long long as = a.ast[r], bs = a.bst[r];
	bool vec = a.shape[r] % E == 0 && (as == 0 || as == 1) && (bs == 0 || bs == 1) && aligned16(y) &&
	           (as == 0 || aligned16(x)) && (bs == 0 || aligned16(z));
	if (vec) {
		if (i0 >= a.n)
			return;
		long long oa, ob;
		bin_offsets(a, i0, &oa, &ob);
		float xa[E], zb[E];
		if (as == 1) {
			V16<T> v = *(const V16<T> *)(x + oa);
#pragma unroll
			for (int e = 0; e < E; e++)
				xa[e] = ld(&v.v[e]);
		} else {
			float v = ld(x + oa);
#pragma unroll
			for (int e = 0; e < E; e++)
				xa[e] = v;
		}
		if (bs == 1) {
			V16<T> v = *(const V16<T> *)(z + ob);
#pragma unroll
			for (int e = 0; e < E; e++)
				zb[e] = ld(&v.v[e]);
		} else {
			float v = ld(z + ob);
#pragma unroll
			for (int e = 0; e < E; e++)
				zb[e] = v;
		}
		V16<T> vy;
#pragma unroll
		for (int e = 0; e < E; e++)
			st(&vy.v[e], binary_op(op, xa[e], zb[e]));
		*(V16<T> *)(y + i0) = vy;
		return;
	}
	for (long long i = i0; i < i0 + E && i < a.n; i++) {
		long long oa, ob;
		bin_offsets(a, i, &oa, &ob);
		st(y + i, binary_op(op, ld(x + oa), ld(z + ob)));
	}
}

template <typename I> DI void binary_int_impl(I *R y, const I *R x, const I *R z, const BinArgs &a) {
	long long i = BIDX * EW_BS + TID;
	if (i >= a.n)
		return;
	long long oa, ob;
	bin_offsets(a, i, &oa, &ob);
	y[i] = binary_int<I>((int)a.op, x[oa], z[ob]);
}

#define BINARY(sfx, T) \
	KERNEL void binary_##sfx(T *R y, const T *R x, const T *R z, BinArgs a) { binary_impl<T>(y, x, z, a); }
BINARY(f32, float)
BINARY(f16, h16)
BINARY(bf16, b16)
KERNEL void binary_i64(long long *R y, const long long *R x, const long long *R z, BinArgs a) {
	binary_int_impl<long long>(y, x, z, a);
}
KERNEL void binary_i32(int *R y, const int *R x, const int *R z, BinArgs a) { binary_int_impl<int>(y, x, z, a); }

// ---- RoPE on interleaved pairs: x (B, L, H, D), cos/sin (L, D) f32 ----

template <typename T>
DI void rope_impl(T *R y, const T *R x, const float *R c, const float *R s, long long pairs, long long L, long long H,
                  long long D) {
	long long p = BIDX * EW_BS + TID;
	if (p >= pairs)
		return;
	long long e = 2 * p;
	long long d = e % D;
	long long l = (e / (H * D)) % L;
	const float *cl = c + l * D + d, *sl = s + l * D + d;
	float a = ld(x + e), b = ld(x + e + 1);
	st(y + e, a * cl[0] - b * sl[0]);
	st(y + e + 1, b * cl[1] + a * sl[1]);
}

#define ROPE(sfx, T)                                                                                          \
	KERNEL void rope_##sfx(T *R y, const T *R x, const float *R c, const float *R s, long long pairs, long long L, \
	                       long long H, long long D) {                                                            \
		rope_impl<T>(y, x, c, s, pairs, L, H, D);                                                             \
	}
ROPE(f32, float)
ROPE(f16, h16)
ROPE(bf16, b16)

// ---- pad (zeros or replicate) ----

struct PadArgs {
	long long n, rank, replicate;
	long long dshape[MAXR], sshape[MAXR], before[MAXR];
};

template <typename W> DI void pad_impl(W *R d, const W *R s, const PadArgs &a) {
	long long i = BIDX * EW_BS + TID;
	if (i >= a.n)
		return;
	long long os = 0, stride = 1, r = i;
	bool inside = true;
	for (int ax = (int)a.rank - 1; ax >= 0; ax--) {
		long long c = r % a.dshape[ax] - a.before[ax];
		r /= a.dshape[ax];
		if (c < 0 || c >= a.sshape[ax]) {
			inside = false;
			c = c < 0 ? 0 : a.sshape[ax] - 1;
		}
		os += c * stride;
		stride *= a.sshape[ax];
	}
	d[i] = (inside || a.replicate) ? s[os] : (W)0;
}

#define PAD(sfx, W) \
	KERNEL void pad_##sfx(W *R d, const W *R s, PadArgs a) { pad_impl<W>(d, s, a); }
PAD(b1, unsigned char)
PAD(b2, unsigned short)
PAD(b4, unsigned int)
PAD(b8, unsigned long long)

// ---- nearest upsampling of the last three axes ----

template <typename W>
DI void upsample_impl(W *R d, const W *R s, long long n, long long T, long long H, long long W_, int ft, int fh,
                      int fw) {
	long long i = BIDX * EW_BS + TID;
	if (i >= n)
		return;
	long long OW = W_ * fw, OH = H * fh, OT = T * ft;
	long long x = i % OW, r = i / OW;
	long long y = r % OH;
	r /= OH;
	long long t = r % OT, pre = r / OT;
	d[i] = s[((pre * T + t / ft) * H + y / fh) * W_ + x / fw];
}

#define UPSAMPLE(sfx, W)                                                                                     \
	KERNEL void upsample_##sfx(W *R d, const W *R s, long long n, long long T, long long H, long long W_, int ft, \
	                           int fh, int fw) {                                                             \
		upsample_impl<W>(d, s, n, T, H, W_, ft, fh, fw);                                                     \
	}
UPSAMPLE(b1, unsigned char)
UPSAMPLE(b2, unsigned short)
UPSAMPLE(b4, unsigned int)
UPSAMPLE(b8, unsigned long long)
UPSAMPLE(b16, V16<unsigned int>) // 16-byte units of a last axis that is not upsampled (channels-last)

// ---- average pooling of the last three axes (kernel = stride) ----

template <typename T>
DI void avgpool_impl(T *R d, const T *R s, long long n, long long T_, long long H, long long W, int kt, int kh,
                     int kw) {
	long long i = BIDX * EW_BS + TID;
	if (i >= n)
		return;
	long long OW = W / kw, OH = H / kh, OT = T_ / kt;
	long long x = i % OW, r = i / OW;
	long long y = r % OH;
	r /= OH;
	long long t = r % OT, pre = r / OT;
	float acc = 0.0f;
	for (int a = 0; a < kt; a++)
		for (int b = 0; b < kh; b++) {
			const T *row = s + ((pre * T_ + t * kt + a) * H + y * kh + b) * W + x * kw;
			for (int c = 0; c < kw; c++)
				acc += ld(row + c);
		}
	st(d + i, acc / (float)(kt * kh * kw));
}

#define AVGPOOL(sfx, T)                                                                                     \
	KERNEL void avgpool_##sfx(T *R d, const T *R s, long long n, long long T_, long long H, long long W, int kt, \
	                          int kh, int kw) {                                                             \
		avgpool_impl<T>(d, s, n, T_, H, W, kt, kh, kw);                                                     \
	}
AVGPOOL(f32, float)
AVGPOOL(f16, h16)
AVGPOOL(bf16, b16)

// ---- embedding: dst (N, D) = table[ids] ----
// An id outside the table writes zeros and sets *bad to 1.

template <typename W, typename I>
DI void embedding_impl(W *R d, const W *R t, const I *R ids, long long N, long long D, long long V, int *bad) {
	long long i = BIDX * EW_BS + TID;
	if (i >= N * D)
		return;
	long long row = i / D, col = i % D;
	long long id = (long long)ids[row];
	if (id < 0 || id >= V) {
		d[i] = (W)0;
		*bad = 1;
		return;
	}
	d[i] = t[id * D + col];
}

#define EMBED(sfx, W, isfx, I)                                                                       \
	KERNEL void embedding_##sfx##_##isfx(W *R d, const W *R t, const I *R ids, long long N, long long D, \
	                                     long long V, int *bad) {                                    \
		embedding_impl<W, I>(d, t, ids, N, D, V, bad);                                               \
	}
EMBED(b1, unsigned char, i64, long long)
EMBED(b2, unsigned short, i64, long long)
EMBED(b4, unsigned int, i64, long long)
EMBED(b8, unsigned long long, i64, long long)
EMBED(b1, unsigned char, i32, int)
EMBED(b2, unsigned short, i32, int)
EMBED(b4, unsigned int, i32, int)
EMBED(b8, unsigned long long, i32, int)
