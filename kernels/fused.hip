// Fused elementwise kernels around the transformer's GEMMs: LayerNorm with
// the adaptive modulation, the gated residual add, the q/k RMSNorm + RoPE
// that writes q, k and v straight into the joint attention layout, and an
// activation over column ranges of row-strided matrices. Each rounds its
// intermediate values to the storage type where the op-by-op reference
// stores them, so on one device the fused and op-by-op results agree to
// the last bit or nearly.

#define FZ_BS 256

DI float fz_group_sum(float v) {
#pragma unroll
	for (int m = 16; m > 0; m >>= 1)
		v += shfl_xor(v, m);
	return v;
}

// ---- y = LN(x)·(1 + scale[b]) + shift[b] ----
// x, y (rows, D) with rows of batch b in [b·L, (b+1)·L); shift and scale
// are (B, D). The LayerNorm output (no affine) is rounded to the storage
// type, then 1 + scale, the product and the sum each, as the reference
// computes them op by op.

template <typename T>
DI void ln_mod_impl(T *R y, const T *R x, const T *R shift, const T *R scale, long long L, long long D, float eps) {
	__shared__ float sh[FZ_BS];
	long long row = BIDX;
	const T *xr = x + row * D;
	T *yr = y + row * D;
	long long b = row / L;
	const T *sc = scale + b * D, *sf = shift + b * D;
	float s = 0.0f;
	for (long long j = TID; j < D; j += FZ_BS)
		s += ld(xr + j);
	float mean = block_sum<FZ_BS>(s, sh) / (float)D;
	float q = 0.0f;
	for (long long j = TID; j < D; j += FZ_BS) {
		float d = ld(xr + j) - mean;
		q += d * d;
	}
	float rstd = 1.0f / FP_SQRT(block_sum<FZ_BS>(q, sh) / (float)D + eps);
	for (long long j = TID; j < D; j += FZ_BS) {
		float n = rnd((ld(xr + j) - mean) * rstd, y);
		float p = rnd(n * rnd(1.0f + ld(sc + j), y), y);
		st(yr + j, p + ld(sf + j));
	}
}

#define LN_MOD(sfx, T)                                                                                  \
	KERNEL void ln_mod_##sfx(T *R y, const T *R x, const T *R shift, const T *R scale, long long L,     \
	                         long long D, float eps) {                                                  \
		ln_mod_impl<T>(y, x, shift, scale, L, D, eps);                                                  \
	}
LN_MOD(f32, float)
LN_MOD(f16, h16)
LN_MOD(bf16, b16)

// The same with the row in registers: 128 threads per row, each holding NV
// 16-byte vectors (D = 128·NV·16/sizeof(T)); one read of x.
template <typename T, int NV>
DI void ln_mod_vec_impl(T *R y, const T *R x, const T *R shift, const T *R scale, long long L, long long D,
                        float eps) {
	const int E = 16 / sizeof(T);
	__shared__ float sh[128];
	long long row = BIDX;
	const T *xr = x + row * D;
	T *yr = y + row * D;
	long long b = row / L;
	const T *sc = scale + b * D, *sf = shift + b * D;
	V16<T> vx[NV];
	float s = 0.0f;
#pragma unroll
	for (int i = 0; i < NV; i++) {
		vx[i] = *(const V16<T> *)(xr + (i * 128 + TID) * E);
#pragma unroll
		for (int e = 0; e < E; e++)
			s += ld(&vx[i].v[e]);
	}
	float mean = block_sum<128>(s, sh) / (float)D;
	float q = 0.0f;
#pragma unroll
	for (int i = 0; i < NV; i++)
#pragma unroll
		for (int e = 0; e < E; e++) {
			float d = ld(&vx[i].v[e]) - mean;
			q += d * d;
		}
	float rstd = 1.0f / FP_SQRT(block_sum<128>(q, sh) / (float)D + eps);
#pragma unroll
	for (int i = 0; i < NV; i++) {
		long long j = (i * 128 + TID) * E;
		V16<T> vs = *(const V16<T> *)(sc + j), vf = *(const V16<T> *)(sf + j), vy;
#pragma unroll
		for (int e = 0; e < E; e++) {
			float n = rnd((ld(&vx[i].v[e]) - mean) * rstd, y);
			float p = rnd(n * rnd(1.0f + ld(&vs.v[e]), y), y);
			st(&vy.v[e], p + ld(&vf.v[e]));
		}
		*(V16<T> *)(yr + j) = vy;
	}
}

