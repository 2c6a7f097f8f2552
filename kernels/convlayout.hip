// Layout changes for the channels-last path of the optimized conv3d tier
// (package gpuconv): the vendor libraries run 3-D convolutions fastest on
// NDHWC tensors, the engine keeps NCDHW.
//
// pack:   x (N, C, T, S) frames t0 … t0+Tc−1 → y (N, Tc, S, C), S = H·W;
//         frames outside [0, T) are zeros (the temporal zero padding).
// unpack: y (N, Tc, S, K) → x (N, K, To, S) at frames t0 … t0+Tc−1, plus
//         bias (K) when given (one rounding after the add).
//
// packpad: pack of a padded input without the padded copy: y (N, Tc, Hp,
//         Wp, C) = frames tf0 … tf0+Tc−1 of x (N, C, T, H, W) repeated
//         (nearest) by (ft, fh, fw) to Tu×Hu×Wu — with causal set, frame 0
//         once and every later frame ft times — then padded by (bt, bh, bw)
//         in front (replicated or zeros, mode 1 or 0; the sizes behind follow
//         from Tp, Hp, Wp), and that by zt zero frames on both sides (a
//         convolution's own temporal zero padding).
//
// All move a 64×64 tile of (channel, position) through shared memory, two
// neighbouring elements per thread and access; the _v variants use one
// 32-bit (16-bit types) or 64-bit (f32) access for the pair, which needs
// even row lengths (S for the reads of pack, C for its writes; K and S for
// unpack).

#define LT 64

DI void ld2(const float *p, float &a, float &b) {
	unsigned long long v = *(const unsigned long long *)p;
	a = U2F((unsigned int)v);
	b = U2F((unsigned int)(v >> 32));
}
DI void ld2(const h16 *p, float &a, float &b) {
	unsigned int v = *(const unsigned int *)p;
	a = h2f((unsigned short)(v & 0xffffu));
	b = h2f((unsigned short)(v >> 16));
}
DI void ld2(const b16 *p, float &a, float &b) {
	unsigned int v = *(const unsigned int *)p;
	a = b2f((unsigned short)(v & 0xffffu));
	b = b2f((unsigned short)(v >> 16));
}
DI void st2(float *p, float a, float b) {
	*(unsigned long long *)p = (unsigned long long)F2U(a) | ((unsigned long long)F2U(b) << 32);
}
DI void st2(h16 *p, float a, float b) { *(unsigned int *)p = (unsigned int)f2h(a) | ((unsigned int)f2h(b) << 16); }
DI void st2(b16 *p, float a, float b) { *(unsigned int *)p = (unsigned int)f2b(a) | ((unsigned int)f2b(b) << 16); }

template <typename T, bool VEC>
DI void pack_impl(T *R dst, const T *R src, long long C, long long Tn, long long S, long long t0, long long Tc) {
	__shared__ float tile[LT][LT + 1];
	long long s0 = BIDX * LT, c0 = BIDY * LT;
	long long n = BIDZ / Tc, tt = BIDZ % Tc, t = t0 + tt;
	bool in = t >= 0 && t < Tn;
	int lx = TID % 32, ly = TID / 32;
	for (int r = ly; r < LT; r += 8) { // rows of the tile: channels
		long long c = c0 + r, s = s0 + 2 * lx;
		float a = 0.0f, b = 0.0f;
		if (in && c < C) {
			const T *p = src + ((n * C + c) * Tn + t) * S + s;
			if (VEC && s + 1 < S) {
				ld2(p, a, b);
			} else {
				if (s < S)
					a = ld(p);
				if (s + 1 < S)
					b = ld(p + 1);
			}
		}
		tile[r][2 * lx] = a;
		tile[r][2 * lx + 1] = b;
	}
	fp_sync();
	for (int r = ly; r < LT; r += 8) { // rows of the output: positions
		long long s = s0 + r, c = c0 + 2 * lx;
		if (s >= S || c >= C)
			continue;
		T *q = dst + ((n * Tc + tt) * S + s) * C + c;
		float a = tile[2 * lx][r], b = tile[2 * lx + 1][r];
		if (VEC && c + 1 < C) {
			st2(q, a, b);
		} else {
			st(q, a);
			if (c + 1 < C)
				st(q + 1, b);
		}
	}
}

template <typename T, bool VEC>
DI void unpack_impl(T *R dst, const T *R src, const T *R bias, long long K, long long To, long long S, long long t0,
                    long long Tc) {
	__shared__ float tile[LT][LT + 1];
	long long s0 = BIDX * LT, k0 = BIDY * LT;
	long long n = BIDZ / Tc, tt = BIDZ % Tc;
	int lx = TID % 32, ly = TID / 32;
	for (int r = ly; r < LT; r += 8) { // rows of the tile: positions
		long long s = s0 + r, k = k0 + 2 * lx;
		float a = 0.0f, b = 0.0f;
		if (s < S) {
			const T *p = src + ((n * Tc + tt) * S + s) * K + k;
			if (VEC && k + 1 < K) {
				ld2(p, a, b);
			} else {
				if (k < K)
					a = ld(p);
				if (k + 1 < K)
					b = ld(p + 1);
			}
		}
		tile[r][2 * lx] = a;
		tile[r][2 * lx + 1] = b;
	}
	fp_sync();
	for (int r = ly; r < LT; r += 8) { // rows of the output: channels
		long long k = k0 + r, s = s0 + 2 * lx;
		if (k >= K || s >= S)
			continue;
		float bv = bias ? ld(bias + k) : 0.0f;
		T *q = dst + ((n * K + k) * To + t0 + tt) * S + s;
		float a = tile[2 * lx][r] + bv, b = tile[2 * lx + 1][r] + bv;
		if (VEC && s + 1 < S) {
			st2(q, a, b);
		} else {
			st(q, a);
			if (s + 1 < S)
				st(q + 1, b);
		}
	}
}

