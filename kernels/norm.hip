// Normalisation, softmax and reductions. Row kernels run one 256-thread
// block per row and read the row from global memory once per pass (the
// passes after the first hit the cache). Statistics are f32, two-pass
// (mean, then the sum of squared deviations).

#define NR_BS 256

// ---- GroupNorm: x (B, C, S), groups of C/G channels × S positions ----
// Each group is contiguous in memory. gn_stats computes, per chunk of a
// group, (count, mean, M2); gn_finalize merges the chunks (Chan et al.) in
// double into (mean, rstd); gn_apply normalises elementwise.

template <typename T> DI void gn_stats_impl(const T *R x, float *R part, long long gsize, long long chunk) {
	__shared__ float sh[NR_BS];
	long long g = BIDY, c = BIDX;
	long long lo = c * chunk, hi = lo + chunk < gsize ? lo + chunk : gsize;
	const T *xg = x + g * gsize;
	const int E = 16 / sizeof(T);
	// 16-byte loads when the chunk bounds and the group start are aligned.
	bool vec = gsize % E == 0 && chunk % E == 0 && aligned16(x);
	float s = 0.0f;
	if (vec) {
		for (long long i = lo + TID * E; i < hi; i += NR_BS * E) {
			V16<T> v = *(const V16<T> *)(xg + i);
#pragma unroll
			for (int e = 0; e < E; e++)
				s += ld(&v.v[e]);
		}
	} else {
		for (long long i = lo + TID; i < hi; i += NR_BS)
			s += ld(xg + i);
	}
	float cnt = (float)(hi - lo);
	float mean = block_sum<NR_BS>(s, sh) / cnt;
	float q = 0.0f;
	if (vec) {
		for (long long i = lo + TID * E; i < hi; i += NR_BS * E) {
			V16<T> v = *(const V16<T> *)(xg + i);
#pragma unroll
			for (int e = 0; e < E; e++) {
				float d = ld(&v.v[e]) - mean;
				q += d * d;
			}
		}
	} else {
		for (long long i = lo + TID; i < hi; i += NR_BS) {
			float d = ld(xg + i) - mean;
			q += d * d;
		}
	}
	q = block_sum<NR_BS>(q, sh);
	if (TID == 0) {
		float *p = part + (g * (long long)((gsize + chunk - 1) / chunk) + c) * 3;
		p[0] = cnt;
		p[1] = mean;
		p[2] = q;
	}
}

#define GN_STATS(sfx, T)                                                                        \
	KERNEL void gn_stats_##sfx(const T *R x, float *R part, long long gsize, long long chunk) { \
		gn_stats_impl<T>(x, part, gsize, chunk);                                                \
	}
GN_STATS(f32, float)
GN_STATS(f16, h16)
GN_STATS(bf16, b16)

// One thread per group: stats[2g] = mean, stats[2g+1] = rstd.
KERNEL void gn_finalize(const float *R part, float *R stats, long long groups, long long nchunks, float eps) {
	long long g = BIDX * NR_BS + TID;
	if (g >= groups)
		return;
	const float *p = part + g * nchunks * 3;
	double n = 0.0, mean = 0.0, m2 = 0.0;
	for (long long c = 0; c < nchunks; c++) {
		double nb = p[3 * c], mb = p[3 * c + 1], qb = p[3 * c + 2];
		double nn = n + nb;
		double d = mb - mean;
		mean += d * nb / nn;
		m2 += qb + d * d * n * nb / nn;
		n = nn;
	}
	stats[2 * g] = (float)mean;
	stats[2 * g + 1] = (float)(1.0 / FP_DSQRT(m2 / n + (double)eps));
}

// vec: S is a multiple of the vector width, so a 16-byte vector lies in
// one channel.
template <typename T>
DI void gn_apply_impl(T *R y, const T *R x, const T *R w, const T *R b, const float *R stats, long long n, long long S,
                      long long C, long long G, int silu, int vec) {
	const int E = vec ? 16 / sizeof(T) : 1;
	long long i0 = (BIDX * NR_BS + TID) * (long long)E;
	if (i0 >= n)
		return;
	long long c = (i0 / S) % C;
	long long bg = (i0 / (S * C)) * G + c / (C / G);
	float mean = stats[2 * bg], rstd = stats[2 * bg + 1];
	float scale = w ? rstd * ld(w + c) : rstd;
	float shift = b ? ld(b + c) : 0.0f;
	if (vec) {
		const int EV = 16 / sizeof(T);
		V16<T> vx = *(const V16<T> *)(x + i0), vy;
#pragma unroll
		for (int e = 0; e < EV; e++) {
			float v = (ld(&vx.v[e]) - mean) * scale + shift;
			if (silu) {
				v = rnd(v, y); // the reference rounds the norm's output before the SiLU
				v = v * fsigmoid(v);
			}
			st(&vy.v[e], v);
		}
		*(V16<T> *)(y + i0) = vy;
		return;
	}
	float v = (ld(x + i0) - mean) * scale + shift;
	if (silu) {
		v = rnd(v, y);
		v = v * fsigmoid(v);
	}
	st(y + i0, v);
}

