// framepack kernels: the dialect common to HIP and CUDA.
//
// Every kernel source is compiled three ways: by hiprtc on AMD machines, by
// NVRTC on NVIDIA machines, and offline by clang -x hip -nogpulib -nogpuinc
// (CI, no GPU). So no vendor header is included, f16/bf16 are our own bit
// helpers, and on AMD only clang builtins are used (no ocml: tanhf, erff,
// sinf... are written here from exp, fma and polynomials).
//
// Storage types: float (f32), h16 (f16), b16 (bf16), long long (i64), int
// (i32), unsigned char (u8), bl (bool). Arithmetic is f32.

#if defined(__HIP__) || defined(__HIPCC_RTC__)
#define FP_AMD 1
#else
#define FP_CUDA 1
#endif

#if (defined(FP_AMD) && !defined(__HIPCC_RTC__)) || (defined(FP_CUDA) && !defined(__CUDACC_RTC__))
// Offline compile (clang) without the HIP or CUDA headers.
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __shared__ __attribute__((shared))
#define __launch_bounds__(...) __attribute__((launch_bounds(__VA_ARGS__)))
#endif

#if defined(FP_CUDA) && !defined(__CUDACC_RTC__)
// clang's CUDA path without the CUDA SDK (the kernels shipped as PTX): NVVM
// builtins for what the CUDA headers would declare, and our own math, as
// there is no libdevice.
#define FP_CUDA_OFFLINE 1
#ifndef FP_OWN_MATH
#define FP_OWN_MATH 1
#endif
#endif

#define DI static __device__ inline __attribute__((always_inline))
#define R __restrict__
#define KERNEL extern "C" __global__

#ifdef FP_AMD
#define TID ((int)__builtin_amdgcn_workitem_id_x())
#define BIDX ((long long)__builtin_amdgcn_workgroup_id_x())
#define BIDY ((long long)__builtin_amdgcn_workgroup_id_y())
#define BIDZ ((long long)__builtin_amdgcn_workgroup_id_z())
#define BOUNDS(n) __attribute__((amdgpu_flat_work_group_size(1, n)))
DI void fp_sync() {
	__builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
	__builtin_amdgcn_s_barrier();
	__builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
}
DI float U2F(unsigned int u) { return __builtin_bit_cast(float, u); }
DI unsigned int F2U(float f) { return __builtin_bit_cast(unsigned int, f); }
DI float shfl_xor(float v, int m) {
	int lane = (int)__builtin_amdgcn_mbcnt_hi(~0u, __builtin_amdgcn_mbcnt_lo(~0u, 0u));
	return U2F((unsigned int)__builtin_amdgcn_ds_bpermute((lane ^ m) << 2, (int)F2U(v)));
}
#define FP_FMA(a, b, c) __builtin_fmaf(a, b, c)
#define FP_RINT(x) __builtin_rintf(x)
#define FP_LDEXP(x, e) __builtin_amdgcn_ldexpf(x, e)
#define FP_SQRT(x) __builtin_sqrtf(x)
#define FP_FABS(x) __builtin_fabsf(x)
#define FP_FLOOR(x) __builtin_floorf(x)
#define FP_TRUNC(x) __builtin_truncf(x)
#define FP_EXP2(x) __builtin_exp2f(x)
#define FP_DSQRT(x) __builtin_sqrt(x)
#define FP_OWN_MATH 1
#elif defined(FP_CUDA_OFFLINE)
#define TID ((int)__nvvm_read_ptx_sreg_tid_x())
#define BIDX ((long long)__nvvm_read_ptx_sreg_ctaid_x())
#define BIDY ((long long)__nvvm_read_ptx_sreg_ctaid_y())
#define BIDZ ((long long)__nvvm_read_ptx_sreg_ctaid_z())
#define BOUNDS(n) __launch_bounds__(n)
#define fp_sync() __syncthreads()
#define __syncwarp() __nvvm_bar_warp_sync(0xffffffffu)
#define __any_sync(mask, p) __nvvm_vote_any_sync(mask, p)
DI float U2F(unsigned int u) { return __builtin_bit_cast(float, u); }
DI unsigned int F2U(float f) { return __builtin_bit_cast(unsigned int, f); }
DI float shfl_xor(float v, int m) { return __nvvm_shfl_sync_bfly_f32(0xffffffffu, v, m, 0x1f); }
// ldexp for the exponents fexp produces (−150…128): two exact powers of two.
DI float fp_ldexp(float x, int e) {
	int h = e / 2;
	return x * U2F((unsigned int)(h + 127) << 23) * U2F((unsigned int)(e - h + 127) << 23);
}
#define FP_FMA(a, b, c) __builtin_fmaf(a, b, c)
#define FP_RINT(x) __builtin_rintf(x)
#define FP_LDEXP(x, e) fp_ldexp(x, e)
#define FP_SQRT(x) __nvvm_sqrt_rn_f(x)
#define FP_FABS(x) __builtin_fabsf(x)
#define FP_FLOOR(x) __builtin_floorf(x)
#define FP_TRUNC(x) __builtin_truncf(x)
#define FP_EXP2(x) __nvvm_ex2_approx_f(x)
#define FP_DSQRT(x) __nvvm_sqrt_rn_d(x)
#define fmaxf(a, b) __builtin_fmaxf(a, b)
#else
#define TID ((int)threadIdx.x)
#define BIDX ((long long)blockIdx.x)
#define BIDY ((long long)blockIdx.y)
#define BIDZ ((long long)blockIdx.z)
#define BOUNDS(n) __launch_bounds__(n)
#define fp_sync() __syncthreads()
DI float U2F(unsigned int u) { return __uint_as_float(u); }
DI unsigned int F2U(float f) { return __float_as_uint(f); }
DI float shfl_xor(float v, int m) { return __shfl_xor_sync(0xffffffffu, v, m); }
#define FP_FMA(a, b, c) fmaf(a, b, c)
#define FP_RINT(x) rintf(x)
#define FP_LDEXP(x, e) ldexpf(x, e)
#define FP_SQRT(x) sqrtf(x)
#define FP_FABS(x) fabsf(x)
#define FP_FLOOR(x) floorf(x)
#define FP_TRUNC(x) truncf(x)
#define FP_EXP2(x) exp2f(x)
#define FP_DSQRT(x) sqrt(x)
#endif

