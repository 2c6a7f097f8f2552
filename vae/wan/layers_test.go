package wan

import (
	"math"
	"testing"

	"github.com/framepack-go/framepack/backend/cpu"
	"github.com/framepack-go/framepack/internal/testutil/testdevice"
	"github.com/framepack-go/framepack/memory"
	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/weights"
)

// hostSource hands out random host f32 weights, a new seed each.
// hostSource makes random f32 weights on the CPU backend.
type hostSource struct {
	seed uint64
	be   tensor.Backend
}

func (p *hostSource) Make(w weights.Weight) (*tensor.Tensor, error) {
	p.seed++
	if p.be == nil {
		p.be = cpu.New()
	}
	r := randn(p.seed, w.Shape...)
	return tensor.Wrap(p.be, r.Buffer(), r.DType(), r.Shape()...), nil
}

// hostParams builds layers with random host weights.
func hostParams() *weights.Builder { return weights.NewBuilder(&hostSource{}, tensor.F32) }

func f64(t *tensor.Tensor) []float64 {
	v := tensor.Float32s(t)
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

// last moves x (B, C, T, H, W) onto s's backend channels-last, as the
// layers take it; first moves a layer's result back channels-first.
func last(s *tensor.Scope, x *tensor.Tensor) *tensor.Tensor  { return s.Permute(s.To(x), 0, 2, 3, 4, 1) }
func first(s *tensor.Scope, y *tensor.Tensor) *tensor.Tensor { return s.Permute(y, 0, 4, 1, 2, 3) }

func relL2(t *testing.T, what string, got *tensor.Tensor, want []float64, lim float64) {
	t.Helper()
	g := f64(got)
	if len(g) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(g), len(want))
	}
	var d, n float64
	for i := range g {
		d += (g[i] - want[i]) * (g[i] - want[i])
		n += want[i] * want[i]
	}
	r := math.Sqrt(d / n)
	t.Logf("%s: rel_l2 %.3g", what, r)
	if !(r <= lim) {
		t.Errorf("%s: rel_l2 %.3g above %.3g", what, r, lim)
	}
}

// TestRMSNormF64: F.normalize over the channels (norm floored at 1e-12)
// times √C·γ, in float64; a zero channel vector stays zero.
func TestRMSNormF64(t *testing.T) {
	const b, c, T, h, w = 2, 5, 3, 2, 4
	p := hostParams()
	n := newRMSNorm(p, "n", c, false)
	x := randn(9, b, c, T, h, w)
	xs := x.Float32s()
	for ch := 0; ch < c; ch++ { // position (0, :, 0, 0, 0) all zero
		xs[ch*T*h*w] = 0
	}
	s := tensor.NewScope(cpu.New())
	defer s.Close()
	got := first(s, s.ChannelsLastRMSNorm(last(s, x), n.gamma, n.eps, true))
	g := f64(n.gamma)
	want := make([]float64, len(xs))
	plane := T * h * w
	for bi := 0; bi < b; bi++ {
		for i := 0; i < plane; i++ {
			var ss float64
			for ch := 0; ch < c; ch++ {
				v := float64(xs[(bi*c+ch)*plane+i])
				ss += v * v
			}
			norm := max(math.Sqrt(ss), 1e-12)
			for ch := 0; ch < c; ch++ {
				y := float64(xs[(bi*c+ch)*plane+i]) / norm * math.Sqrt(c) * g[ch]
				want[(bi*c+ch)*plane+i] = y / (1 + math.Exp(-y))
			}
		}
	}
	relL2(t, "rms_norm+silu", got, want, 1e-6)
	if v := got.Float32s()[0]; v != 0 {
		t.Errorf("a zero vector normalises to %v, want 0", v)
	}
}

