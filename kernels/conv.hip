// The naive direct 3-D convolution (the last GPU tier of the conv3d chain)
// and a plain tiled GEMM that stands in where no vendor BLAS is present.

// ---- conv3d: x (B, Cin, T, H, W), w (Cout, Cin, kT, kH, kW), zero padding ----

struct ConvArgs {
	long long B, Cin, T, H, W, Cout, kT, kH, kW, To, Ho, Wo;
	long long st[3], pad[3];
};

template <typename T> DI void conv3d_impl(T *R y, const T *R x, const T *R w, const T *R bias, const ConvArgs &a) {
	long long i = BIDX * 256 + TID;
	long long n = a.B * a.Cout * a.To * a.Ho * a.Wo;
	if (i >= n)
		return;
	long long wo = i % a.Wo, r = i / a.Wo;
	long long ho = r % a.Ho;
	r /= a.Ho;
	long long to = r % a.To;
	r /= a.To;
	long long co = r % a.Cout, b = r / a.Cout;
	long long t0 = to * a.st[0] - a.pad[0], h0 = ho * a.st[1] - a.pad[1], w0 = wo * a.st[2] - a.pad[2];
	float acc = bias ? ld(bias + co) : 0.0f;
	for (long long ci = 0; ci < a.Cin; ci++) {
		const T *xc = x + (b * a.Cin + ci) * a.T * a.H * a.W;
		const T *wc = w + (co * a.Cin + ci) * a.kT * a.kH * a.kW;
		for (long long kt = 0; kt < a.kT; kt++) {
			long long ti = t0 + kt;
			if (ti < 0 || ti >= a.T)
				continue;
			for (long long kh = 0; kh < a.kH; kh++) {
				long long hi = h0 + kh;
				if (hi < 0 || hi >= a.H)
					continue;
				const T *xr = xc + (ti * a.H + hi) * a.W;
				const T *wr = wc + (kt * a.kH + kh) * a.kW;
				for (long long kw = 0; kw < a.kW; kw++) {
					long long wi = w0 + kw;
					if (wi >= 0 && wi < a.W)
						acc = FP_FMA(ld(xr + wi), ld(wr + kw), acc);
				}
			}
		}
	}
	st(y + i, acc);
}

#define CONV3D(sfx, T)                                                                            \
	KERNEL void conv3d_##sfx(T *R y, const T *R x, const T *R w, const T *R bias, ConvArgs a) { \
		conv3d_impl<T>(y, x, w, bias, a);                                                        \
	}
CONV3D(f32, float)
CONV3D(f16, h16)
CONV3D(bf16, b16)

// ---- GEMM: C[z] (M, N) = alpha · op(A[z]) · op(B[z]) (+ bias[n]) ----
// Row-major operands; A is (M, K) or (K, M) when transposed, B is (K, N)
// or (N, K). A batch stride of 0 broadcasts. 64×64 tiles, 256 threads of
// 4×4 outputs, f32 accumulation.

struct GemmArgs {
	long long M, N, K, lda, ldb, sa, sb, sc;
	int ta, tb;
	float alpha;
};

#define GM_T 64
#define GM_K 16

