// f32 attention for NVIDIA (sm_80+), head dim 128, unmasked or with a key mask: the
// transformer's attention at --dtype f32, exact f32 products on the FMA
// units (no TF32). The AMD build of this module is empty; attention.hip's
// kernels and the BLAS path serve everything else.
//
// Flash style, as a register-tiled SIMT GEMM: a block of 256 threads owns
// 128 queries of one head and walks the keys 64 at a time. Each thread
// holds an 8×4 tile of S = q·kᵀ (queries r(i), keys xg + 16·j) and an 8×8
// tile of O (the same queries, dims 4·xg + c and 64 + 4·xg + c), so every
// value read from shared memory feeds 4 to 8 FMAs. The 16 threads sharing
// a query row are 16 consecutive lanes of one warp: the row maximum of the
// online softmax is four shuffles, its running sum stays per thread until
// the end, and once the maxima settle the warp skips the rescale of O. P
// goes through shared memory (transposed) to become the A operand of P·V.
// The next K tile is copied in (cp.async, no registers) while P·V is
// computed, the next V tile while S is: two barriers a tile.
//
// Shared memory (dynamic, 164 KiB): Q (128 × 132), K (64 × 132), V
// (64 × 128), P (64 keys × 132). Rows of 132 floats put consecutive rows 4
// banks apart, so the 16-byte reads of K rows and the writes of P rows are
// free of bank conflicts.

#define LOG2E 1.44269504088896341f

// AttnArgs: the same layout as in attention.hip.
struct AttnArgs {
	long long B, Lq, Lk, Hq, Hkv, D;
	long long frame_len;    // > 0: frame-causal mask
	long long mask_bstride; // elements between batches of the additive mask (0: shared)
	float scale_log2;       // scale · log2(e)
	int causal;
};

#if defined(FP_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define AF_NT 256 // threads
#define AF_BQ 128 // queries per block
#define AF_BK 64  // keys per tile
#define AF_D 128  // head dim
#define AF_LD 132 // row stride of Q, K and P in shared memory
#define AF_LV 128 // row stride of V

extern __shared__ F4 af_smem[];

DI unsigned af_smem_addr(const void *p) {
	unsigned a;
	asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
	return a;
}

// af_load queues the copy (cp.async, no registers) of one K or V tile of
// keys k0 … k0+63 into shared rows ld apart, zeros past Lk: thread t
// copies dims 4·(t%32) … +3 of keys t/32 + 8·u.
DI void af_load(float *dst, int ld, const float *R src, long long rowstride, long long k0, long long Lk) {
	const int c = 4 * (TID & 31), r = TID >> 5;
#pragma unroll
	for (int u = 0; u < 8; u++) {
		long long key = k0 + r + 8 * u;
		bool ok = key < Lk;
		const float *from = src + (ok ? key * rowstride : 0) + c;
		asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(af_smem_addr(dst + (r + 8 * u) * ld + c)),
		             "l"(from), "r"(ok ? 16 : 0));
	}
	asm volatile("cp.async.commit_group;");
}
// af_wait waits for this thread's copies but the n latest groups.
template <int N> DI void af_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N)); }

DI void fma4(float *acc, float a, F4 b) {
	acc[0] = FP_FMA(a, b.x, acc[0]);
	acc[1] = FP_FMA(a, b.y, acc[1]);
	acc[2] = FP_FMA(a, b.z, acc[2]);
	acc[3] = FP_FMA(a, b.w, acc[3]);
}