// The source index of padded coordinate i (front padding b) in n, or −1
// for a zero.
DI int padIndex(int i, int b, int n, int mode) {
	int j = i - b;
	if (j >= 0 && j < n)
		return j;
	if (mode == 0)
		return -1;
	return j < 0 ? 0 : n - 1;
}

struct PackPad {
	long long C, T, H, W; // x
	long long Tc, tf0;    // frames of the padded input packed
	int Tp, Hp, Wp;       // padded sizes (before the zero frames)
	int bt, bh, bw, zt, mode;
	int Tu, Hu, Wu; // upsampled sizes
	int ft, fh, fw, causal;
};

template <typename T, bool VEC>
DI void packpad_impl(T *R dst, const T *R src, const PackPad &a) {
	__shared__ float tile[LT][LT + 1];
	long long S = (long long)a.Hp * a.Wp;
	long long s0 = BIDX * LT, c0 = BIDY * LT;
	long long n = BIDZ / a.Tc, tt = BIDZ % a.Tc;
	int lx = TID % 32, ly = TID / 32;
	int t = -1, ts = (int)(a.tf0 + tt) - a.zt;
	if (ts >= 0 && ts < a.Tp)
		t = padIndex(ts, a.bt, a.Tu, a.mode);
	if (t > 0)
		t = a.causal ? 1 + (t - 1) / a.ft : t / a.ft;
	// The two positions this thread loads, as source offsets (−1: zero).
	long long off[2];
	for (int u = 0; u < 2; u++) {
		long long s = s0 + 2 * lx + u;
		off[u] = -1;
		if (t >= 0 && s < S) {
			int hp = (int)(s / a.Wp), wp = (int)(s - (long long)hp * a.Wp);
			int h = padIndex(hp, a.bh, a.Hu, a.mode), w = padIndex(wp, a.bw, a.Wu, a.mode);
			if (h >= 0 && w >= 0) {
				h /= a.fh;
				w /= a.fw;
				off[u] = ((long long)t * a.H + h) * a.W + w;
			}
		}
	}
	for (int r = ly; r < LT; r += 8) { // rows of the tile: channels
		long long c = c0 + r;
		float v[2] = {0.0f, 0.0f};
		if (c < a.C) {
			const T *p = src + (n * a.C + c) * a.T * a.H * a.W;
			for (int u = 0; u < 2; u++)
				if (off[u] >= 0)
					v[u] = ld(p + off[u]);
		}
		tile[r][2 * lx] = v[0];
		tile[r][2 * lx + 1] = v[1];
	}
	fp_sync();
	for (int r = ly; r < LT; r += 8) { // rows of the output: positions
		long long s = s0 + r, c = c0 + 2 * lx;
		if (s >= S || c >= a.C)
			continue;
		T *q = dst + ((n * a.Tc + tt) * S + s) * a.C + c;
		float x = tile[2 * lx][r], y = tile[2 * lx + 1][r];
		if (VEC && c + 1 < a.C) {
			st2(q, x, y);
		} else {
			st(q, x);
			if (c + 1 < a.C)
				st(q + 1, y);
		}
	}
}

#define LAYOUT(sfx, T)                                                                                          \
	KERNEL void pack_##sfx(T *R dst, const T *R src, long long C, long long Tn, long long S, long long t0,       \
	                       long long Tc) {                                                                      \
		pack_impl<T, false>(dst, src, C, Tn, S, t0, Tc);                                                        \
	}                                                                                                           \
	KERNEL void pack_##sfx##_v(T *R dst, const T *R src, long long C, long long Tn, long long S, long long t0,   \
	                           long long Tc) {                                                                  \
		pack_impl<T, true>(dst, src, C, Tn, S, t0, Tc);                                                         \
	}                                                                                                           \
	KERNEL void unpack_##sfx(T *R dst, const T *R src, const T *R bias, long long K, long long To, long long S, \
	                         long long t0, long long Tc) {                                                      \
		unpack_impl<T, false>(dst, src, bias, K, To, S, t0, Tc);                                                \
	}                                                                                                           \
	KERNEL void unpack_##sfx##_v(T *R dst, const T *R src, const T *R bias, long long K, long long To,          \
	                             long long S, long long t0, long long Tc) {                                     \
		unpack_impl<T, true>(dst, src, bias, K, To, S, t0, Tc);                                                 \
	}                                                                                                           \
	KERNEL void packpad_##sfx(T *R dst, const T *R src, PackPad a) { packpad_impl<T, false>(dst, src, a); }      \
	KERNEL void packpad_##sfx##_v(T *R dst, const T *R src, PackPad a) { packpad_impl<T, true>(dst, src, a); }
LAYOUT(f32, float)
LAYOUT(f16, h16)
LAYOUT(bf16, b16)