#define FP_INF U2F(0x7f800000u)
#define FP_NAN U2F(0x7fc00000u)

// ---- math: the vendor library on CUDA; our own on AMD, and on CUDA when
// FP_OWN_MATH is defined (so the AMD path is tested on NVIDIA hardware) ----

#ifdef FP_OWN_MATH
// exp: 2^k · p(r), r = x − k·ln2 in two parts, degree-7 polynomial.
DI float fexp(float x) {
	if (x != x)
		return x;
	if (x > 88.8f)
		return FP_INF;
	if (x < -104.0f)
		return 0.0f;
	float k = FP_RINT(x * 1.44269504088896341f);
	float r = FP_FMA(k, -0.693115234375f, x);
	r = FP_FMA(k, -3.19461833e-05f, r);
	float p = 1.98412698e-04f;
	p = FP_FMA(p, r, 1.38888889e-03f);
	p = FP_FMA(p, r, 8.33333333e-03f);
	p = FP_FMA(p, r, 4.16666667e-02f);
	p = FP_FMA(p, r, 1.66666667e-01f);
	p = FP_FMA(p, r, 0.5f);
	p = FP_FMA(p, r, 1.0f);
	p = FP_FMA(p, r, 1.0f);
	return FP_LDEXP(p, (int)k);
}