#define GN_APPLY(sfx, T)                                                                                   \
	KERNEL void gn_apply_##sfx(T *R y, const T *R x, const T *R w, const T *R b, const float *R stats, long long n, \
	                           long long S, long long C, long long G, int silu, int vec) {                     \
		gn_apply_impl<T>(y, x, w, b, stats, n, S, C, G, silu, vec);                                        \
	}
GN_APPLY(f32, float)
GN_APPLY(f16, h16)
GN_APPLY(bf16, b16)

// ---- LayerNorm / RMSNorm over the last axis ----

template <typename T> DI void layernorm_impl(T *R y, const T *R x, const T *R w, const T *R b, long long D, float eps) {
	__shared__ float sh[NR_BS];
	const T *xr = x + BIDX * D;
	T *yr = y + BIDX * D;
	float s = 0.0f;
	for (long long j = TID; j < D; j += NR_BS)
		s += ld(xr + j);
	float mean = block_sum<NR_BS>(s, sh) / (float)D;
	float q = 0.0f;
	for (long long j = TID; j < D; j += NR_BS) {
		float d = ld(xr + j) - mean;
		q += d * d;
	}
	float rstd = 1.0f / FP_SQRT(block_sum<NR_BS>(q, sh) / (float)D + eps);
	for (long long j = TID; j < D; j += NR_BS) {
		float v = (ld(xr + j) - mean) * rstd;
		if (w)
			v *= ld(w + j);
		if (b)
			v += ld(b + j);
		st(yr + j, v);
	}
}

#define LAYERNORM(sfx, T)                                                                                    \
	KERNEL void layernorm_##sfx(T *R y, const T *R x, const T *R w, const T *R b, long long D, float eps) { \
		layernorm_impl<T>(y, x, w, b, D, eps);                                                               \
	}
LAYERNORM(f32, float)
LAYERNORM(f16, h16)
LAYERNORM(bf16, b16)

// y = x·rsqrt(mean(x²)+eps), rounded to the storage type, then ·w.
template <typename T> DI void rmsnorm_impl(T *R y, const T *R x, const T *R w, long long D, float eps) {
	__shared__ float sh[NR_BS];
	const T *xr = x + BIDX * D;
	T *yr = y + BIDX * D;
	float q = 0.0f;
	for (long long j = TID; j < D; j += NR_BS) {
		float v = ld(xr + j);
		q += v * v;
	}
	float rs = 1.0f / FP_SQRT(block_sum<NR_BS>(q, sh) / (float)D + eps);
	for (long long j = TID; j < D; j += NR_BS) {
		float v = ld(xr + j) * rs;
		if (w)
			v = rnd(v, y) * ld(w + j);
		st(yr + j, v);
	}
}

#define RMSNORM(sfx, T)                                                                      \
	KERNEL void rmsnorm_##sfx(T *R y, const T *R x, const T *R w, long long D, float eps) { \
		rmsnorm_impl<T>(y, x, w, D, eps);                                                    \
	}
RMSNORM(f32, float)
RMSNORM(f16, h16)
RMSNORM(bf16, b16)

// ---- RMSNorm of channels-last rows: x (B, P, C) over C at every position ----
// Half a warp (16 lanes) reads a row of C channels. With vec, each lane holds
// NV 16-byte vectors of the row in registers (C ≤ 16·NV·16/sizeof(T), C a
// multiple of the vector, the pointers aligned): one read of x; else the
// lanes step through the row one element at a time and read it twice.
// y = x·rsqrt(mean_C(x²)+eps), rounded, ·w; then, with silu, SiLU of that
// rounded output (as RMSNorm and SiLU run one after the other). y has Py ≥ P
// positions a batch and the result fills each batch's last P (the frames a
// causal convolution's cache puts in front stay the caller's).

