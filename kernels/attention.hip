// Fused attention, flash style: softmax(q·kᵀ·scale + mask)·v with an
// online softmax over key tiles held in shared memory, so no Lq×Lk matrix
// ever exists. q (B, Lq, Hq, D), k and v (B, Lk, Hkv, D), out like q;
// Hq/Hkv query heads share a key/value head (GQA).
//
// Generic kernel (any D ≤ 512, every dtype): a query is owned by TPQ ≥ 2
// consecutive threads, each holding 8 float4 groups of its q row and
// output accumulator (dims 4·(t + TPQ·g) … +3) for AT_QT queries, so a
// block of 128 threads serves 128·AT_QT/TPQ queries. Partial dot products
// are summed across the TPQ
// lanes with shuffles. Scores are in log2 units (scale·log2 e folded in).

#define AT_NT 128
#define AT_QT 2 // queries per thread: each K/V value read from shared memory serves AT_QT queries
#define LOG2E 1.44269504088896341f

struct AttnArgs {
	long long B, Lq, Lk, Hq, Hkv, D;
	long long frame_len;    // > 0: frame-causal mask
	long long mask_bstride; // elements between batches of the additive mask (0: shared)
	float scale_log2;       // scale · log2(e)
	int causal;
};

template <typename T, int TPQ, int QT>
DI void attn_impl(T *R o, const T *R q, const T *R k, const T *R v, const float *R keymask, const float *R mask,
                  const AttnArgs &a) {
	const int QG = AT_NT / TPQ;                     // query groups per block
	const int QPB = QG * QT;                        // queries per block
	const int DP = TPQ * 32;                        // padded head dim held by the block
	const int BK = 128 / TPQ < 64 ? 128 / TPQ : 64; // keys per shared tile
	const int SUB = BK < 8 ? BK : 8;                // keys per online-softmax step
	__shared__ F4 Ks4[BK * DP / 4];
	__shared__ F4 Vs4[BK * DP / 4];
	float *Ks = (float *)Ks4, *Vs = (float *)Vs4;

	const int t = TID % TPQ, ql = TID / TPQ;
	const long long b = BIDZ, h = BIDY;
	const long long hk = h / (a.Hq / a.Hkv);
	// This thread's queries: ql, ql + QG, … within the block.
	long long qi[QT], qc[QT];
	float qv[QT][32], acc[QT][32], m[QT], l[QT];
#pragma unroll
	for (int u = 0; u < QT; u++) {
		qi[u] = BIDX * QPB + ql + u * QG;
		qc[u] = qi[u] < a.Lq ? qi[u] : a.Lq - 1;
		const T *qrow = q + ((b * a.Lq + qc[u]) * a.Hq + h) * a.D;
#pragma unroll
		for (int g = 0; g < 8; g++)
#pragma unroll
			for (int e = 0; e < 4; e++) {
				long long d = 4 * (t + TPQ * g) + e;
				qv[u][4 * g + e] = d < a.D ? ld(qrow + d) : 0.0f;
				acc[u][4 * g + e] = 0.0f;
			}
		m[u] = -FP_INF;
		l[u] = 0.0f;
	}

	long long qlast = BIDX * QPB + QPB - 1;
	if (qlast > a.Lq - 1)
		qlast = a.Lq - 1;
	long long kend = a.Lk;
	if (a.causal && qlast + 1 < kend)
		kend = qlast + 1;
	if (a.frame_len > 0 && (qlast / a.frame_len + 1) * a.frame_len < kend)
		kend = (qlast / a.frame_len + 1) * a.frame_len;

	for (long long k0 = 0; k0 < kend; k0 += BK) {
		for (int idx = TID; idx < BK * DP; idx += AT_NT) {
			int r = idx / DP, c = idx % DP;
			long long key = k0 + r;
			float kx = 0.0f, vx = 0.0f;
			if (key < a.Lk && c < a.D) {
				long long off = ((b * a.Lk + key) * a.Hkv + hk) * a.D + c;
				kx = ld(k + off);
				vx = ld(v + off);
			}
			Ks[idx] = kx;
			Vs[idx] = vx;
		}
		fp_sync();
#pragma unroll 1
		for (int j0 = 0; j0 < BK; j0 += SUB) {
			float s[QT][SUB];
#pragma unroll
			for (int jj = 0; jj < SUB; jj++) {
				const float *kr = Ks + (j0 + jj) * DP + 4 * t;
				float d[QT];
#pragma unroll
				for (int u = 0; u < QT; u++)
					d[u] = 0.0f;
#pragma unroll
				for (int g = 0; g < 8; g++) {
					F4 kk = *(const F4 *)(kr + 4 * TPQ * g);
#pragma unroll
					for (int u = 0; u < QT; u++) {
						d[u] = FP_FMA(qv[u][4 * g], kk.x, d[u]);
						d[u] = FP_FMA(qv[u][4 * g + 1], kk.y, d[u]);
						d[u] = FP_FMA(qv[u][4 * g + 2], kk.z, d[u]);
						d[u] = FP_FMA(qv[u][4 * g + 3], kk.w, d[u]);
					}
				}
#pragma unroll
				for (int u = 0; u < QT; u++)
					s[u][jj] = d[u];
			}
#pragma unroll
			for (int msk = 1; msk < TPQ; msk <<= 1)
#pragma unroll
				for (int u = 0; u < QT; u++)
#pragma unroll
					for (int jj = 0; jj < SUB; jj++)
						s[u][jj] += shfl_xor(s[u][jj], msk);
			float alpha[QT]; // s becomes the probabilities in place
			bool any = false;
#pragma unroll
			for (int u = 0; u < QT; u++) {
				float mx = m[u];
#pragma unroll
				for (int jj = 0; jj < SUB; jj++) {
					long long key = k0 + j0 + jj;
					bool ok = key < kend && (!a.causal || key <= qc[u]) &&
					          (a.frame_len <= 0 || key / a.frame_len <= qc[u] / a.frame_len) &&
					          (!keymask || keymask[b * a.Lk + key] != 0.0f);
					float sv = s[u][jj] * a.scale_log2;
					if (ok && mask)
						sv += mask[b * a.mask_bstride + qc[u] * a.Lk + key] * LOG2E;
					s[u][jj] = ok ? sv : -FP_INF;
					mx = fmax_nan(mx, s[u][jj]);
				}
				// Nothing visible yet: p = 0 and the state stays as it is.
				float ms = mx == -FP_INF ? 0.0f : mx;
				alpha[u] = FP_EXP2(m[u] - ms);
				m[u] = mx;
				float sum = 0.0f;
#pragma unroll
				for (int jj = 0; jj < SUB; jj++) {
					s[u][jj] = FP_EXP2(s[u][jj] - ms);
					sum += s[u][jj];
				}
				l[u] = l[u] * alpha[u] + sum;
				any = any || mx != -FP_INF;
			}
			if (!any)
				continue;
#pragma unroll
			for (int u = 0; u < QT; u++)
#pragma unroll
				for (int i = 0; i < 32; i++)
					acc[u][i] *= alpha[u];
#pragma unroll
			for (int jj = 0; jj < SUB; jj++) {
				const float *vr = Vs + (j0 + jj) * DP + 4 * t;
#pragma unroll
				for (int g = 0; g < 8; g++) {
					F4 vv = *(const F4 *)(vr + 4 * TPQ * g);
#pragma unroll
					for (int u = 0; u < QT; u++) {
						acc[u][4 * g] = FP_FMA(s[u][jj], vv.x, acc[u][4 * g]);
						acc[u][4 * g + 1] = FP_FMA(s[u][jj], vv.y, acc[u][4 * g + 1]);
						acc[u][4 * g + 2] = FP_FMA(s[u][jj], vv.z, acc[u][4 * g + 2]);
						acc[u][4 * g + 3] = FP_FMA(s[u][jj], vv.w, acc[u][4 * g + 3]);
					}
				}
			}
		}
		fp_sync();
	}
	// A query that sees no key gets zeros, as the CPU backend does.
#pragma unroll
	for (int u = 0; u < QT; u++) {
		if (qi[u] >= a.Lq)
			continue;
		float inv = l[u] > 0.0f ? 1.0f / l[u] : 0.0f;
		T *orow = o + ((b * a.Lq + qi[u]) * a.Hq + h) * a.D;
#pragma unroll
		for (int g = 0; g < 8; g++)
#pragma unroll
			for (int e = 0; e < 4; e++) {
				long long d = 4 * (t + TPQ * g) + e;
				if (d < a.D)
					st(orow + d, acc[u][4 * g + e] * inv);
			}
	}
}