#define LN_MOD_VEC(sfx, T, NV)                                                                                 \
	KERNEL void ln_mod_vec##NV##_##sfx(T *R y, const T *R x, const T *R shift, const T *R scale, long long L, \
	                                   long long D, float eps) {                                              \
		ln_mod_vec_impl<T, NV>(y, x, shift, scale, L, D, eps);                                                \
	}
#define LN_MOD_VECS(sfx, T) \
	LN_MOD_VEC(sfx, T, 1)   \
	LN_MOD_VEC(sfx, T, 2)   \
	LN_MOD_VEC(sfx, T, 3)   \
	LN_MOD_VEC(sfx, T, 4)   \
	LN_MOD_VEC(sfx, T, 6)   \
	LN_MOD_VEC(sfx, T, 8)
LN_MOD_VECS(f32, float)
LN_MOD_VECS(f16, h16)
LN_MOD_VECS(bf16, b16)

// ---- y = x + (g + bias)·gate[b] ----
// x, g, y (B, L, D) contiguous, gate (B, D), bias (D) or null; n = B·L·D,
// LD = L·D. g + bias and the product are rounded before the sum, as op by
// op (g being a GEMM's output without its bias). vec: D, the pointers and
// n allow 16-byte vectors.

template <typename T>
DI void gated_add_impl(T *R y, const T *R x, const T *R g, const T *R bias, const T *R gate, long long n, long long LD,
                       long long D, int vec) {
	if (vec) {
		const int E = 16 / sizeof(T);
		long long i0 = (BIDX * FZ_BS + TID) * (long long)E;
		if (i0 >= n)
			return;
		const T *gr = gate + (i0 / LD) * D + i0 % D;
		V16<T> vx = *(const V16<T> *)(x + i0), vg = *(const V16<T> *)(g + i0), vb, vy;
		if (bias)
			vb = *(const V16<T> *)(bias + i0 % D);
#pragma unroll
		for (int e = 0; e < E; e++) {
			float gv = ld(&vg.v[e]);
			if (bias)
				gv = rnd(gv + ld(&vb.v[e]), y);
			st(&vy.v[e], ld(&vx.v[e]) + rnd(gv * ld(gr + e), y));
		}
		*(V16<T> *)(y + i0) = vy;
		return;
	}
	long long i = BIDX * FZ_BS + TID;
	if (i >= n)
		return;
	float gv = ld(g + i);
	if (bias)
		gv = rnd(gv + ld(bias + i % D), y);
	st(y + i, ld(x + i) + rnd(gv * ld(gate + (i / LD) * D + i % D), y));
}

#define GATED_ADD(sfx, T)                                                                                       \
	KERNEL void gated_add_##sfx(T *R y, const T *R x, const T *R g, const T *R bias, const T *R gate, long long n, \
	                            long long LD, long long D, int vec) {                                           \
		gated_add_impl<T>(y, x, g, bias, gate, n, LD, D, vec);                                                  \
	}
GATED_ADD(f32, float)
GATED_ADD(f16, h16)
GATED_ADD(bf16, b16)

// ---- q, k, v from a projection's rows into the joint attention layout ----
// src (B, Ls, S): columns [qoff, qoff+H·Dh) are q, likewise k and v, each
// plus bias (S) when set (src being a GEMM's output without its bias; the
// sum rounded). Row r
// of batch b goes to row rowoff + r of q, k, v (B, Lj, H, Dh). q and k get
// RMSNorm over each head (x·rsqrt(mean x² + eps), rounded, times the
// weight, rounded) and, when cos is set, RoPE on interleaved pairs with the
// tables (R, Lj, Dh) f32 at batch stride cstride (0: shared). 32 lanes per
// (b, r, head), 8 per block.

struct QKVArgs {
	long long B, Ls, S, qoff, koff, voff, H, Dh, Lj, rowoff, cstride;
	float eps;
	int pad;
};

// in is src[e] (+ bias[e], rounded like dst).
template <typename T> DI float in_val(const T *R src, const T *R bias, long long e, const T *dst) {
	float v = ld(src + e);
	return bias ? rnd(v + ld(bias + e), dst) : v;
}

template <typename T>
DI void norm_rope_head(T *R dst, const T *R src, const T *R bias, const T *R w, const float *R c, const float *R s,
                       long long Dh, int lane, float eps) {
	long long np = Dh / 2;
	float q = 0.0f;
	for (long long p = lane; p < np; p += 32) {
		float a = in_val(src, bias, 2 * p, dst), b = in_val(src, bias, 2 * p + 1, dst);
		q += a * a + b * b;
	}
	float rs = 1.0f / FP_SQRT(fz_group_sum(q) / (float)Dh + eps);
	for (long long p = lane; p < np; p += 32) {
		float a = rnd(rnd(in_val(src, bias, 2 * p, dst) * rs, dst) * ld(w + 2 * p), dst);
		float b = rnd(rnd(in_val(src, bias, 2 * p + 1, dst) * rs, dst) * ld(w + 2 * p + 1), dst);
		if (c) {
			float ra = a * c[2 * p] - b * s[2 * p];
			float rb = b * c[2 * p + 1] + a * s[2 * p + 1];
			a = ra;
			b = rb;
		}
		st(dst + 2 * p, a);
		st(dst + 2 * p + 1, b);
	}
}