#define CL_LANES 16
#define CL_ROWS (256 / CL_LANES)

DI float cl_sum16(float v) {
#pragma unroll
	for (int m = CL_LANES / 2; m > 0; m /= 2)
		v += shfl_xor(v, m);
	return v;
}

template <typename T> DI float cl_out(float v, float rs, const T *R w, long long c, int silu, const T *y) {
	v *= rs;
	if (w)
		v = rnd(v, y) * ld(w + c);
	if (silu) {
		v = rnd(v, y);
		v = v * fsigmoid(v);
	}
	return v;
}

template <typename T, int NV>
DI void cl_rmsnorm_impl(T *R y, const T *R x, const T *R w, long long C, long long P, long long Py, long long n,
                        float eps, int silu) {
	const int lane = TID % CL_LANES;
	const long long row = BIDX * CL_ROWS + TID / CL_LANES;
	const bool in = row < n; // every lane takes part in the shuffles
	const long long b = in ? row / P : 0, p = in ? row - b * P : 0;
	const T *xr = x + (b * P + p) * C;
	T *yr = y + (b * Py + (Py - P) + p) * C;
	float q = 0.0f;
	if (NV > 0) {
		const int E = 16 / (int)sizeof(T);
		V16<T> v[NV > 0 ? NV : 1];
#pragma unroll
		for (int i = 0; i < NV; i++) {
			long long j = (long long)(i * CL_LANES + lane) * E;
			if (in && j < C) {
				v[i] = *(const V16<T> *)(xr + j);
#pragma unroll
				for (int e = 0; e < E; e++) {
					float f = ld(&v[i].v[e]);
					q += f * f;
				}
			}
		}
		float rs = 1.0f / FP_SQRT(cl_sum16(q) / (float)C + eps);
#pragma unroll
		for (int i = 0; i < NV; i++) {
			long long j = (long long)(i * CL_LANES + lane) * E;
			if (in && j < C) {
				V16<T> o;
#pragma unroll
				for (int e = 0; e < E; e++)
					st(&o.v[e], cl_out(ld(&v[i].v[e]), rs, w, j + e, silu, y));
				*(V16<T> *)(yr + j) = o;
			}
		}
		return;
	}
	if (in)
		for (long long c = lane; c < C; c += CL_LANES) {
			float f = ld(xr + c);
			q += f * f;
		}
	float rs = 1.0f / FP_SQRT(cl_sum16(q) / (float)C + eps);
	if (in)
		for (long long c = lane; c < C; c += CL_LANES)
			st(yr + c, cl_out(ld(xr + c), rs, w, c, silu, y));
}

#define CL_RMSNORM(sfx, T, NV)                                                                                  \
	KERNEL void cl_rmsnorm##NV##_##sfx(T *R y, const T *R x, const T *R w, long long C, long long P, long long Py, \
	                                   long long n, float eps, int silu) {                                      \
		cl_rmsnorm_impl<T, NV>(y, x, w, C, P, Py, n, eps, silu);                                                 \
	}
#define CL_RMSNORMS(sfx, T) \
	CL_RMSNORM(sfx, T, 0)   \
	CL_RMSNORM(sfx, T, 1)   \
	CL_RMSNORM(sfx, T, 2)   \
	CL_RMSNORM(sfx, T, 3)   \
	CL_RMSNORM(sfx, T, 4)   \
	CL_RMSNORM(sfx, T, 6)   \
	CL_RMSNORM(sfx, T, 8)
CL_RMSNORMS(f32, float)
CL_RMSNORMS(f16, h16)
CL_RMSNORMS(bf16, b16)

// ---- softmax over the last axis (NaN propagates; a row of −inf is NaN) ----

template <typename T> DI void softmax_impl(T *R y, const T *R x, long long D) {
	__shared__ float sh[NR_BS];
	const T *xr = x + BIDX * D;
	T *yr = y + BIDX * D;
	float m = -FP_INF;
	for (long long j = TID; j < D; j += NR_BS)
		m = fmax_nan(m, ld(xr + j));
	m = block_max<NR_BS>(m, sh);
	float s = 0.0f;
	for (long long j = TID; j < D; j += NR_BS)
		s += fexp(ld(xr + j) - m);
	float inv = 1.0f / block_sum<NR_BS>(s, sh);
	for (long long j = TID; j < D; j += NR_BS)
		st(yr + j, fexp(ld(xr + j) - m) * inv);
}