// TestAttentionF64: per-frame single-head attention with the RMS norm,
// to_qkv, proj and the residual, in float64.
func TestAttentionF64(t *testing.T) {
	const b, c, T, h, w = 1, 6, 2, 2, 3
	p := hostParams()
	a := newAttention(p, "a", c)
	x := randn(3, b, c, T, h, w)
	xs := f64(x)
	s := tensor.NewScope(cpu.New())
	defer s.Close()
	got := first(s, a.forward(s, last(s, x)))
	g, wq, bq, wp, bp := f64(a.norm.gamma), f64(a.qkv), f64(a.qkvb), f64(a.proj), f64(a.prjb)
	hw := h * w
	want := make([]float64, len(xs))
	at := func(ch, t, i int) float64 { return xs[(ch*T+t)*hw+i] }
	for t0 := 0; t0 < T; t0++ {
		// normalized tokens (hw, c), then q, k, v (hw, c each)
		tok := make([][]float64, hw)
		for i := range tok {
			var ss float64
			for ch := 0; ch < c; ch++ {
				ss += at(ch, t0, i) * at(ch, t0, i)
			}
			tok[i] = make([]float64, c)
			for ch := 0; ch < c; ch++ {
				tok[i][ch] = at(ch, t0, i) / max(math.Sqrt(ss), 1e-12) * math.Sqrt(c) * g[ch]
			}
		}
		qkv := make([][]float64, hw)
		for i := range qkv {
			qkv[i] = make([]float64, 3*c)
			for o := 0; o < 3*c; o++ {
				v := bq[o]
				for ch := 0; ch < c; ch++ {
					v += wq[o*c+ch] * tok[i][ch]
				}
				qkv[i][o] = v
			}
		}
		for i := 0; i < hw; i++ {
			sc := make([]float64, hw)
			mx := math.Inf(-1)
			for j := 0; j < hw; j++ {
				for ch := 0; ch < c; ch++ {
					sc[j] += qkv[i][ch] * qkv[j][c+ch]
				}
				sc[j] /= math.Sqrt(c)
				mx = max(mx, sc[j])
			}
			var sum float64
			for j := range sc {
				sc[j] = math.Exp(sc[j] - mx)
				sum += sc[j]
			}
			o := make([]float64, c)
			for j := range sc {
				for ch := 0; ch < c; ch++ {
					o[ch] += sc[j] / sum * qkv[j][2*c+ch]
				}
			}
			for oc := 0; oc < c; oc++ {
				v := bp[oc]
				for ch := 0; ch < c; ch++ {
					v += wp[oc*c+ch] * o[ch]
				}
				want[(oc*T+t0)*hw+i] = v + at(oc, t0, i)
			}
		}
	}
	relL2(t, "attention", got, want, 1e-6)
}

// conv3dF64 is a naive convolution of x (1, Cin, T, H, W) already padded.
func conv3dF64(x []float64, cin, T, H, W int, w, bias []float64, cout, kt, kh, kw int, st [3]int) ([]float64, [3]int) {
	oT, oH, oW := (T-kt)/st[0]+1, (H-kh)/st[1]+1, (W-kw)/st[2]+1
	out := make([]float64, cout*oT*oH*oW)
	for o := 0; o < cout; o++ {
		for t := 0; t < oT; t++ {
			for y := 0; y < oH; y++ {
				for xx := 0; xx < oW; xx++ {
					v := bias[o]
					for ci := 0; ci < cin; ci++ {
						for a := 0; a < kt; a++ {
							for bb := 0; bb < kh; bb++ {
								for cc := 0; cc < kw; cc++ {
									v += w[(((o*cin+ci)*kt+a)*kh+bb)*kw+cc] *
										x[((ci*T+t*st[0]+a)*H+y*st[1]+bb)*W+xx*st[2]+cc]
								}
							}
						}
					}
					out[((o*oT+t)*oH+y)*oW+xx] = v
				}
			}
		}
	}
	return out, [3]int{oT, oH, oW}
}

// zeroPad pads x (C, T, H, W) with zeros: before/after per axis.
func zeroPad(x []float64, c, T, H, W int, before, after [3]int) ([]float64, [3]int) {
	nT, nH, nW := T+before[0]+after[0], H+before[1]+after[1], W+before[2]+after[2]
	out := make([]float64, c*nT*nH*nW)
	for ch := 0; ch < c; ch++ {
		for t := 0; t < T; t++ {
			for y := 0; y < H; y++ {
				for xx := 0; xx < W; xx++ {
					out[((ch*nT+t+before[0])*nH+y+before[1])*nW+xx+before[2]] = x[((ch*T+t)*H+y)*W+xx]
				}
			}
		}
	}
	return out, [3]int{nT, nH, nW}
}