template <typename T>
DI void qkv_impl(T *R qd, T *R kd, T *R vd, const T *R src, const T *R bias, const T *R wq, const T *R wk,
                 const float *R cs, const float *R sn, const QKVArgs &a) {
	long long g = BIDX * 8 + TID / 32;
	int lane = TID % 32;
	if (g >= a.B * a.Ls * a.H)
		return;
	long long h = g % a.H, r = (g / a.H) % a.Ls, b = g / (a.H * a.Ls);
	const T *sr = src + (b * a.Ls + r) * a.S + h * a.Dh;
	long long jr = a.rowoff + r;
	long long o = ((b * a.Lj + jr) * a.H + h) * a.Dh;
	const float *c = 0, *s = 0;
	if (cs) {
		c = cs + b * a.cstride + jr * a.Dh;
		s = sn + b * a.cstride + jr * a.Dh;
	}
	const T *bq = 0, *bk = 0, *bv = 0;
	if (bias) {
		bq = bias + a.qoff + h * a.Dh;
		bk = bias + a.koff + h * a.Dh;
		bv = bias + a.voff + h * a.Dh;
	}
	norm_rope_head<T>(qd + o, sr + a.qoff, bq, wq, c, s, a.Dh, lane, a.eps);
	norm_rope_head<T>(kd + o, sr + a.koff, bk, wk, c, s, a.Dh, lane, a.eps);
	for (long long e = lane; e < a.Dh; e += 32)
		st(vd + o + e, in_val(sr + a.voff, bv, e, vd));
}

// Head dim 128: each lane holds 4 consecutive channels (two RoPE pairs),
// loaded and stored as one vector.
template <typename T> struct alignas(4 * sizeof(T)) V4 {
	T v[4];
};

// in4 is src[4·lane + e] (+ bias, rounded like dst) for e < 4.
template <typename T> DI void in4(float *a, const T *R src, const T *R bias, int lane, const T *dst) {
	V4<T> xv = *(const V4<T> *)(src + 4 * lane);
#pragma unroll
	for (int e = 0; e < 4; e++)
		a[e] = ld(&xv.v[e]);
	if (bias) {
		V4<T> bv = *(const V4<T> *)(bias + 4 * lane);
#pragma unroll
		for (int e = 0; e < 4; e++)
			a[e] = rnd(a[e] + ld(&bv.v[e]), dst);
	}
}

template <typename T>
DI void norm_rope_head128(T *R dst, const T *R src, const T *R bias, const T *R w, const float *R c, const float *R s,
                          int lane, float eps) {
	V4<T> wv = *(const V4<T> *)(w + 4 * lane), ov;
	float a[4];
	in4(a, src, bias, lane, dst);
	float q = 0.0f;
#pragma unroll
	for (int e = 0; e < 4; e++)
		q += a[e] * a[e];
	float rs = 1.0f / FP_SQRT(fz_group_sum(q) / 128.0f + eps);
#pragma unroll
	for (int e = 0; e < 4; e++)
		a[e] = rnd(rnd(a[e] * rs, dst) * ld(&wv.v[e]), dst);
	if (c) {
		F4 cv = *(const F4 *)(c + 4 * lane), sv = *(const F4 *)(s + 4 * lane);
		float r0 = a[0] * cv.x - a[1] * sv.x, r1 = a[1] * cv.y + a[0] * sv.y;
		float r2 = a[2] * cv.z - a[3] * sv.z, r3 = a[3] * cv.w + a[2] * sv.w;
		a[0] = r0;
		a[1] = r1;
		a[2] = r2;
		a[3] = r3;
	}
#pragma unroll
	for (int e = 0; e < 4; e++)
		st(&ov.v[e], a[e]);
	*(V4<T> *)(dst + 4 * lane) = ov;
}