#define SOFTMAX(sfx, T) \
	KERNEL void softmax_##sfx(T *R y, const T *R x, long long D) { softmax_impl<T>(y, x, D); }
SOFTMAX(f32, float)
SOFTMAX(f16, h16)
SOFTMAX(bf16, b16)

// ---- reductions of src (N, K) over K ----
// op: 0 sum, 1 mean, 2 max, 3 var, 4 unbiased var, 5 mean |x|.

template <typename T> DI void reduce_impl(T *R y, const T *R x, long long K, int op) {
	__shared__ float sh[NR_BS];
	const T *xr = x + BIDX * K;
	float r;
	if (op == 2) {
		float m = -FP_INF;
		for (long long j = TID; j < K; j += NR_BS)
			m = fmax_nan(m, ld(xr + j));
		r = block_max<NR_BS>(m, sh);
	} else {
		float s = 0.0f;
		for (long long j = TID; j < K; j += NR_BS) {
			float v = ld(xr + j);
			s += op == 5 ? FP_FABS(v) : v;
		}
		r = block_sum<NR_BS>(s, sh);
		if (op == 1 || op == 5)
			r /= (float)K;
		if (op == 3 || op == 4) {
			float mean = r / (float)K, q = 0.0f;
			for (long long j = TID; j < K; j += NR_BS) {
				float d = ld(xr + j) - mean;
				q += d * d;
			}
			r = block_sum<NR_BS>(q, sh) / (float)(op == 3 ? K : K - 1);
		}
	}
	if (TID == 0)
		st(y + BIDX, r);
}

#define REDUCE(sfx, T) \
	KERNEL void reduce_##sfx(T *R y, const T *R x, long long K, int op) { reduce_impl<T>(y, x, K, op); }
REDUCE(f32, float)
REDUCE(f16, h16)
REDUCE(bf16, b16)

// ---- short rows (D ≤ 1024): one group of 32 lanes per row, 8 rows per
// block, shuffle reductions within the group ----

DI float group_sum(float v) {
#pragma unroll
	for (int m = 16; m > 0; m >>= 1)
		v += shfl_xor(v, m);
	return v;
}
DI float group_max(float v) {
#pragma unroll
	for (int m = 16; m > 0; m >>= 1)
		v = fmax_nan(v, shfl_xor(v, m));
	return v;
}

#define ROW_SETUP                                  \
	long long row = BIDX * 8 + TID / 32;           \
	int lane = TID % 32;                           \
	if (row >= nrows)                              \
		return;

// op: 0 layernorm, 1 rmsnorm, 2 softmax (w, b unused for softmax).
template <typename T>
DI void rows_impl(int op, T *R y, const T *R x, const T *R w, const T *R b, long long nrows, long long D, float eps) {
	ROW_SETUP
	const T *xr = x + row * D;
	T *yr = y + row * D;
	if (op == 2) {
		float m = -FP_INF;
		for (long long j = lane; j < D; j += 32)
			m = fmax_nan(m, ld(xr + j));
		m = group_max(m);
		float s = 0.0f;
		for (long long j = lane; j < D; j += 32)
			s += fexp(ld(xr + j) - m);
		float inv = 1.0f / group_sum(s);
		for (long long j = lane; j < D; j += 32)
			st(yr + j, fexp(ld(xr + j) - m) * inv);
		return;
	}
	if (op == 1) {
		float q = 0.0f;
		for (long long j = lane; j < D; j += 32) {
			float v = ld(xr + j);
			q += v * v;
		}
		float rs = 1.0f / FP_SQRT(group_sum(q) / (float)D + eps);
		for (long long j = lane; j < D; j += 32) {
			float v = ld(xr + j) * rs;
			if (w)
				v = rnd(v, y) * ld(w + j);
			st(yr + j, v);
		}
		return;
	}
	float s = 0.0f;
	for (long long j = lane; j < D; j += 32)
		s += ld(xr + j);
	float mean = group_sum(s) / (float)D;
	float q = 0.0f;
	for (long long j = lane; j < D; j += 32) {
		float d = ld(xr + j) - mean;
		q += d * d;
	}
	float rstd = 1.0f / FP_SQRT(group_sum(q) / (float)D + eps);
	for (long long j = lane; j < D; j += 32) {
		float v = (ld(xr + j) - mean) * rstd;
		if (w)
			v *= ld(w + j);
		if (b)
			v += ld(b + j);
		st(yr + j, v);
	}
}

