// Tensor-core attention for NVIDIA (sm_80+): bf16/f16, head dim 64 or 128,
// on mma.sync m16n8k16 with f32 accumulators. The AMD build of this module is
// empty; the generic kernels of attention.hip serve everything else.
//
// Two kernels, both FlashAttention-2 style (online softmax in log2 units, P
// kept in registers: the S accumulator layout is the A operand layout of the
// P·V product, K and V tiles brought into shared memory by cp.async):
//  - attn_flash_*: no mask. 4 warps × 32 queries per block, so every K/V
//    fragment read from shared memory feeds two m16 tiles; Q sits in shared
//    memory and is read by ldmatrix; K/V tiles of 64 keys double-buffered
//    with one barrier per tile; 2 blocks per multiprocessor (255 registers,
//    102 KiB of shared memory at D = 128). 338 TFLOP/s at L = 18000,
//    24 heads × 128, bf16 on an H200.
//  - attn_mma_*: the masked cases (causal, frame-causal, key mask, additive
//    mask): 4 warps × 16 queries, key tiles skipped past the causal limit.

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
#define MMA_BK 64

DI unsigned pack2(float lo, float hi, const b16 *) {
	unsigned r;
	asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
	return r;
}
DI unsigned pack2(float lo, float hi, const h16 *) {
	unsigned r;
	asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
	return r;
}
DI void mma16816(float *c, const unsigned *a, unsigned b0, unsigned b1, const b16 *) {
	asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
	             "{%0,%1,%2,%3};"
	             : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
	             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
DI void mma16816(float *c, const unsigned *a, unsigned b0, unsigned b1, const h16 *) {
	asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
	             "{%0,%1,%2,%3};"
	             : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
	             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
DI unsigned smem_addr(const void *p) {
	unsigned a;
	asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
	return a;
}
DI void ldsm4(unsigned *r, const void *p) {
	unsigned addr = smem_addr(p);
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
	             : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
	             : "r"(addr));
}
DI void ldsm4t(unsigned *r, const void *p) {
	unsigned addr = smem_addr(p);
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
	             : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
	             : "r"(addr));
}

struct U4 {
	unsigned x, y, z, w;
} __attribute__((aligned(16)));

DI void cp_async16(void *dst, const void *src, bool valid) {
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem_addr(dst)), "l"(src), "r"(valid ? 16 : 0));
}
DI void cp_commit() { asm volatile("cp.async.commit_group;"); }
DI void cp_wait_all() { asm volatile("cp.async.wait_group 0;"); }
DI void cp_wait_one() { asm volatile("cp.async.wait_group 1;"); }

extern __shared__ U4 fp_dyn_smem[];

// attn_mma_load queues the copy of one K and V tile into shared memory
// (keys past Lk are zero-filled).
template <int D, int NT>
DI void attn_mma_load(unsigned short *Ks, unsigned short *Vs, const unsigned short *k, const unsigned short *v,
                      long long k0, long long b, long long hk, const AttnArgs &a) {
	const int RS = D + 8;
	for (int idx = TID; idx < MMA_BK * D / 8; idx += NT) {
		int row = idx / (D / 8), col = (idx % (D / 8)) * 8;
		long long key = k0 + row;
		bool ok = key < a.Lk;
		long long off = ok ? ((b * a.Lk + key) * a.Hkv + hk) * D + col : 0;
		cp_async16(Ks + row * RS + col, k + off, ok);
		cp_async16(Vs + row * RS + col, v + off, ok);
	}
}