// log: x = m·2^e with m in [√½, √2), log m = 2·atanh((m−1)/(m+1)).
DI float flog(float x) {
	if (x != x || x < 0.0f)
		return FP_NAN;
	if (x == 0.0f)
		return -FP_INF;
	if (x == FP_INF)
		return x;
	int e = 0;
	unsigned int u = F2U(x);
	if (u < 0x00800000u) { // subnormal
		x *= 16777216.0f;
		u = F2U(x);
		e = -24;
	}
	e += (int)(u >> 23) - 127;
	float m = U2F((u & 0x007fffffu) | 0x3f800000u);
	if (m > 1.41421356f) {
		m *= 0.5f;
		e += 1;
	}
	float s = (m - 1.0f) / (m + 1.0f);
	float s2 = s * s;
	float p = FP_FMA(s2, 1.0f / 11.0f, 1.0f / 9.0f);
	p = FP_FMA(p, s2, 1.0f / 7.0f);
	p = FP_FMA(p, s2, 1.0f / 5.0f);
	p = FP_FMA(p, s2, 1.0f / 3.0f);
	p *= s2;
	float fe = (float)e;
	return FP_FMA(fe, 0.693115234375f, FP_FMA(2.0f * s, p, FP_FMA(fe, 3.19461833e-05f, 2.0f * s)));
}

// sin/cos: Cody–Waite reduction by π/2 in three parts (accurate for
// |x| below ~1e5), Taylor polynomials on [−π/4, π/4].
DI void fsincos(float x, float *sp, float *cp) {
	float k = FP_RINT(x * 0.636619772367581343f);
	float r = FP_FMA(k, -1.5707963705062866f, x);
	r = FP_FMA(k, 4.371138828673793e-08f, r);
	r = FP_FMA(k, 1.7763568394002505e-15f, r);
	float r2 = r * r;
	float s = FP_FMA(r2, 2.75573192e-06f, -1.98412698e-04f);
	s = FP_FMA(s, r2, 8.33333333e-03f);
	s = FP_FMA(s, r2, -1.66666667e-01f);
	s = FP_FMA(s * r2, r, r);
	float c = FP_FMA(r2, -2.75573192e-07f, 2.48015873e-05f);
	c = FP_FMA(c, r2, -1.38888889e-03f);
	c = FP_FMA(c, r2, 4.16666667e-02f);
	c = FP_FMA(c, r2, -0.5f);
	c = FP_FMA(c, r2, 1.0f);
	int q = (int)k & 3;
	float sn = (q & 1) ? c : s;
	float cs = (q & 1) ? s : c;
	if (q == 1 || q == 2)
		cs = -cs;
	if (q & 2)
		sn = -sn;
	if (x != x || FP_FABS(x) == FP_INF)
		sn = cs = FP_NAN;
	*sp = sn;
	*cp = cs;
}
DI float fsin(float x) {
	float s, c;
	fsincos(x, &s, &c);
	return s;
}
DI float fcos(float x) {
	float s, c;
	fsincos(x, &s, &c);
	return c;
}

// tanh: odd Taylor series near 0, 1 − 2/(e^{2|x|}+1) elsewhere.
DI float ftanh(float x) {
	float a = FP_FABS(x);
	if (a < 0.55f) {
		float x2 = x * x;
		float p = FP_FMA(x2, 5.90027440e-04f, -1.45583438e-03f);
		p = FP_FMA(p, x2, 3.59212803e-03f);
		p = FP_FMA(p, x2, -8.86323552e-03f);
		p = FP_FMA(p, x2, 2.18694885e-02f);
		p = FP_FMA(p, x2, -5.39682540e-02f);
		p = FP_FMA(p, x2, 1.33333333e-01f);
		p = FP_FMA(p, x2, -3.33333333e-01f);
		return FP_FMA(p * x2, x, x);
	}
	if (x != x)
		return x;
	float t = 1.0f - 2.0f / (fexp(2.0f * a) + 1.0f);
	return x < 0.0f ? -t : t;
}