#define ROWS(sfx, T)                                                                                            \
	KERNEL void layernorm_rows_##sfx(T *R y, const T *R x, const T *R w, const T *R b, long long nrows, long long D, \
	                                 float eps) {                                                               \
		rows_impl<T>(0, y, x, w, b, nrows, D, eps);                                                            \
	}                                                                                                           \
	KERNEL void rmsnorm_rows_##sfx(T *R y, const T *R x, const T *R w, long long nrows, long long D, float eps) { \
		rows_impl<T>(1, y, x, w, (const T *)0, nrows, D, eps);                                                 \
	}                                                                                                           \
	KERNEL void softmax_rows_##sfx(T *R y, const T *R x, long long nrows, long long D) {                       \
		rows_impl<T>(2, y, x, (const T *)0, (const T *)0, nrows, D, 0.0f);                                     \
	}
ROWS(f32, float)
ROWS(f16, h16)
ROWS(bf16, b16)

// ---- FP8 E4M3 rows: per-row quantization and dequantization ----
// The conversions are tensor.F8E4M3FromF32 / F32FromF8E4M3 bit for bit, so
// the GPU's codes equal the CPU reference's.

// e4m3_sat rounds f to the nearest E4M3 code, ties to even, after clamping
// to ±448 (NaN stays NaN: 0x7f with f's sign).
DI unsigned int e4m3_sat(float f) {
	if (f > 448.0f)
		f = 448.0f;
	else if (f < -448.0f)
		f = -448.0f;
	unsigned int b = F2U(f);
	unsigned int sign = (b >> 24) & 0x80u;
	b &= 0x7fffffffu;
	if (b >= (1087u << 20)) // NaN (the clamp removed everything else this large)
		return sign | 0x7fu;
	if (b < (121u << 23)) { // below 2⁻⁶: subnormal; adding 2¹⁴ rounds at E4M3's 2⁻⁹ step
		const unsigned int denorm = 141u << 23;
		return sign | (F2U(U2F(b) + U2F(denorm)) - denorm);
	}
	b += 0xc407ffffu + ((b >> 20) & 1u); // rebias 127 → 7, round the 20 dropped bits to even
	return sign | ((b >> 20) & 0xffu);
}

DI float e4m3_f32(unsigned int c) {
	unsigned int sign = (c & 0x80u) << 24, e = (c >> 3) & 15u, m = c & 7u;
	if (e == 15u && m == 7u)
		return U2F(sign | 0x7fc00000u);
	if (e == 0u)
		return U2F(sign | F2U((float)m * 0.001953125f)); // m·2⁻⁹
	return U2F(sign | ((e + 120u) << 23) | (m << 20));
}

template <int E> struct VB {
	unsigned char v[E];
} __attribute__((aligned(E)));

// q (rows, K) codes and scale (rows) of x (rows, K): scale = amax/448 (1 for
// a row of zeros or with a NaN or Inf in it), q = sat(x·(1/scale)), as
// tensor.QuantizeF8E4M3Rows. vec: K is a multiple of the vector width and x
// and q are 16-byte aligned.
template <typename T>
DI void quant_rows_fp8_impl(unsigned char *R q, float *R scale, const T *R x, long long K, int vec) {
	__shared__ float sh[NR_BS];
	const T *xr = x + BIDX * K;
	unsigned char *qr = q + BIDX * K;
	const int E = 16 / sizeof(T);
	float m = 0.0f;
	if (vec) {
		for (long long j = TID * E; j < K; j += NR_BS * E) {
			V16<T> v = *(const V16<T> *)(xr + j);
#pragma unroll
			for (int e = 0; e < E; e++)
				m = fmax_nan(m, FP_FABS(ld(&v.v[e])));
		}
	} else {
		for (long long j = TID; j < K; j += NR_BS)
			m = fmax_nan(m, FP_FABS(ld(xr + j)));
	}
	m = block_max<NR_BS>(m, sh);
	float s = m / 448.0f;
	if (s == 0.0f || !(s <= 3.4028234663852886e38f))
		s = 1.0f;
	float inv = 1.0f / s;
	if (TID == 0)
		scale[BIDX] = s;
	if (vec) {
		for (long long j = TID * E; j < K; j += NR_BS * E) {
			V16<T> v = *(const V16<T> *)(xr + j);
			VB<E> o;
#pragma unroll
			for (int e = 0; e < E; e++)
				o.v[e] = (unsigned char)e4m3_sat(ld(&v.v[e]) * inv);
			*(VB<E> *)(qr + j) = o;
		}
	} else {
		for (long long j = TID; j < K; j += NR_BS)
			qr[j] = (unsigned char)e4m3_sat(ld(xr + j) * inv);
	}
}