// Shared memory: two stages of K and V tiles, (D+8)-half rows.
template <typename T, int D, int W>
DI void attn_mma_impl(T *R o, const T *R q, const T *R k, const T *R v, const float *R keymask, const float *R mask,
                      const AttnArgs &a) {
	const int RS = D + 8; // shared row stride in halves: rows land 4 banks apart
	const int NT = 32 * W, BQ = 16 * W, TILE = MMA_BK * RS;
	unsigned short *smem = (unsigned short *)fp_dyn_smem;
	const int warp = TID / 32, lane = TID % 32, r = lane / 4, c = lane % 4;
	const long long b = BIDZ, h = BIDY;
	const long long hk = h / (a.Hq / a.Hkv);
	const long long q0 = BIDX * BQ + warp * 16;
	const unsigned short *kb = (const unsigned short *)k, *vb = (const unsigned short *)v;

	// Q as A fragments, one per 16 dims.
	unsigned qf[D / 16][4];
	const unsigned short *qb = (const unsigned short *)q;
#pragma unroll
	for (int half = 0; half < 2; half++) {
		long long row = q0 + r + 8 * half;
		bool ok = row < a.Lq;
		const unsigned short *qr = qb + ((b * a.Lq + (ok ? row : 0)) * a.Hq + h) * D;
#pragma unroll
		for (int kk = 0; kk < D / 16; kk++) {
			qf[kk][half] = ok ? *(const unsigned *)(qr + kk * 16 + 2 * c) : 0u;
			qf[kk][2 + half] = ok ? *(const unsigned *)(qr + kk * 16 + 8 + 2 * c) : 0u;
		}
	}
	float m[2] = {-FP_INF, -FP_INF}, l[2] = {0.0f, 0.0f};
	float acc[D / 8][4];
#pragma unroll
	for (int i = 0; i < D / 8; i++)
		acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;

	long long qlast = BIDX * BQ + BQ - 1;
	if (qlast > a.Lq - 1)
		qlast = a.Lq - 1;
	long long kend = a.Lk;
	if (a.causal && qlast + 1 < kend)
		kend = qlast + 1;
	if (a.frame_len > 0 && (qlast / a.frame_len + 1) * a.frame_len < kend)
		kend = (qlast / a.frame_len + 1) * a.frame_len;
	const bool masked = a.causal || a.frame_len > 0 || keymask || mask;
	const long long ntiles = (kend + MMA_BK - 1) / MMA_BK;

	if (ntiles > 0) {
		attn_mma_load<D, NT>(smem, smem + TILE, kb, vb, 0, b, hk, a);
		cp_commit();
	}
	for (long long t = 0; t < ntiles; t++) {
		const long long k0 = t * MMA_BK;
		if (t + 1 < ntiles) {
			unsigned short *nx = smem + ((t + 1) & 1) * 2 * TILE;
			attn_mma_load<D, NT>(nx, nx + TILE, kb, vb, k0 + MMA_BK, b, hk, a);
			cp_commit();
			cp_wait_one();
		} else {
			cp_wait_all();
		}
		fp_sync();
		const unsigned short *Ks = smem + (t & 1) * 2 * TILE, *Vs = Ks + TILE;

		float s[MMA_BK / 8][4];
#pragma unroll
		for (int nt = 0; nt < MMA_BK / 8; nt++)
			s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
		for (int kk = 0; kk < D / 16; kk++)
#pragma unroll
			for (int nt = 0; nt < MMA_BK / 8; nt += 2) {
				unsigned bf[4];
				ldsm4(bf, Ks + ((nt + lane / 16) * 8 + lane % 8) * RS + kk * 16 + ((lane / 8) % 2) * 8);
				mma16816(s[nt], qf[kk], bf[0], bf[1], o);
				mma16816(s[nt + 1], qf[kk], bf[2], bf[3], o);
			}

		bool full = !masked && k0 + MMA_BK <= a.Lk;
#pragma unroll
		for (int nt = 0; nt < MMA_BK / 8; nt++)
#pragma unroll
			for (int e = 0; e < 4; e++) {
				float sv = s[nt][e] * a.scale_log2;
				if (!full) {
					long long row = q0 + r + (e >= 2 ? 8 : 0);
					long long qc = row < a.Lq ? row : a.Lq - 1;
					long long key = k0 + nt * 8 + 2 * c + (e & 1);
					bool ok = key < kend && (!a.causal || key <= qc) &&
					          (a.frame_len <= 0 || key / a.frame_len <= qc / a.frame_len) &&
					          (!keymask || keymask[b * a.Lk + key] != 0.0f);
					if (ok && mask)
						sv += mask[b * a.mask_bstride + qc * a.Lk + key] * LOG2E;
					sv = ok ? sv : -FP_INF;
				}
				s[nt][e] = sv;
			}

		float alpha[2];
#pragma unroll
		for (int half = 0; half < 2; half++) {
			float mx = -FP_INF;
#pragma unroll
			for (int nt = 0; nt < MMA_BK / 8; nt++)
				mx = fmax_nan(mx, fmax_nan(s[nt][2 * half], s[nt][2 * half + 1]));
			mx = fmax_nan(mx, shfl_xor(mx, 1));
			mx = fmax_nan(mx, shfl_xor(mx, 2));
			float mnew = fmax_nan(m[half], mx);
			float ms = mnew == -FP_INF ? 0.0f : mnew;
			alpha[half] = FP_EXP2(m[half] - ms);
			m[half] = mnew;
			float sum = 0.0f;
#pragma unroll
			for (int nt = 0; nt < MMA_BK / 8; nt++) {
				s[nt][2 * half] = FP_EXP2(s[nt][2 * half] - ms);
				s[nt][2 * half + 1] = FP_EXP2(s[nt][2 * half + 1] - ms);
				sum += s[nt][2 * half] + s[nt][2 * half + 1];
			}
			l[half] = l[half] * alpha[half] + sum;
		}
#pragma unroll
		for (int i = 0; i < D / 8; i++) {
			acc[i][0] *= alpha[0];
			acc[i][1] *= alpha[0];
			acc[i][2] *= alpha[1];
			acc[i][3] *= alpha[1];
		}
#pragma unroll
		for (int kk = 0; kk < MMA_BK / 16; kk++) {
			unsigned pa[4] = {pack2(s[2 * kk][0], s[2 * kk][1], o), pack2(s[2 * kk][2], s[2 * kk][3], o),
			                  pack2(s[2 * kk + 1][0], s[2 * kk + 1][1], o), pack2(s[2 * kk + 1][2], s[2 * kk + 1][3], o)};
#pragma unroll
			for (int dt = 0; dt < D / 8; dt += 2) {
				unsigned bf[4];
				ldsm4t(bf, Vs + (kk * 16 + lane % 8 + ((lane / 8) % 2) * 8) * RS + (dt + lane / 16) * 8);
				mma16816(acc[dt], pa, bf[0], bf[1], o);
				mma16816(acc[dt + 1], pa, bf[2], bf[3], o);
			}
		}
		fp_sync(); // the next iteration's load overwrites this stage
	}

#pragma unroll
	for (int half = 0; half < 2; half++) {
		l[half] += shfl_xor(l[half], 1);
		l[half] += shfl_xor(l[half], 2);
		long long row = q0 + r + 8 * half;
		if (row >= a.Lq)
			continue;
		float inv = l[half] > 0.0f ? 1.0f / l[half] : 0.0f;
		unsigned *orow = (unsigned *)((unsigned short *)o + ((b * a.Lq + row) * a.Hq + h) * D);
#pragma unroll
		for (int dt = 0; dt < D / 8; dt++)
			orow[(dt * 8 + 2 * c) / 2] = pack2(acc[dt][2 * half] * inv, acc[dt][2 * half + 1] * inv, o);
	}
}