template <typename T> DI void gemm_impl(T *R c, const T *R a_, const T *R b_, const T *R bias, const GemmArgs &g) {
	__shared__ float As[GM_K][GM_T + 4];
	__shared__ float Bs[GM_K][GM_T + 4];
	const T *A = a_ + BIDZ * g.sa;
	const T *B = b_ + BIDZ * g.sb;
	T *C = c + BIDZ * g.sc;
	long long m0 = BIDY * GM_T, n0 = BIDX * GM_T;
	int tx = TID % 16, ty = TID / 16;
	float acc[4][4];
#pragma unroll
	for (int i = 0; i < 4; i++)
#pragma unroll
		for (int j = 0; j < 4; j++)
			acc[i][j] = 0.0f;
	for (long long k0 = 0; k0 < g.K; k0 += GM_K) {
		// Each thread loads 4 elements of each tile.
#pragma unroll
		for (int u = 0; u < 4; u++) {
			int idx = TID + u * 256; // 0 .. 1023 over a 16×64 tile
			int kk = idx / GM_T, mm = idx % GM_T;
			long long gk = k0 + kk, gm = m0 + mm, gn = n0 + mm;
			float av = 0.0f, bv = 0.0f;
			if (gk < g.K && gm < g.M)
				av = ld(g.ta ? A + gk * g.lda + gm : A + gm * g.lda + gk);
			if (gk < g.K && gn < g.N)
				bv = ld(g.tb ? B + gn * g.ldb + gk : B + gk * g.ldb + gn);
			As[kk][mm] = av;
			Bs[kk][mm] = bv;
		}
		fp_sync();
#pragma unroll
		for (int kk = 0; kk < GM_K; kk++) {
			float ar[4], br[4];
#pragma unroll
			for (int i = 0; i < 4; i++) {
				ar[i] = As[kk][ty + 16 * i];
				br[i] = Bs[kk][tx + 16 * i];
			}
#pragma unroll
			for (int i = 0; i < 4; i++)
#pragma unroll
				for (int j = 0; j < 4; j++)
					acc[i][j] = FP_FMA(ar[i], br[j], acc[i][j]);
		}
		fp_sync();
	}
#pragma unroll
	for (int i = 0; i < 4; i++) {
		long long gm = m0 + ty + 16 * i;
		if (gm >= g.M)
			continue;
#pragma unroll
		for (int j = 0; j < 4; j++) {
			long long gn = n0 + tx + 16 * j;
			if (gn < g.N) {
				float v = g.alpha * acc[i][j];
				if (bias)
					v += ld(bias + gn);
				st(C + gm * g.N + gn, v);
			}
		}
	}
}

#define GEMM(sfx, T)                                                                           \
	KERNEL void gemm_##sfx(T *R c, const T *R a, const T *R b, const T *R bias, GemmArgs g) { \
		gemm_impl<T>(c, a, b, bias, g);                                                       \
	}
GEMM(f32, float)
GEMM(f16, h16)
GEMM(bf16, b16)

// ---- im2col for the GEMM tier of conv3d ----
// col (K = Cin·kT·kH·kW, P chunk) for output positions p0 … p0+Pc of batch b:
// col[k][p] = x[b][ci][t·st − pad + kt][…] or 0 outside the input.
template <typename T> DI void im2col_impl(T *R col, const T *R x, const ConvArgs &a, long long b, long long p0, long long pc) {
	long long i = BIDX * 256 + TID;
	long long K = a.Cin * a.kT * a.kH * a.kW;
	if (i >= K * pc)
		return;
	long long p = p0 + i % pc, k = i / pc;
	long long kw = k % a.kW, r = k / a.kW;
	long long kh = r % a.kH;
	r /= a.kH;
	long long kt = r % a.kT, ci = r / a.kT;
	long long wo = p % a.Wo, q = p / a.Wo;
	long long ho = q % a.Ho, to = q / a.Ho;
	long long t = to * a.st[0] - a.pad[0] + kt, hh = ho * a.st[1] - a.pad[1] + kh, ww = wo * a.st[2] - a.pad[2] + kw;
	T v;
	if (t >= 0 && t < a.T && hh >= 0 && hh < a.H && ww >= 0 && ww < a.W)
		v = x[(((b * a.Cin + ci) * a.T + t) * a.H + hh) * a.W + ww];
	else
		st(&v, 0.0f);
	col[i] = v;
}

#define IM2COL(sfx, T)                                                                                  \
	KERNEL void im2col_##sfx(T *R col, const T *R x, ConvArgs a, long long b, long long p0, long long pc) { \
		im2col_impl<T>(col, x, a, b, p0, pc);                                                          \
	}
IM2COL(f32, float)
IM2COL(f16, h16)
IM2COL(bf16, b16)