#define QUANT_ROWS_FP8(sfx, T)                                                                                    \
	KERNEL void quant_rows_fp8_##sfx(unsigned char *R q, float *R scale, const T *R x, long long K, int vec) { \
		quant_rows_fp8_impl<T>(q, scale, x, K, vec);                                                          \
	}
QUANT_ROWS_FP8(f32, float)
QUANT_ROWS_FP8(f16, h16)
QUANT_ROWS_FP8(bf16, b16)

// ---- per-tensor FP8 E4M3: the amax in two passes, then the codes ----
// As quant_rows_fp8 with the whole tensor one row (tensor.QuantizeF8E4M3Rows
// with rows 1), without atomics: nblk blocks each write the largest |x| of
// their grid-stride share to part, one block reduces part to s = (amax/448,
// its inverse) (1 and 1 for zeros, Inf or NaN), and q = sat(x·s[1]).

template <typename T> DI void amax_part_impl(float *R part, const T *R x, long long n, long long nblk) {
	__shared__ float sh[NR_BS];
	float m = 0.0f;
	for (long long i = BIDX * NR_BS + TID; i < n; i += nblk * NR_BS)
		m = fmax_nan(m, FP_FABS(ld(x + i)));
	m = block_max<NR_BS>(m, sh);
	if (TID == 0)
		part[BIDX] = m;
}

#define AMAX_PART(sfx, T)                                                                              \
	KERNEL void amax_part_##sfx(float *R part, const T *R x, long long n, long long nblk) { \
		amax_part_impl<T>(part, x, n, nblk);                                                   \
	}
AMAX_PART(f32, float)
AMAX_PART(f16, h16)
AMAX_PART(bf16, b16)

KERNEL void fp8_tensor_scale(float *R s, const float *R part, long long nblk) {
	__shared__ float sh[NR_BS];
	float m = 0.0f;
	for (long long i = TID; i < nblk; i += NR_BS)
		m = fmax_nan(m, part[i]);
	m = block_max<NR_BS>(m, sh);
	if (TID == 0) {
		float d = m / 448.0f;
		if (d == 0.0f || !(d <= 3.4028234663852886e38f))
			d = 1.0f;
		s[0] = d;
		s[1] = 1.0f / d;
	}
}

template <typename T> DI void quant_tensor_fp8_impl(unsigned char *R q, const T *R x, const float *R s, long long n) {
	long long i = BIDX * (long long)NR_BS + TID;
	if (i < n)
		q[i] = (unsigned char)e4m3_sat(ld(x + i) * s[1]);
}

#define QUANT_TENSOR_FP8(sfx, T)                                                                                \
	KERNEL void quant_tensor_fp8_##sfx(unsigned char *R q, const T *R x, const float *R s, long long n) { \
		quant_tensor_fp8_impl<T>(q, x, s, n);                                                             \
	}
QUANT_TENSOR_FP8(f32, float)
QUANT_TENSOR_FP8(f16, h16)
QUANT_TENSOR_FP8(bf16, b16)

// y (n elements, rows of K) = code·scale[row], one f32 product rounded once
// to T, as tensor.WidenF8E4M3Scaled.
template <typename T> DI void dequant_rows_fp8_impl(T *R y, const unsigned char *R q, const float *R scale, long long K, long long n) {
	long long i = BIDX * (long long)NR_BS + TID;
	if (i < n)
		st(y + i, e4m3_f32(q[i]) * scale[i / K]);
}

#define DEQUANT_ROWS_FP8(sfx, T)                                                                                          \
	KERNEL void dequant_rows_fp8_##sfx(T *R y, const unsigned char *R q, const float *R scale, long long K, long long n) { \
		dequant_rows_fp8_impl<T>(y, q, scale, K, n);                                                                  \
	}
DEQUANT_ROWS_FP8(f32, float)
DEQUANT_ROWS_FP8(f16, h16)
DEQUANT_ROWS_FP8(bf16, b16)