#define ATTN_MMA(sfx, T, D, W)                                                                              \
	KERNEL BOUNDS(32 * W) void attn_mma_##sfx##_##D##_w##W(T *R o, const T *R q, const T *R k, const T *R v, \
	                                                      const float *R keymask, const float *R mask,     \
	                                                      AttnArgs a) {                                    \
		attn_mma_impl<T, D, W>(o, q, k, v, keymask, mask, a);                                              \
	}
#define ATTN_MMA_W(sfx, T, D) ATTN_MMA(sfx, T, D, 4)
ATTN_MMA_W(bf16, b16, 64)
ATTN_MMA_W(bf16, b16, 128)
ATTN_MMA_W(f16, h16, 64)
ATTN_MMA_W(f16, h16, 128)

DI float ex2(float x) {
	float y;
	asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
	return y;
}
// ldmatrix and cp.async on 32-bit shared-window addresses: the compiler
// folds the constant part of each fragment's address into the instruction.
DI void ldsm4a(unsigned *r, unsigned addr) {
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
	             : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
	             : "r"(addr));
}
DI void ldsm4ta(unsigned *r, unsigned addr) {
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
	             : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
	             : "r"(addr));
}
DI void cp_async16a(unsigned dst, const void *src, bool valid) {
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
}

// ---- unmasked: attn_flash ----
// Block: FA_BQ = 128 queries, 4 warps, warp w owns rows 32w … 32w+31 as two
// m16 tiles. Shared memory (rows padded to D+8 halves, so ldmatrix and the
// cp.async stores are free of bank conflicts): Q (FA_BQ rows), then two
// stages of K and V (BK rows each).
#define FA_BQ 128
#define FA_NT 128