template <typename T>
DI void qkv128_impl(T *R qd, T *R kd, T *R vd, const T *R src, const T *R bias, const T *R wq, const T *R wk,
                    const float *R cs, const float *R sn, const QKVArgs &a) {
	long long g = BIDX * 8 + TID / 32;
	int lane = TID % 32;
	if (g >= a.B * a.Ls * a.H)
		return;
	long long h = g % a.H, r = (g / a.H) % a.Ls, b = g / (a.H * a.Ls);
	const T *sr = src + (b * a.Ls + r) * a.S + h * 128;
	long long jr = a.rowoff + r;
	long long o = ((b * a.Lj + jr) * a.H + h) * 128;
	const float *c = 0, *s = 0;
	if (cs) {
		c = cs + b * a.cstride + jr * 128;
		s = sn + b * a.cstride + jr * 128;
	}
	const T *bq = 0, *bk = 0, *bv = 0;
	if (bias) {
		bq = bias + a.qoff + h * 128;
		bk = bias + a.koff + h * 128;
		bv = bias + a.voff + h * 128;
	}
	norm_rope_head128<T>(qd + o, sr + a.qoff, bq, wq, c, s, lane, a.eps);
	norm_rope_head128<T>(kd + o, sr + a.koff, bk, wk, c, s, lane, a.eps);
	float v[4];
	in4(v, sr + a.voff, bv, lane, vd);
	V4<T> ov;
#pragma unroll
	for (int e = 0; e < 4; e++)
		st(&ov.v[e], v[e]);
	*(V4<T> *)(vd + o + 4 * lane) = ov;
}

#define QKV(sfx, T)                                                                                                  \
	KERNEL void qkv_norm_rope_##sfx(T *R qd, T *R kd, T *R vd, const T *R src, const T *R bias, const T *R wq,      \
	                                const T *R wk, const float *R cs, const float *R sn, QKVArgs a) {               \
		qkv_impl<T>(qd, kd, vd, src, bias, wq, wk, cs, sn, a);                                                       \
	}                                                                                                                \
	KERNEL void qkv_norm_rope128_##sfx(T *R qd, T *R kd, T *R vd, const T *R src, const T *R bias, const T *R wq,   \
	                                   const T *R wk, const float *R cs, const float *R sn, QKVArgs a) {            \
		qkv128_impl<T>(qd, kd, vd, src, bias, wq, wk, cs, sn, a);                                                    \
	}
QKV(f32, float)
QKV(f16, h16)
QKV(bf16, b16)

// ---- y[r, yoff + c] = f(x[r, xoff + c] + bias[xoff + c]) for c < cols ----
// Row strides ys and xs in elements; op 0: GELU (tanh approximation), 1:
// SiLU. x and bias come offset by xoff; bias may be null (x being a GEMM's
// output without its bias; the sum rounded). vec: cols, strides, offsets
// and pointers allow 16-byte vectors. y may be x (in place): each element
// is read and written by one thread.

DI float fz_act(int op, float v) {
	if (op == 0) {
		float u = 0.79788456080286536f * (v + 0.044715f * v * v * v);
		return v * fsigmoid(2.0f * u);
	}
	return v * fsigmoid(v);
}

template <typename T>
DI void act_rows_impl(T *y, const T *x, const T *R bias, long long rows, long long cols, long long ys, long long xs,
                      int op, int vec) {
	if (vec) {
		const int E = 16 / sizeof(T);
		long long cv = cols / E;
		long long i = BIDX * FZ_BS + TID;
		if (i >= rows * cv)
			return;
		long long r = i / cv, c = (i % cv) * E;
		V16<T> vx = *(const V16<T> *)(x + r * xs + c), vb, vy;
		if (bias)
			vb = *(const V16<T> *)(bias + c);
#pragma unroll
		for (int e = 0; e < E; e++) {
			float v = ld(&vx.v[e]);
			if (bias)
				v = rnd(v + ld(&vb.v[e]), y);
			st(&vy.v[e], fz_act(op, v));
		}
		*(V16<T> *)(y + r * ys + c) = vy;
		return;
	}
	long long i = BIDX * FZ_BS + TID;
	if (i >= rows * cols)
		return;
	long long r = i / cols, c = i % cols;
	float v = ld(x + r * xs + c);
	if (bias)
		v = rnd(v + ld(bias + c), y);
	st(y + r * ys + c, fz_act(op, v));
}

#define ACT_ROWS(sfx, T)                                                                                          \
	KERNEL void act_rows_##sfx(T *y, const T *x, const T *R bias, long long rows, long long cols, long long ys,     \
	                           long long xs, int op, int vec) {                                                   \
		act_rows_impl<T>(y, x, bias, rows, cols, ys, xs, op, vec);                                                \
	}
ACT_ROWS(f32, float)
ACT_ROWS(f16, h16)
ACT_ROWS(bf16, b16)