// TestCausalConvCacheF64: a causal conv run in chunks of 1, 4 and 4 frames
// with the feature cache equals the causal conv (two zero frames in front)
// of the whole sequence, in float64; on the plain CPU and through the
// conv3d chain's Conv3dPadded.
func TestCausalConvCacheF64(t *testing.T) {
	const cin, cout, T, H, W = 3, 4, 9, 5, 6
	p := hostParams()
	cv := newCausalConv(p, "c", cin, cout)
	x := randn(4, 1, cin, T, H, W)
	padded, ps := zeroPad(f64(x), cin, T, H, W, [3]int{2, 1, 1}, [3]int{0, 1, 1})
	want, _ := conv3dF64(padded, cin, ps[0], ps[1], ps[2], f64(cv.w), f64(cv.b), cout, 3, 3, 3, [3]int{1, 1, 1})
	onCPUAndChain(t, func(t *testing.T, s *tensor.Scope) {
		c := &causalConv{conv: conv{w: s.To(cv.w), b: s.To(cv.b), stride: cv.stride}}
		f := newFeatCache(s)
		var outs []*tensor.Tensor
		for _, r := range [][2]int{{0, 1}, {1, 5}, {5, 9}} {
			f.chunk()
			outs = append(outs, c.forward(s, f, last(s, s.Slice(s.To(x), 2, r[0], r[1]))))
		}
		relL2(t, "chunked causal conv", first(s, s.Concat(1, outs...)), want, 1e-6)
	})
}

// TestCausalConvNormedCacheF64: SiLU(RMS norm) then the causal conv,
// chunk by chunk with the norm written behind the cached frames, equals
// the causal conv of the whole normed sequence in float64, one-frame chunks
// (the previous cache's last frame in front) included; op by op on the
// plain CPU and through the chain, with the fused norm's reference on the
// CPU posing as a device.
func TestCausalConvNormedCacheF64(t *testing.T) {
	const cin, cout, T, H, W = 3, 4, 9, 5, 6
	p := hostParams()
	cv := newCausalConv(p, "c", cin, cout)
	n := newRMSNorm(p, "n", cin, false)
	x := randn(5, 1, cin, T, H, W)
	xs, g := f64(x), f64(n.gamma)
	plane := T * H * W
	normed := make([]float64, len(xs))
	for i := 0; i < plane; i++ {
		var ss float64
		for ch := 0; ch < cin; ch++ {
			ss += xs[ch*plane+i] * xs[ch*plane+i]
		}
		norm := max(math.Sqrt(ss), 1e-12)
		for ch := 0; ch < cin; ch++ {
			y := xs[ch*plane+i] / norm * math.Sqrt(cin) * g[ch]
			normed[ch*plane+i] = y / (1 + math.Exp(-y))
		}
	}
	padded, ps := zeroPad(normed, cin, T, H, W, [3]int{2, 1, 1}, [3]int{0, 1, 1})
	want, _ := conv3dF64(padded, cin, ps[0], ps[1], ps[2], f64(cv.w), f64(cv.b), cout, 3, 3, 3, [3]int{1, 1, 1})
	run := func(t *testing.T, s *tensor.Scope) {
		c := &causalConv{conv: conv{w: s.To(cv.w), b: s.To(cv.b), stride: cv.stride}}
		nn := rmsNorm{gamma: s.To(n.gamma), eps: n.eps}
		f := newFeatCache(s)
		var outs []*tensor.Tensor
		for _, r := range [][2]int{{0, 1}, {1, 2}, {2, 5}, {5, 6}, {6, 9}} {
			f.chunk()
			outs = append(outs, c.forwardNormed(s, f, nn, last(s, s.Slice(s.To(x), 2, r[0], r[1])), true))
		}
		relL2(t, "chunked normed causal conv", tensor.ToHost(first(s, s.Concat(1, outs...))), want, 1e-6)
	}
	onCPUAndChain(t, run)
	t.Run("fused", func(t *testing.T) {
		s := tensor.NewScope(testdevice.NewFake())
		defer s.Close()
		if !s.Fused() {
			t.Fatal("no fused kernels on the fake device")
		}
		run(t, s)
	})
}