#define ATTN(sfx, T, TPQ)                                                                                       \
	KERNEL BOUNDS(AT_NT) void attn_##sfx##_##TPQ(T *R o, const T *R q, const T *R k, const T *R v,              \
	                                             const float *R keymask, const float *R mask, AttnArgs a) { \
		attn_impl<T, TPQ, AT_QT>(o, q, k, v, keymask, mask, a);                                             \
	}
#define ATTN_ALL(sfx, T) ATTN(sfx, T, 2) ATTN(sfx, T, 4) ATTN(sfx, T, 8) ATTN(sfx, T, 16)
ATTN_ALL(f32, float)
ATTN_ALL(f16, h16)
ATTN_ALL(bf16, b16)

// ---- NVIDIA tensor-core kernel (sm_80+): bf16/f16, D = 64 or 128 ----
// FlashAttention-2 layout: W warps × 16 queries per block, key tiles of 64
// double-buffered in shared memory by cp.async, S = Q·Kᵀ and O += P·V on
// mma.sync m16n8k16 with f32 accumulators, P kept in registers (the S
// accumulator layout is the A operand layout), online softmax per row in
// log2 units. Dynamic shared memory: 4·64·(D+8) halves.

#if defined(FP_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define MMA_BQ 64
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
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
	             "{%0,%1,%2,%3};"
	             : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
	             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
DI void mma16816(float *c, const unsigned *a, unsigned b0, unsigned b1, const h16 *) {
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
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
#define ATTN_MMA_W(sfx, T, D) ATTN_MMA(sfx, T, D, 4) ATTN_MMA(sfx, T, D, 8)
ATTN_MMA_W(bf16, b16, 64)
ATTN_MMA_W(bf16, b16, 128)
ATTN_MMA_W(f16, h16, 64)
ATTN_MMA_W(f16, h16, 128)
#endif