// erfc for z ≥ 0 (Numerical Recipes' erfcc; relative error < 1.2e-7).
DI float ferfc_pos(float z) {
	float t = 1.0f / FP_FMA(0.5f, z, 1.0f);
	float p = FP_FMA(t, 0.17087277f, -0.82215223f);
	p = FP_FMA(p, t, 1.48851587f);
	p = FP_FMA(p, t, -1.13520398f);
	p = FP_FMA(p, t, 0.27886807f);
	p = FP_FMA(p, t, -0.18628806f);
	p = FP_FMA(p, t, 0.09678418f);
	p = FP_FMA(p, t, 0.37409196f);
	p = FP_FMA(p, t, 1.00002368f);
	p = FP_FMA(p, t, -1.26551223f);
	return t * fexp(FP_FMA(-z, z, p));
}

// erfc on the whole line: Taylor series of erf for |z| < 0.5.
DI float ferfc(float z) {
	if (z != z)
		return z;
	if (FP_FABS(z) < 0.5f) {
		float z2 = z * z;
		// erf(z) = 2/√π · z · Σ (−1)^n z^{2n} / (n!(2n+1))
		float p = FP_FMA(z2, -1.32275132e-05f, 1.06837607e-04f);
		p = FP_FMA(p, z2, -7.57575758e-04f);
		p = FP_FMA(p, z2, 4.62962963e-03f);
		p = FP_FMA(p, z2, -2.38095238e-02f);
		p = FP_FMA(p, z2, 1.0e-01f);
		p = FP_FMA(p, z2, -3.33333333e-01f);
		p = FP_FMA(p, z2, 1.0f);
		return 1.0f - 1.12837916709551257f * z * p;
	}
	return z > 0.0f ? ferfc_pos(z) : 2.0f - ferfc_pos(-z);
}

DI float fpow(float x, float a) {
	if (a == 0.0f)
		return 1.0f;
	if (x != x || a != a)
		return FP_NAN;
	float ax = FP_FABS(x);
	bool aint = FP_TRUNC(a) == a;
	if (x < 0.0f && !aint)
		return FP_NAN;
	float r;
	if (ax == 0.0f)
		r = a > 0.0f ? 0.0f : FP_INF;
	else if (ax == FP_INF)
		r = a > 0.0f ? FP_INF : 0.0f;
	else
		r = fexp(a * flog(ax));
	bool odd = aint && FP_FABS(a) < 16777216.0f && (((long long)a) & 1);
	return (x < 0.0f || (x == 0.0f && F2U(x) >> 31)) && odd ? -r : r;
}
#else
DI float fexp(float x) { return expf(x); }
DI float flog(float x) { return logf(x); }
DI float fsin(float x) { return sinf(x); }
DI float fcos(float x) { return cosf(x); }
DI float ftanh(float x) { return tanhf(x); }
DI float ferfc(float x) { return erfcf(x); }
DI float fpow(float x, float a) { return powf(x, a); }
#endif

DI float fsigmoid(float x) { return 1.0f / (1.0f + fexp(-x)); }
DI float fmax_nan(float a, float b) { return (a > b || a != a) ? a : b; }
DI float fmin_nan(float a, float b) { return (a < b || a != a) ? a : b; }

// ---- storage types and conversions ----

struct h16 {
	unsigned short u;
};
struct b16 {
	unsigned short u;
};
struct bl {
	unsigned char u;
};

#if defined(FP_CUDA_OFFLINE)
// One conversion instruction each way (cvt, round to nearest even): the
// bit-level forms below cost tens of instructions an element, enough to
// make the f16 memory-bound kernels compute-bound.
DI float h2f(unsigned short h) { return (float)__builtin_bit_cast(_Float16, h); }
DI unsigned short f2h(float f) { return __builtin_bit_cast(unsigned short, (_Float16)f); }
#else
DI float h2f(unsigned short h) {
	unsigned int s = (unsigned int)(h & 0x8000u) << 16;
	unsigned int e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
	if (e == 0) {
		float v = (float)m * 5.9604644775390625e-08f; // m · 2^-24, exact
		return s ? -v : v;
	}
	if (e == 31)
		return U2F(s | 0x7f800000u | (m << 13));
	return U2F(s | ((e + 112u) << 23) | (m << 13));
}