// onCPUAndChain runs f on the plain CPU and through the conv3d chain
// (chainBackend), each a subtest with its own scope.
func onCPUAndChain(t *testing.T, f func(t *testing.T, s *tensor.Scope)) {
	for _, tc := range []struct {
		name string
		be   tensor.Backend
	}{{"cpu", cpu.New()}, {"chain", chainBackend(t)}} {
		t.Run(tc.name, func(t *testing.T) {
			s := tensor.NewScope(tc.be)
			defer s.Close()
			f(t, s)
		})
	}
}

func chainBackend(t *testing.T) tensor.Backend {
	be, _ := testdevice.Chained(t)
	return be
}

// TestUpsampleF64: the upsample3d resample on its second chunk (after
// "Rep": two zero frames in front of time_conv), its channel halves
// interleaved in time, then nearest ×2 and the 3×3 conv, in float64.
func TestUpsampleF64(t *testing.T) {
	const c, H, W = 4, 3, 2
	p := hostParams()
	r := newResample(p, "u", c, true, true)
	// The checkpoint's conv, which newResample folded into its sub-pixel
	// form: the same source draws the same values in the same order.
	p0 := hostParams()
	w0, b0 := p0.Get("u.resample.1.weight", c/2, c, 3, 3), p0.Get("u.resample.1.bias", c/2)
	x0, x1 := randn(5, 1, c, 1, H, W), randn(6, 1, c, 1, H, W)
	onCPUAndChain(t, func(t *testing.T, s *tensor.Scope) {
		rr := &resample{up: true, temporal: true,
			conv:     &conv{w: s.To(r.conv.w), b: s.To(r.conv.b), stride: r.conv.stride},
			timeConv: &conv{w: s.To(r.timeConv.w), b: s.To(r.timeConv.b), stride: r.timeConv.stride}}
		f := newFeatCache(s)
		f.chunk()
		y0 := rr.forward(s, f, last(s, x0))
		if got := y0.Shape(); !equal(got, []int{1, 1, 2 * H, 2 * W, c / 2}) {
			t.Fatalf("first chunk %v", got)
		}
		f.chunk()
		got := first(s, rr.forward(s, f, last(s, x1)))
		// time_conv over [0, 0, x1]: one frame of 2c channels.
		pt, pts := zeroPad(f64(x1), c, 1, H, W, [3]int{2, 0, 0}, [3]int{})
		tc1, _ := conv3dF64(pt, c, pts[0], pts[1], pts[2], f64(r.timeConv.w), f64(r.timeConv.b), 2*c, 3, 1, 1, [3]int{1, 1, 1})
		var want []float64
		for k := 0; k < 2; k++ { // frame k: channels [k·c, (k+1)·c)
			fr := tc1[k*c*H*W : (k+1)*c*H*W]
			up := make([]float64, c*2*H*2*W)
			for ch := 0; ch < c; ch++ {
				for y := 0; y < 2*H; y++ {
					for xx := 0; xx < 2*W; xx++ {
						up[(ch*2*H+y)*2*W+xx] = fr[(ch*H+y/2)*W+xx/2]
					}
				}
			}
			pu, pus := zeroPad(up, c, 1, 2*H, 2*W, [3]int{0, 1, 1}, [3]int{0, 1, 1})
			o, _ := conv3dF64(pu, c, pus[0], pus[1], pus[2], f64(w0), f64(b0), c/2, 1, 3, 3, [3]int{1, 1, 1})
			want = append(want, o...)
		}
		// want is (frame, c/2, 2H, 2W); the output is (c/2, frame, 2H, 2W).
		hw := 4 * H * W
		ordered := make([]float64, len(want))
		for k := 0; k < 2; k++ {
			for ch := 0; ch < c/2; ch++ {
				copy(ordered[(ch*2+k)*hw:(ch*2+k+1)*hw], want[(k*c/2+ch)*hw:(k*c/2+ch+1)*hw])
			}
		}
		relL2(t, "upsample3d", got, ordered, 1e-6)
	})
}

