// Fused attention, flash style: softmax(q·kᵀ·scale + mask)·v with an
// online softmax over key tiles held in shared memory, so no Lq×Lk matrix
// ever exists. q (B, Lq, Hq, D), k and v (B, Lk, Hkv, D), out like q;
// Hq/Hkv query heads share a key/value head (GQA). The NVIDIA tensor-core
// kernels are a module of their own (attention_mma.hip), so a device that
// uses them never compiles these.
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

// AttnArgs is the launch argument of every attention kernel (attention_mma.hip
// declares the same layout).
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

// Row softmax of the attention through the BLAS (f32): s holds, for heads
// of one batch and a chunk of queries, the scores q·kᵀ already scaled by
// scale·log2 e (rows of Lk, ld apart, ld a multiple of 4 and s 16-byte
// aligned; a head's rows head_stride apart). Each block turns one row into
// probabilities in place, masked as attn_impl masks (the causal,
// frame-causal, key and additive masks); a row that sees no key becomes
// zeros, as the CPU backend's output is. 1024 threads per block keep the
// rows in flight few enough that the second pass reads them from L2.
#define AS_NT 1024
struct AttnRowsArgs {
	long long Lk, ld;
	long long q0;           // query index of the chunk's first row
	long long b;            // batch
	long long head_stride;  // elements between heads' rows
	long long frame_len;    // > 0: frame-causal mask
	long long mask_bstride; // elements between batches of the additive mask (0: shared)
	int causal;
};

// attn_rows_score is key j's score x (log2 units) as the masks leave it,
// -inf where masked.
DI float attn_rows_score(float x, const float *R keymask, const float *R mask, const AttnRowsArgs &a, long long qi,
                         long long kend, long long j) {
	if (j >= kend || (keymask && keymask[a.b * a.Lk + j] == 0.0f))
		return -FP_INF;
	if (mask)
		x += mask[a.b * a.mask_bstride + qi * a.Lk + j] * LOG2E;
	return x;
}

KERNEL BOUNDS(AS_NT) void attn_rows_f32(float *R s, const float *R keymask, const float *R mask, AttnRowsArgs a) {
	__shared__ float sm[AS_NT], sl[AS_NT];
	F4 *row = (F4 *)(s + BIDY * a.head_stride + BIDX * a.ld);
	const long long qi = a.q0 + BIDX;
	long long kend = a.Lk;
	if (a.causal && qi + 1 < kend)
		kend = qi + 1;
	if (a.frame_len > 0 && (qi / a.frame_len + 1) * a.frame_len < kend)
		kend = (qi / a.frame_len + 1) * a.frame_len;
	const long long n4 = (kend + 3) / 4, all4 = (a.Lk + 3) / 4;
	// Each thread's running maximum and sum of 2^(x - max) over its keys.
	float m = -FP_INF, l = 0.0f;
	for (long long j4 = TID; j4 < n4; j4 += AS_NT) {
		F4 v = row[j4];
		float xs[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
		for (int e = 0; e < 4; e++) {
			float x = attn_rows_score(xs[e], keymask, mask, a, qi, kend, 4 * j4 + e);
			if (x == -FP_INF)
				continue;
			if (x > m) {
				l = l * FP_EXP2(m - x) + 1.0f;
				m = x;
			} else {
				l += FP_EXP2(x - m);
			}
		}
	}
	sm[TID] = m;
	sl[TID] = l;
	fp_sync();
	for (int h = AS_NT / 2; h > 0; h >>= 1) {
		if (TID < h) {
			float m1 = sm[TID], m2 = sm[TID + h];
			float mx = m1 > m2 ? m1 : m2;
			if (mx != -FP_INF)
				sl[TID] = sl[TID] * FP_EXP2(m1 - mx) + sl[TID + h] * FP_EXP2(m2 - mx);
			sm[TID] = mx;
		}
		fp_sync();
	}
	const float mx = sm[0], sum = sl[0];
	const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
	for (long long j4 = TID; j4 < all4; j4 += AS_NT) {
		F4 v = j4 < n4 ? row[j4] : F4{0.0f, 0.0f, 0.0f, 0.0f};
		float xs[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
		for (int e = 0; e < 4; e++) {
			float x = attn_rows_score(xs[e], keymask, mask, a, qi, kend, 4 * j4 + e);
			xs[e] = x == -FP_INF ? 0.0f : FP_EXP2(x - mx) * inv;
		}
		row[j4] = F4{xs[0], xs[1], xs[2], xs[3]};
	}
}
