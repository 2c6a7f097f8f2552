// Fused attention, flash style: softmax(q·kᵀ·scale + mask)·v with an
// online softmax over key tiles held in shared memory, so no Lq×Lk matrix
// ever exists. q (B, Lq, Hq, D), k and v (B, Lk, Hkv, D), out like q;
// Hq/Hkv query heads share a key/value head (GQA).
//
// Generic kernel (any D ≤ 512, every dtype): a query is owned by TPQ
// consecutive threads, each holding 8 float4 groups of its q row and
// output accumulator (dims 4·(t + TPQ·g) … +3), so a block of 128 threads
// serves 128/TPQ queries. Partial dot products are summed across the TPQ
// lanes with shuffles. Scores are in log2 units (scale·log2 e folded in).

#define AT_NT 128
#define LOG2E 1.44269504088896341f

struct AttnArgs {
	long long B, Lq, Lk, Hq, Hkv, D;
	long long frame_len;    // > 0: frame-causal mask
	long long mask_bstride; // elements between batches of the additive mask (0: shared)
	float scale_log2;       // scale · log2(e)
	int causal;
};

template <typename T, int TPQ>
DI void attn_impl(T *R o, const T *R q, const T *R k, const T *R v, const float *R keymask, const float *R mask,
                  const AttnArgs &a) {
	const int QPB = AT_NT / TPQ;           // queries per block
	const int DP = TPQ * 32;               // padded head dim held by the block
	const int BK = 128 / TPQ < 64 ? 128 / TPQ : 64; // keys per shared tile
	const int SUB = BK < 16 ? BK : 16;     // keys per online-softmax step
	__shared__ F4 Ks4[BK * DP / 4];
	__shared__ F4 Vs4[BK * DP / 4];
	float *Ks = (float *)Ks4, *Vs = (float *)Vs4;

	const int t = TID % TPQ, ql = TID / TPQ;
	const long long b = BIDZ, h = BIDY, qi = BIDX * QPB + ql;
	const long long hk = h / (a.Hq / a.Hkv);
	const bool qvalid = qi < a.Lq;
	const long long qc = qvalid ? qi : a.Lq - 1;

	float qv[32], acc[32];
	const T *qrow = q + ((b * a.Lq + qc) * a.Hq + h) * a.D;
#pragma unroll
	for (int g = 0; g < 8; g++)
#pragma unroll
		for (int e = 0; e < 4; e++) {
			long long d = 4 * (t + TPQ * g) + e;
			qv[4 * g + e] = d < a.D ? ld(qrow + d) : 0.0f;
			acc[4 * g + e] = 0.0f;
		}
	float m = -FP_INF, l = 0.0f;

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
			float s[SUB];
#pragma unroll
			for (int jj = 0; jj < SUB; jj++) {
				const float *kr = Ks + (j0 + jj) * DP + 4 * t;
				float d = 0.0f;
#pragma unroll
				for (int g = 0; g < 8; g++) {
					F4 kk = *(const F4 *)(kr + 4 * TPQ * g);
					d = FP_FMA(qv[4 * g], kk.x, d);
					d = FP_FMA(qv[4 * g + 1], kk.y, d);
					d = FP_FMA(qv[4 * g + 2], kk.z, d);
					d = FP_FMA(qv[4 * g + 3], kk.w, d);
				}
				s[jj] = d;
			}
#pragma unroll
			for (int msk = 1; msk < TPQ; msk <<= 1)
#pragma unroll
				for (int jj = 0; jj < SUB; jj++)
					s[jj] += shfl_xor(s[jj], msk);
			float mx = m;
#pragma unroll
			for (int jj = 0; jj < SUB; jj++) {
				long long key = k0 + j0 + jj;
				bool ok = key < kend && (!a.causal || key <= qc) &&
				          (a.frame_len <= 0 || key / a.frame_len <= qc / a.frame_len) &&
				          (!keymask || keymask[b * a.Lk + key] != 0.0f);
				float sv = s[jj] * a.scale_log2;
				if (ok && mask)
					sv += mask[b * a.mask_bstride + qc * a.Lk + key] * LOG2E;
				s[jj] = ok ? sv : -FP_INF;
				mx = fmax_nan(mx, s[jj]);
			}
			if (mx == -FP_INF)
				continue; // nothing visible yet
			float alpha = FP_EXP2(m - mx);
			l *= alpha;
#pragma unroll
			for (int i = 0; i < 32; i++)
				acc[i] *= alpha;
			m = mx;
#pragma unroll
			for (int jj = 0; jj < SUB; jj++) {
				float p = FP_EXP2(s[jj] - mx);
				l += p;
				const float *vr = Vs + (j0 + jj) * DP + 4 * t;
#pragma unroll
				for (int g = 0; g < 8; g++) {
					F4 vv = *(const F4 *)(vr + 4 * TPQ * g);
					acc[4 * g] = FP_FMA(p, vv.x, acc[4 * g]);
					acc[4 * g + 1] = FP_FMA(p, vv.y, acc[4 * g + 1]);
					acc[4 * g + 2] = FP_FMA(p, vv.z, acc[4 * g + 2]);
					acc[4 * g + 3] = FP_FMA(p, vv.w, acc[4 * g + 3]);
				}
			}
		}
		fp_sync();
	}
	if (!qvalid)
		return;
	// A query that sees no key gets zeros, as the CPU backend does.
	float inv = l > 0.0f ? 1.0f / l : 0.0f;
	T *orow = o + ((b * a.Lq + qi) * a.Hq + h) * a.D;
#pragma unroll
	for (int g = 0; g < 8; g++)
#pragma unroll
		for (int e = 0; e < 4; e++) {
			long long d = 4 * (t + TPQ * g) + e;
			if (d < a.D)
				st(orow + d, acc[4 * g + e] * inv);
		}
}

#define ATTN(sfx, T, TPQ)                                                                                       \
	KERNEL BOUNDS(AT_NT) void attn_##sfx##_##TPQ(T *R o, const T *R q, const T *R k, const T *R v,              \
	                                             const float *R keymask, const float *R mask, AttnArgs a) { \
		attn_impl<T, TPQ>(o, q, k, v, keymask, mask, a);                                                    \
	}
#define ATTN_ALL(sfx, T) ATTN(sfx, T, 1) ATTN(sfx, T, 2) ATTN(sfx, T, 4) ATTN(sfx, T, 8) ATTN(sfx, T, 16)
ATTN_ALL(f32, float)
ATTN_ALL(f16, h16)
ATTN_ALL(bf16, b16)