// TestDecodeThroughChainMatches: the whole decode and encode through the
// conv3d chain (Conv3dLast: each tier channels-last or on channels-first
// copies), and through a profiling hook, equal the plain CPU path.
func TestDecodeThroughChainMatches(t *testing.T) {
	cfg := tinyConfig()
	z, x := randn(11, 1, 4, 3, 2, 3), randn(12, 1, 3, 5, 16, 24)
	var outs [3]*tensor.Tensor
	var means [3]*tensor.Tensor
	for i, be := range []tensor.Backend{cpu.New(), chainBackend(t), tensor.WithSettings(cpu.New(), tensor.Settings{Hook: func(_ tensor.Op, run func() error) error { return run() }})} {
		v, err := RandomWeights(cfg, be, Options{}, 3)
		if err != nil {
			t.Fatal(err)
		}
		outs[i] = decode(t, v, z, DecodeOptions{})
		means[i], _ = encode(t, v, x, Tiling{})
		v.Close()
	}
	relL2(t, "decode through the chain", outs[1], f64(outs[0]), 1e-6)
	relL2(t, "encode through the chain", means[1], f64(means[0]), 1e-6)
	relL2(t, "decode through the profiler", outs[2], f64(outs[0]), 1e-6)
	relL2(t, "encode through the profiler", means[2], f64(means[0]), 1e-6)
}

// TestDecodePeakBoundsMeasured: the dry-run peak model against the peak a
// meter measures on the CPU (which makes no upload or cast of f32 latents:
// the model's extra is at most those).
func TestDecodePeakBoundsMeasured(t *testing.T) {
	cfg := tinyConfig()
	for _, tc := range []struct {
		shape []int
		til   Tiling
	}{
		{[]int{1, 4, 5, 3, 4}, Tiling{}},
		{[]int{1, 4, 4, 6, 8}, SpatialTiling(32, 16)},
	} {
		m := memory.Budgeted(cpu.New(), memory.Budget{Device: "test", Cap: 1 << 40})
		v, err := RandomWeights(cfg, m, Options{}, 1)
		if err != nil {
			t.Fatal(err)
		}
		m.ResetPeak()
		w := m.Stats().InUse
		decode(t, v, randn(1, tc.shape...), DecodeOptions{Tiling: tc.til})
		measured := m.Stats().Peak - w
		planned := v.DecodePeak(tc.shape, tc.til)
		zn := int64(tensor.Numel(tc.shape))
		t.Logf("%v %s: planned %d B, measured %d B", tc.shape, tc.til, planned, measured)
		if planned < measured || planned > measured+zn*8 {
			t.Errorf("%v %s: planned %d B for a measured %d B", tc.shape, tc.til, planned, measured)
		}
		v.Close()
	}
}