// Round to nearest even, overflow to infinity, NaN stays NaN.
DI unsigned short f2h(float f) {
	unsigned int x = F2U(f);
	unsigned int s = (x >> 16) & 0x8000u;
	unsigned int a = x & 0x7fffffffu;
	if (a > 0x7f800000u)
		return (unsigned short)(s | 0x7e00u | ((a >> 13) & 0x3ffu));
	if (a >= 0x477ff000u)
		return (unsigned short)(s | 0x7c00u);
	if (a >= 0x38800000u) {
		unsigned int r = a - 0x38000000u;
		r += 0xfffu + ((r >> 13) & 1u);
		return (unsigned short)(s | (r >> 13));
	}
	// Subnormal halves: units of 2^-24, rounded to nearest even.
	unsigned int q = (unsigned int)FP_RINT(U2F(a) * 16777216.0f);
	return (unsigned short)(s | q);
}
#endif

DI float b2f(unsigned short h) { return U2F((unsigned int)h << 16); }
DI unsigned short f2b(float f) {
	unsigned int x = F2U(f);
	if ((x & 0x7fffffffu) > 0x7f800000u)
		return (unsigned short)((x >> 16) | 0x40u);
	return (unsigned short)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

DI float ld(const float *p) { return *p; }
DI float ld(const h16 *p) { return h2f(p->u); }
DI float ld(const b16 *p) { return b2f(p->u); }
DI void st(float *p, float v) { *p = v; }
DI void st(h16 *p, float v) { p->u = f2h(v); }
DI void st(b16 *p, float v) { p->u = f2b(v); }

// Rounding a value to a storage type's precision.
DI float rnd(float v, const float *) { return v; }
DI float rnd(float v, const h16 *) { return h2f(f2h(v)); }
DI float rnd(float v, const b16 *) { return b2f(f2b(v)); }

// Cast and fill go through double, as the CPU backend does: exact for every
// value of every type except int64 beyond 2^53. Integers truncate toward
// zero; u8 wraps; bool is v != 0.
DI double ldd(const float *p) { return *p; }
DI double ldd(const h16 *p) { return h2f(p->u); }
DI double ldd(const b16 *p) { return b2f(p->u); }
DI double ldd(const long long *p) { return (double)*p; }
DI double ldd(const int *p) { return (double)*p; }
DI double ldd(const unsigned char *p) { return (double)*p; }
DI double ldd(const bl *p) { return (double)p->u; }
DI void std_(float *p, double v) { *p = (float)v; }
DI void std_(h16 *p, double v) { p->u = f2h((float)v); }
DI void std_(b16 *p, double v) { p->u = f2b((float)v); }
DI void std_(long long *p, double v) { *p = (long long)v; }
DI void std_(int *p, double v) { *p = (int)v; }
DI void std_(unsigned char *p, double v) { *p = (unsigned char)(long long)v; }
DI void std_(bl *p, double v) { p->u = v != 0.0 ? 1 : 0; }

// 16-byte vectors of a storage type, for full-width loads and stores.
template <typename T> struct V16 {
	T v[16 / sizeof(T)];
} __attribute__((aligned(16)));

DI bool aligned16(const void *p) { return ((unsigned long long)p & 15ull) == 0; }

// ---- block reductions (shared memory trees; BS a power of two) ----

template <int BS> DI float block_sum(float v, float *sh) {
	sh[TID] = v;
	fp_sync();
#pragma unroll
	for (int s = BS / 2; s > 0; s >>= 1) {
		if (TID < s)
			sh[TID] += sh[TID + s];
		fp_sync();
	}
	float r = sh[0];
	fp_sync();
	return r;
}

template <int BS> DI float block_max(float v, float *sh) {
	sh[TID] = v;
	fp_sync();
#pragma unroll
	for (int s = BS / 2; s > 0; s >>= 1) {
		if (TID < s)
			sh[TID] = fmax_nan(sh[TID], sh[TID + s]);
		fp_sync();
	}
	float r = sh[0];
	fp_sync();
	return r;
}

// Strided views have at most this many axes (after merging contiguous ones).
#define MAXR 6

struct F4 {
	float x, y, z, w;
} __attribute__((aligned(16)));