// flash_load queues one K and one V tile (rows past `rows` zero-filled).
// Thread TID copies 16-byte pieces at row TID/CH + j·(FA_NT/CH), column
// (TID%CH)·8: dst is its shared byte offset in the K tile, src its element
// offset in the first row.
template <int D, int BK>
DI void flash_load(unsigned kdst, const unsigned short *kt, const unsigned short *vt, int lrow, int src, int rows,
                   int stride) {
	const int CH = D / 8, RPJ = FA_NT / CH, RSB = (D + 8) * 2;
#pragma unroll
	for (int j = 0; j < BK / RPJ; j++) {
		bool ok = lrow + j * RPJ < rows;
		int off = src + j * RPJ * stride;
		cp_async16a(kdst + j * RPJ * RSB, ok ? kt + off : kt, ok);
		cp_async16a(kdst + BK * RSB + j * RPJ * RSB, ok ? vt + off : vt, ok);
	}
}

template <typename T, int D, int BK>
DI void flash_impl(T *R o, const T *R q, const T *R k, const T *R v, const AttnArgs &a) {
	const int RS = D + 8, RSB = 2 * RS, CH = D / 8, RPJ = FA_NT / CH;
	unsigned short *Qs = (unsigned short *)fp_dyn_smem;
	const int tid = TID, warp = tid / 32, lane = tid % 32, r = lane / 4, c = lane % 4;
	const long long b = BIDZ, h = BIDY, hk = h / (a.Hq / a.Hkv);
	const long long qt0 = BIDX * FA_BQ;
	const int qstride = (int)a.Hq * D, kstride = (int)a.Hkv * D;
	const long long Lk = a.Lk;
	const unsigned short *qb = (const unsigned short *)q + ((b * a.Lq + qt0) * a.Hq + h) * D;
	const unsigned short *kt = (const unsigned short *)k + (b * Lk * a.Hkv + hk) * D;
	const unsigned short *vt = (const unsigned short *)v + (b * Lk * a.Hkv + hk) * D;
	const int qrows = a.Lq - qt0 < FA_BQ ? (int)(a.Lq - qt0) : FA_BQ;

	const unsigned sQ = smem_addr(Qs), sKV = sQ + FA_BQ * RSB, STAGE = 2 * BK * RSB;
	const int lrow = tid / CH, lcol = (tid % CH) * 8;
	const unsigned ldst = lrow * RSB + lcol * 2;
	const int qsrc = lrow * qstride + lcol, ksrc = lrow * kstride + lcol;

	// Q tile and the first K/V tile: one cp.async group.
#pragma unroll
	for (int j = 0; j < FA_BQ / RPJ; j++) {
		bool ok = lrow + j * RPJ < qrows;
		cp_async16a(sQ + ldst + j * RPJ * RSB, qb + (ok ? qsrc + j * RPJ * qstride : 0), ok);
	}
	const int ntiles = (int)((Lk + BK - 1) / BK);
	flash_load<D, BK>(sKV + ldst, kt, vt, lrow, ksrc, Lk < BK ? (int)Lk : BK, kstride);
	cp_commit();

	const float sl = a.scale_log2; // > 0 (the host sends other scales to attn_mma)
	float m[4], l[4];               // rows r, r+8, 16+r, 24+r of the warp: m in scaled log2 units
	float acc[2][D / 8][4];
#pragma unroll
	for (int i = 0; i < 4; i++) {
		m[i] = -FP_INF;
		l[i] = 0.0f;
	}
#pragma unroll
	for (int mt = 0; mt < 2; mt++)
#pragma unroll
		for (int i = 0; i < D / 8; i++)
			acc[mt][i][0] = acc[mt][i][1] = acc[mt][i][2] = acc[mt][i][3] = 0.0f;
	// This lane's ldmatrix addresses: Q rows of m tile 0; K and V within a stage.
	const unsigned aQ = sQ + (warp * 32 + lane % 16) * RSB + (lane / 16) * 16;
	const unsigned aK = ((lane / 16) * 8 + lane % 8) * RSB + ((lane / 8) % 2) * 16;
	const unsigned aV = BK * RSB + (lane % 8 + ((lane / 8) % 2) * 8) * RSB + (lane / 16) * 16;

#pragma unroll 1
	for (int t = 0; t < ntiles; t++) {
		const long long k0 = (long long)t * BK;
		// One barrier per tile: once every thread has tile t and is past
		// tile t-1, the stage tile t-1 used takes tile t+1's copy, which
		// runs during tile t's arithmetic.
		cp_wait_all();
		fp_sync();
		if (t + 1 < ntiles) {
			long long left = Lk - k0 - BK;
			kt += BK * (long long)kstride;
			vt += BK * (long long)kstride;
			flash_load<D, BK>(sKV + ((t + 1) & 1) * STAGE + ldst, kt, vt, lrow, ksrc, left < BK ? (int)left : BK,
			                  kstride);
			cp_commit();
		}
		const unsigned st = sKV + (t & 1) * STAGE;

		// S = Q·Kᵀ for the warp's 32 rows × BK keys.
		float s[2][BK / 8][4];
#pragma unroll
		for (int mt = 0; mt < 2; mt++)
#pragma unroll
			for (int nt = 0; nt < BK / 8; nt++)
				s[mt][nt][0] = s[mt][nt][1] = s[mt][nt][2] = s[mt][nt][3] = 0.0f;
#pragma unroll
		for (int kk = 0; kk < D / 16; kk++) {
			unsigned qa[2][4];
			ldsm4a(qa[0], aQ + kk * 32);
			ldsm4a(qa[1], aQ + 16 * RSB + kk * 32);
#pragma unroll
			for (int nt = 0; nt < BK / 8; nt += 2) {
				unsigned bf[4];
				ldsm4a(bf, st + aK + nt * 8 * RSB + kk * 32);
#pragma unroll
				for (int mt = 0; mt < 2; mt++) {
					mma16816(s[mt][nt], qa[mt], bf[0], bf[1], o);
					mma16816(s[mt][nt + 1], qa[mt], bf[2], bf[3], o);
				}
			}
		}
		if (k0 + BK > Lk) { // the last tile: keys past Lk do not exist
			const int kv = (int)(Lk - k0) - 2 * c;
#pragma unroll
			for (int nt = 0; nt < BK / 8; nt++)
#pragma unroll
				for (int e = 0; e < 4; e++)
					if (nt * 8 + (e & 1) >= kv) {
						s[0][nt][e] = -FP_INF;
						s[1][nt][e] = -FP_INF;
					}
		}

		// Online softmax: row i = 2·mt + half holds s[mt][·][2·half], [2·half+1].
		float alpha[4];
#pragma unroll
		for (int mt = 0; mt < 2; mt++)
#pragma unroll
			for (int half = 0; half < 2; half++) {
				const int i = 2 * mt + half;
				float mx = fmaxf(s[mt][0][2 * half], s[mt][0][2 * half + 1]);
#pragma unroll
				for (int nt = 1; nt < BK / 8; nt++)
					mx = fmaxf(mx, fmaxf(s[mt][nt][2 * half], s[mt][nt][2 * half + 1]));
				mx = fmaxf(mx, shfl_xor(mx, 1));
				mx = fmaxf(mx, shfl_xor(mx, 2));
				float mnew = fmaxf(m[i], mx * sl);
				float ms = mnew == -FP_INF ? 0.0f : mnew;
				alpha[i] = ex2(m[i] - ms);
				m[i] = mnew;
				float sum = 0.0f;
#pragma unroll
				for (int nt = 0; nt < BK / 8; nt++) {
					float p0 = ex2(FP_FMA(s[mt][nt][2 * half], sl, -ms));
					float p1 = ex2(FP_FMA(s[mt][nt][2 * half + 1], sl, -ms));
					s[mt][nt][2 * half] = p0;
					s[mt][nt][2 * half + 1] = p1;
					sum += p0 + p1;
				}
				l[i] = l[i] * alpha[i] + sum;
			}
		// Rescale O only when a row maximum of the warp moved: late in a long
		// sequence most tiles move none (338.5 against 328.8 TFLOP/s).
		if (__any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f || alpha[2] != 1.0f ||
		                                         alpha[3] != 1.0f)) {
#pragma unroll
			for (int mt = 0; mt < 2; mt++)
#pragma unroll
				for (int dt = 0; dt < D / 8; dt++) {
					acc[mt][dt][0] *= alpha[2 * mt];
					acc[mt][dt][1] *= alpha[2 * mt];
					acc[mt][dt][2] *= alpha[2 * mt + 1];
					acc[mt][dt][3] *= alpha[2 * mt + 1];
				}
		}

		// O += P·V, P from registers, V fragments by ldmatrix.trans.
#pragma unroll
		for (int kk = 0; kk < BK / 16; kk++) {
			unsigned pa[2][4];
#pragma unroll
			for (int mt = 0; mt < 2; mt++) {
				pa[mt][0] = pack2(s[mt][2 * kk][0], s[mt][2 * kk][1], o);
				pa[mt][1] = pack2(s[mt][2 * kk][2], s[mt][2 * kk][3], o);
				pa[mt][2] = pack2(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1], o);
				pa[mt][3] = pack2(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3], o);
			}