// q (B, Lq, Hq, 128), k and v (B, Lk, Hkv, 128), o like q; keymask (B, Lk)
// or null (0 hides a key). Grid: (⌈Lq/128⌉, Hq, B).
template <int U>
DI void attn_f32_impl(float *R o, const float *R q, const float *R k, const float *R v, const float *R keymask,
                      const AttnArgs &a) {
	float *Qs = (float *)af_smem;
	float *Ks = Qs + AF_BQ * AF_LD;
	float *Vs = Ks + AF_BK * AF_LD;
	float *Ps = Vs + AF_BK * AF_LV;
	const int lane = TID & 31;
	const int qg = 2 * (TID >> 5) + (lane >> 4); // query group: rows 4·qg … +3 and 64 + 4·qg … +3
	const int xg = lane & 15;                    // key group (S) and dim group (O)
	const long long b = BIDZ, h = BIDY;
	const long long hk = h / (a.Hq / a.Hkv);
	const long long q0 = BIDX * AF_BQ;
	const long long qstride = a.Hq * AF_D, kstride = a.Hkv * AF_D;
	const float *kb = k + (b * a.Lk * a.Hkv + hk) * AF_D;
	const float *vb = v + (b * a.Lk * a.Hkv + hk) * AF_D;

	// The block's queries, zeros past Lq.
	{
		const float *qb = q + ((b * a.Lq + q0) * a.Hq + h) * AF_D;
		for (int idx = TID; idx < AF_BQ * AF_D / 4; idx += AF_NT) {
			int r = idx >> 5, c = 4 * (idx & 31);
			F4 x = q0 + r < a.Lq ? *(const F4 *)(qb + r * qstride + c) : F4{0.0f, 0.0f, 0.0f, 0.0f};
			*(F4 *)(Qs + r * AF_LD + c) = x;
		}
	}
	af_load(Ks, AF_LD, kb, kstride, 0, a.Lk);
	af_load(Vs, AF_LV, vb, kstride, 0, a.Lk);

	float acc[8][8], m[8], l[8];
#pragma unroll
	for (int i = 0; i < 8; i++) {
		m[i] = -FP_INF;
		l[i] = 0.0f;
#pragma unroll
		for (int c = 0; c < 8; c++)
			acc[i][c] = 0.0f;
	}
	const float *Qr = Qs + 4 * qg * AF_LD; // row r(i): Qr + (i < 4 ? i : 60 + i)·AF_LD
	const int ntiles = (int)((a.Lk + AF_BK - 1) / AF_BK);
	af_wait<0>();
	fp_sync();
	for (int t = 0; t < ntiles; t++) {
		const long long k0 = (long long)t * AF_BK;
		const bool more = t + 1 < ntiles;

		// S = q·kᵀ for rows r(i), keys xg + 16·j.
		float s[8][4];
#pragma unroll
		for (int i = 0; i < 8; i++)
			s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
#pragma unroll U
		for (int d = 0; d < AF_D; d += 4) {
			F4 kf[4];
#pragma unroll
			for (int j = 0; j < 4; j++)
				kf[j] = *(const F4 *)(Ks + (xg + 16 * j) * AF_LD + d);
#pragma unroll
			for (int i = 0; i < 8; i++) {
				F4 qf = *(const F4 *)(Qr + (i < 4 ? i : 60 + i) * AF_LD + d);
#pragma unroll
				for (int j = 0; j < 4; j++) {
					s[i][j] = FP_FMA(qf.x, kf[j].x, s[i][j]);
					s[i][j] = FP_FMA(qf.y, kf[j].y, s[i][j]);
					s[i][j] = FP_FMA(qf.z, kf[j].z, s[i][j]);
					s[i][j] = FP_FMA(qf.w, kf[j].w, s[i][j]);
				}
			}
		}

		// Online softmax in log2 units; masked keys and those past Lk are
		// -inf, a row that has seen none keeps p = 0 and its state.
		if (!keymask && k0 + AF_BK <= a.Lk) {
#pragma unroll
			for (int i = 0; i < 8; i++)
#pragma unroll
				for (int j = 0; j < 4; j++)
					s[i][j] *= a.scale_log2;
		} else {
#pragma unroll
			for (int j = 0; j < 4; j++) {
				long long key = k0 + xg + 16 * j;
				bool ok = key < a.Lk && (!keymask || keymask[b * a.Lk + key] != 0.0f);
#pragma unroll
				for (int i = 0; i < 8; i++)
					s[i][j] = ok ? s[i][j] * a.scale_log2 : -FP_INF;
			}
		}
		float alpha[8];
		bool rescale = false;
#pragma unroll
		for (int i = 0; i < 8; i++) {
			float mx = fmax_nan(fmax_nan(s[i][0], s[i][1]), fmax_nan(s[i][2], s[i][3]));
#pragma unroll
			for (int msk = 1; msk < 16; msk <<= 1)
				mx = fmax_nan(mx, shfl_xor(mx, msk));
			float mn = fmax_nan(m[i], mx);
			float ms = mn == -FP_INF ? 0.0f : mn;
			alpha[i] = FP_EXP2(m[i] - ms);
			rescale = rescale || alpha[i] != 1.0f;
			m[i] = mn;
			float sum = 0.0f;
#pragma unroll
			for (int j = 0; j < 4; j++) {
				s[i][j] = FP_EXP2(s[i][j] - ms);
				sum += s[i][j];
			}
			l[i] = l[i] * alpha[i] + sum;
		}
		// Once the row maxima settle, no row of the warp moves: skip the
		// rescale (a warp-uniform branch).
		if (__any_sync(0xffffffffu, rescale)) {
#pragma unroll
			for (int i = 0; i < 8; i++)
#pragma unroll
				for (int c = 0; c < 8; c++)
					acc[i][c] *= alpha[i];
		}
		// P, transposed; the last P·v is done with it (the barrier after
		// it).
#pragma unroll
		for (int j = 0; j < 4; j++) {
			float *pr = Ps + (xg + 16 * j) * AF_LD + 4 * qg;
			*(F4 *)pr = F4{s[0][j], s[1][j], s[2][j], s[3][j]};
			*(F4 *)(pr + 64) = F4{s[4][j], s[5][j], s[6][j], s[7][j]};
		}
		af_wait<0>(); // this tile's V (queued after the last P·v)
		fp_sync();    // P and V are in, every thread is done with K
		// The next K tile comes in during P·v.
		if (more)
			af_load(Ks, AF_LD, kb, kstride, k0 + AF_BK, a.Lk);

		// O += P·v for rows r(i), dims 4·xg + c and 64 + 4·xg + c.
#pragma unroll U
		for (int kk = 0; kk < AF_BK; kk++) {
			const float *pr = Ps + kk * AF_LD + 4 * qg;
			const float *vr = Vs + kk * AF_LV + 4 * xg;
			F4 p0 = *(const F4 *)pr, p1 = *(const F4 *)(pr + 64);
			F4 v0 = *(const F4 *)vr, v1 = *(const F4 *)(vr + 64);
			float pv[8] = {p0.x, p0.y, p0.z, p0.w, p1.x, p1.y, p1.z, p1.w};
#pragma unroll
			for (int i = 0; i < 8; i++) {
				fma4(acc[i], pv[i], v0);
				fma4(acc[i] + 4, pv[i], v1);
			}
		}
		af_wait<0>(); // the next K tile
		fp_sync();    // every thread is done with V and P, and the K tile is in
		// The next V tile comes in during the next q·kᵀ.
		if (more)
			af_load(Vs, AF_LV, vb, kstride, k0 + AF_BK, a.Lk);
	}

	// The row sums across the 16 lanes; a query that saw no key gets zeros,
	// as the CPU backend's.
#pragma unroll
	for (int i = 0; i < 8; i++) {
		float li = l[i];
#pragma unroll
		for (int msk = 1; msk < 16; msk <<= 1)
			li += shfl_xor(li, msk);
		const long long row = q0 + 4 * qg + (i < 4 ? i : 60 + i);
		if (row >= a.Lq)
			continue;
		float inv = li > 0.0f ? 1.0f / li : 0.0f;
		float *orow = o + ((b * a.Lq + row) * a.Hq + h) * AF_D + 4 * xg;
		*(F4 *)orow = F4{acc[i][0] * inv, acc[i][1] * inv, acc[i][2] * inv, acc[i][3] * inv};
		*(F4 *)(orow + 64) = F4{acc[i][4] * inv, acc[i][5] * inv, acc[i][6] * inv, acc[i][7] * inv};
	}
}

// attn_f32_128_uU: U is the unroll of the inner products' loops.
#define ATTN_F32(U)                                                                                          \
	KERNEL __launch_bounds__(AF_NT, 1) void attn_f32_128_u##U(float *R o, const float *R q, const float *R k, \
	                                                         const float *R v, const float *R keymask,       \
	                                                         AttnArgs a) {                                   \
		attn_f32_impl<U>(o, q, k, v, keymask, a);                                                            \
	}
ATTN_F32(2)
ATTN_F32(4)
ATTN_F32(8)
#endif