// TestDownsample3dF64: downsample3d over chunks of 1, 4 and 4 frames: each
// frame's right/bottom zero pad and 3×3 stride-2 conv; the first chunk only
// cached, later ones time_conv (kernel 3, stride 2) over the previous
// chunk's last frame and the chunk, in float64.
func TestDownsample3dF64(t *testing.T) {
	const c, T, H, W = 3, 9, 6, 4
	p := hostParams()
	r := newResample(p, "d", c, false, true)
	x := randn(8, 1, c, T, H, W)
	// spatial: every frame alone
	sp, sps := zeroPad(f64(x), c, T, H, W, [3]int{}, [3]int{0, 1, 1})
	w2 := f64(r.conv.w)
	spatial, ss := conv3dF64(sp, c, sps[0], sps[1], sps[2], w2, f64(r.conv.b), c, 1, 3, 3, [3]int{1, 2, 2})
	hw := ss[1] * ss[2]
	frames := func(idx ...int) []float64 { // (c, len(idx), h, w)
		out := make([]float64, 0, c*len(idx)*hw)
		for ch := 0; ch < c; ch++ {
			for _, f := range idx {
				out = append(out, spatial[(ch*T+f)*hw:(ch*T+f+1)*hw]...)
			}
		}
		return out
	}
	var want [3][]float64
	want[0] = frames(0)
	want[1], _ = conv3dF64(frames(0, 1, 2, 3, 4), c, 5, ss[1], ss[2], f64(r.timeConv.w), f64(r.timeConv.b), c, 3, 1, 1, [3]int{2, 1, 1})
	want[2], _ = conv3dF64(frames(4, 5, 6, 7, 8), c, 5, ss[1], ss[2], f64(r.timeConv.w), f64(r.timeConv.b), c, 3, 1, 1, [3]int{2, 1, 1})
	onCPUAndChain(t, func(t *testing.T, s *tensor.Scope) {
		rr := &resample{temporal: true,
			conv:     &conv{w: s.To(r.conv.w), b: s.To(r.conv.b), stride: r.conv.stride},
			timeConv: &conv{w: s.To(r.timeConv.w), b: s.To(r.timeConv.b), stride: r.timeConv.stride}}
		f := newFeatCache(s)
		for i, rg := range [][2]int{{0, 1}, {1, 5}, {5, 9}} {
			f.chunk()
			got := first(s, rr.forward(s, f, last(s, s.Slice(s.To(x), 2, rg[0], rg[1]))))
			relL2(t, "downsample3d chunk "+string(rune('0'+i)), got, want[i], 1e-6)
		}
	})
}

// TestUpsampleThirdChunkF64: upsample3d's time_conv on the third chunk
// reads the cached frames [0, x1] (the zero frame and the previous chunk's
// input) in front of x2.
func TestUpsampleThirdChunkF64(t *testing.T) {
	const c, H, W = 2, 2, 3
	p := hostParams()
	r := newResample(p, "u", c, true, true)
	xs := []*tensor.Tensor{randn(21, 1, c, 1, H, W), randn(22, 1, c, 1, H, W), randn(23, 1, c, 1, H, W)}
	s := tensor.NewScope(cpu.New())
	defer s.Close()
	// time_conv alone: the spatial part is TestUpsampleF64's.
	rr := &resample{up: true, temporal: true, timeConv: r.timeConv}
	f := newFeatCache(s)
	var got *tensor.Tensor
	for _, x := range xs {
		f.chunk()
		got = first(s, rr.timeUp(s, f, last(s, x)))
	}
	var in []float64
	for ch := 0; ch < c; ch++ { // (c, 3 frames: 0, x1, x2)
		in = append(in, make([]float64, H*W)...)
		in = append(in, f64(xs[1])[ch*H*W:(ch+1)*H*W]...)
		in = append(in, f64(xs[2])[ch*H*W:(ch+1)*H*W]...)
	}
	tc, _ := conv3dF64(in, c, 3, H, W, f64(r.timeConv.w), f64(r.timeConv.b), 2*c, 3, 1, 1, [3]int{1, 1, 1})
	// (2c, 1, H, W) → (c, 2, H, W): frame k is channels [k·c, (k+1)·c).
	want := make([]float64, len(tc))
	for k := 0; k < 2; k++ {
		for ch := 0; ch < c; ch++ {
			copy(want[(ch*2+k)*H*W:(ch*2+k+1)*H*W], tc[(k*c+ch)*H*W:(k*c+ch+1)*H*W])
		}
	}
	relL2(t, "upsample3d third chunk", got, want, 1e-6)
}

// TestDecodeTailPerFrame: running the layers after the last temporal
// upsampler one frame at a time gives the whole chunk's result.
func TestDecodeTailPerFrame(t *testing.T) {
	be := cpu.New()
	v := randomVAE(t, tinyConfig(), be, Options{}, 5)
	if v.m.Dec.tailFrom != 2 {
		t.Fatalf("tail from up block %d, want 2 (after the two temporal upsamplers)", v.m.Dec.tailFrom)
	}
	z := randn(13, 1, 4, 4, 3, 2)
	split := decode(t, v, z, DecodeOptions{})
	v.m.Dec.wholeChunk = true
	whole := decode(t, v, z, DecodeOptions{})
	relL2(t, "per-frame tail", split, f64(whole), 1e-6)
}