#pragma unroll
			for (int dt = 0; dt < D / 8; dt += 2) {
				unsigned bf[4];
				ldsm4ta(bf, st + aV + kk * 16 * RSB + dt * 16);
#pragma unroll
				for (int mt = 0; mt < 2; mt++) {
					mma16816(acc[mt][dt], pa[mt], bf[0], bf[1], o);
					mma16816(acc[mt][dt + 1], pa[mt], bf[2], bf[3], o);
				}
			}
		}
	}

	// Normalise and stage the warp's rows in its own part of Qs (only this
	// warp ever read them), then store 16-byte row pieces.
#pragma unroll
	for (int mt = 0; mt < 2; mt++)
#pragma unroll
		for (int half = 0; half < 2; half++) {
			const int i = 2 * mt + half;
			float li = l[i];
			li += shfl_xor(li, 1);
			li += shfl_xor(li, 2);
			float inv = li > 0.0f ? 1.0f / li : 0.0f;
			unsigned short *row = Qs + (warp * 32 + mt * 16 + 8 * half + r) * RS + 2 * c;
#pragma unroll
			for (int dt = 0; dt < D / 8; dt++)
				*(unsigned *)(row + dt * 8) = pack2(acc[mt][dt][2 * half] * inv, acc[mt][dt][2 * half + 1] * inv, o);
		}
	__syncwarp();
	unsigned short *ob = (unsigned short *)o + ((b * a.Lq + qt0) * a.Hq + h) * D;
#pragma unroll
	for (int j = 0; j < CH; j++) {
		int i = lane + 32 * j, row = warp * 32 + i / CH, col = (i % CH) * 8;
		if (row < qrows)
			*(U4 *)(ob + row * qstride + col) = *(const U4 *)(Qs + row * RS + col);
	}
}

#define ATTN_FLASH(sfx, T, D)                                                                                 \
	KERNEL __launch_bounds__(FA_NT, 2) void attn_flash_##sfx##_##D(T *R o, const T *R q, const T *R k,          \
	                                                              const T *R v, AttnArgs a) {                 \
		flash_impl<T, D, MMA_BK>(o, q, k, v, a);                                                              \
	}
ATTN_FLASH(bf16, b16, 64)
ATTN_FLASH(bf16, b16, 128)
ATTN_FLASH(f16, h16, 64)
ATTN_FLASH(f16, h16, 128)
#endif
