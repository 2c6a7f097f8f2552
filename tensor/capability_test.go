package tensor_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/framepack-go/framepack/backend/cpu"
	"github.com/framepack-go/framepack/tensor"
)

// layer is a wrapper that changes nothing.
type layer struct{ tensor.Backend }

func (l layer) Unwrap() tensor.Backend { return l.Backend }

// fused is the CPU with the fused kernels' reference.
type fused struct {
	*cpu.Backend
	cpu.Fused
}

// TestAs finds a capability through layers, stops at a backend that does
// not unwrap, and reports host backing and pools through them.
func TestAs(t *testing.T) {
	be := layer{tensor.WithSettings(layer{fused{Backend: cpu.New()}}, tensor.Settings{})}
	if _, ok := tensor.As[tensor.FusedKernels](be); !ok {
		t.Error("fused kernels not found through three layers")
	}
	if _, ok := tensor.As[tensor.PaddedConv](be); ok {
		t.Error("a capability no layer has")
	}
	if !tensor.IsHostBacked(be) {
		t.Error("the CPU under layers is not host backed")
	}
	opaque := struct{ tensor.Backend }{fused{Backend: cpu.New()}}
	if _, ok := tensor.As[tensor.FusedKernels](opaque); ok {
		t.Error("As looked through a backend without Unwrap")
	}
	if err := tensor.Trim(be); err != nil {
		t.Error(err)
	}
}

// TestHookAndOpByOp: a Hook on the backend sees every kernel of a scope and
// of its children, with classes and flops; OpByOp turns the fused kernels
// off, and the op-by-op fallback gives the fused kernels' result.
func TestHookAndOpByOp(t *testing.T) {
	seen := map[string]float64{}
	hook := func(op tensor.Op, run func() error) error {
		seen[op.Class] += op.Flops
		return run()
	}
	base := fused{Backend: cpu.New()}
	s := tensor.NewScope(tensor.WithSettings(base, tensor.Settings{Hook: hook}))
	defer s.Close()
	if !s.Fused() {
		t.Fatal("the fused kernels are not used")
	}
	c := s.Child()
	x := s.To(tensor.FromFloat32([]float32{1, 2, 3, 4, 5, 6}, 1, 2, 3))
	shift := s.To(tensor.FromFloat32([]float32{0.5, 0, -1}, 1, 1, 3))
	scale := s.To(tensor.FromFloat32([]float32{0.1, 0.2, 0.3}, 1, 1, 3))
	got := tensor.Float32s(c.LayerNormModulate(x, shift, scale, 1e-6))
	c.MatMul(x.Reshape(2, 3), x.Reshape(2, 3), false, true)
	c.Close()
	if _, ok := seen["fused layer_norm_modulate"]; !ok {
		t.Errorf("the hook did not see the fused kernel: %v", seen)
	}
	if f := seen["matmul"]; f != 2*2*2*3 {
		t.Errorf("matmul flops %v, want 24 (seen %v)", f, seen)
	}

	ref := s.ChildWith(tensor.Settings{OpByOp: true})
	defer ref.Close()
	if ref.Fused() {
		t.Fatal("OpByOp still uses the fused kernels")
	}
	want := tensor.Float32s(ref.LayerNormModulate(x, shift, scale, 1e-6))
	for i := range want {
		if math.Abs(float64(got[i]-want[i])) > 1e-5 {
			t.Fatalf("fused %v, op by op %v", got, want)
		}
	}
	if tensor.Catch(func() { ref.GatedAdd(x, x, nil, shift.Reshape(3)) }) != nil {
		t.Error("op-by-op gated add with a broadcast gate")
	}
	if err := tensor.Catch(func() { s.GatedAdd(x, x.Reshape(2, 3), nil, shift) }); err == nil {
		t.Error("fused gated add of mismatched x and y: no error")
	}
}

// TestChannelsLastRMSNorm: the fused channels-last RMS norm (cpu.Fused,
// the GPU kernel's reference) and Scope's op-by-op fallback (RMSNorm, SiLU)
// both equal float64 math rounded where RMSNorm and SiLU round, for x (B,
// T, H, W, C) and (B, C).
func TestChannelsLastRMSNorm(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	s := tensor.NewScope(fused{Backend: cpu.New()})
	defer s.Close()
	ref := s.ChildWith(tensor.Settings{OpByOp: true})
	defer ref.Close()
	for _, shape := range [][]int{{2, 3, 4, 5, 6}, {3, 16}} {
		for _, dt := range []tensor.DType{tensor.F32, tensor.BF16} {
			for _, withW := range []bool{false, true} {
				for _, silu := range []bool{false, true} {
					c := shape[len(shape)-1]
					x := s.Cast(s.To(tensor.RandN(rng, shape...)), dt)
					var w *tensor.Tensor
					if withW {
						w = s.Cast(s.To(tensor.RandN(rng, c)), dt)
					}
					xs, round := tensor.Float32s(s.Cast(x, tensor.F32)), tensor.Rounder(dt)
					var ws []float32
					if w != nil {
						ws = tensor.Float32s(s.Cast(w, tensor.F32))
					}
					want := make([]float64, len(xs))
					for r := 0; r < len(xs)/c; r++ {
						var q float64
						for ch := 0; ch < c; ch++ {
							v := float64(xs[r*c+ch])
							q += v * v
						}
						rs := 1 / math.Sqrt(q/float64(c)+1e-6)
						for ch := 0; ch < c; ch++ {
							v := float64(xs[r*c+ch]) * rs
							if ws != nil {
								v = float64(round(float32(v))) * float64(ws[ch])
							}
							if silu {
								v = float64(round(float32(v)))
								v /= 1 + math.Exp(-v)
							}
							want[r*c+ch] = v
						}
					}
					tol := 1e-5
					if dt == tensor.BF16 {
						tol = 1.0 / 128 // one bf16 step (the rounding of a value at a tie may go either way)
					}
					for name, sc := range map[string]*tensor.Scope{"fused": s, "op by op": ref} {
						got := tensor.Float32s(sc.Cast(sc.ChannelsLastRMSNorm(x, w, 1e-6, silu), tensor.F32))
						for i := range want {
							if d := math.Abs(float64(got[i]) - want[i]); d > tol*math.Max(1, math.Abs(want[i])) || d != d {
								t.Fatalf("%s %v %s weight=%v silu=%v [%d]: %v, want %v", name, shape, dt, withW, silu, i, got[i], want[i])
							}
						}
					}
				}
			}
		}
	}
	// Behind a front of cached frames: the concat of the front and the norm,
	// fused and op by op alike.
	x, w := s.To(tensor.RandN(rng, 2, 3, 4, 5, 6)), s.To(tensor.RandN(rng, 6))
	front := s.To(tensor.RandN(rng, 2, 2, 4, 5, 6))
	want := tensor.Float32s(ref.Concat(1, front, ref.ChannelsLastRMSNorm(x, w, 1e-6, true)))
	for name, sc := range map[string]*tensor.Scope{"fused": s, "op by op": ref} {
		got := sc.ChannelsLastRMSNormAfter(front, x, w, 1e-6, true)
		if !slices.Equal(got.Shape(), []int{2, 5, 4, 5, 6}) {
			t.Fatalf("%s: shape %v", name, got.Shape())
		}
		for i, v := range tensor.Float32s(got) {
			if math.Abs(float64(v-want[i])) > 1e-5*math.Max(1, math.Abs(float64(want[i]))) {
				t.Fatalf("%s after a front [%d]: %v, want %v", name, i, v, want[i])
			}
		}
	}
	// Into a view of one frame of a larger tensor: that frame is the norm,
	// the others are untouched.
	x1 := s.To(tensor.RandN(rng, 1, 1, 4, 5, 6))
	norm := tensor.Float32s(ref.ChannelsLastRMSNorm(x1, w, 1e-6, true))
	for name, sc := range map[string]*tensor.Scope{"fused": s, "op by op": ref} {
		ring := sc.Clone(front.Reshape(1, 4, 4, 5, 6))
		before := tensor.Float32s(ring)
		dst, ok := sc.ViewRows(ring, 2, 3)
		if !ok {
			t.Fatalf("%s: no view of a host tensor", name)
		}
		sc.ChannelsLastRMSNormInto(dst, x1, w, 1e-6, true)
		per := 4 * 5 * 6
		for i, v := range tensor.Float32s(ring) {
			want := before[i]
			if i/per == 2 {
				want = norm[i%per]
			}
			if math.Abs(float64(v-want)) > 1e-5*math.Max(1, math.Abs(float64(want))) {
				t.Fatalf("%s into frame 2 of 4 [%d]: %v, want %v", name, i, v, want)
			}
		}
		if err := tensor.Catch(func() { sc.ChannelsLastRMSNormInto(ring, x1, w, 1e-6, true) }); err == nil {
			t.Errorf("%s: a norm into a tensor of another shape went through", name)
		}
	}
	if err := tensor.Catch(func() {
		s.ChannelsLastRMSNorm(s.To(tensor.RandN(rng, 2, 3, 4)), s.To(tensor.RandN(rng, 3)), 1e-6, false)
	}); err == nil {
		t.Error("a weight of the wrong channel count: no error")
	}
}

// TestConv3dPaddedFallback: on a backend that cannot convolve through a
// padding, Scope.Conv3dPadded (upsample included) equals the padded input
// made by Padding.Materialize and convolved, and a consumed input is freed.
func TestConv3dPaddedFallback(t *testing.T) {
	be := cpu.New()
	rng := rand.New(rand.NewPCG(1, 2))
	rnd := func(shape ...int) *tensor.Tensor { return tensor.RandN(rng, shape...) }
	causal := tensor.Padding{Before: [3]int{2, 1, 1}, After: [3]int{0, 1, 1}, Mode: tensor.PadReplicate}
	for _, c := range []struct {
		name   string
		up     [3]int
		stride [3]int
	}{{"causal", [3]int{}, [3]int{1, 1, 1}}, {"stride2", [3]int{}, [3]int{2, 2, 2}},
		{"upsample", [3]int{2, 2, 2}, [3]int{1, 1, 1}}, {"spatial_upsample", [3]int{1, 2, 2}, [3]int{1, 1, 1}}} {
		t.Run(c.name, func(t *testing.T) {
			pad := causal
			pad.Upsample, pad.CausalFirst = c.up, true
			x, w, b := rnd(1, 3, 3, 4, 5), rnd(2, 3, 3, 3, 3), rnd(2)
			px, err := pad.Materialize(be, x)
			if err != nil {
				t.Fatal(err)
			}
			s := tensor.NewScope(be)
			defer s.Close()
			want := tensor.Float32s(s.Conv3d(px, w, b, c.stride, [3]int{}))
			xs := s.Clone(x)
			got := s.Conv3dPadded(xs, w, b, c.stride, pad, true)
			if g := tensor.Float32s(got); len(g) != len(want) {
				t.Fatalf("%v, want %d values", got.Shape(), len(want))
			} else {
				for i := range g {
					if math.Abs(float64(g[i]-want[i])) > 1e-4 {
						t.Fatalf("element %d: %v, want %v", i, g[i], want[i])
					}
				}
			}
			if err := tensor.Catch(func() { s.Add(xs, xs) }); err == nil {
				t.Error("the consumed input is still usable")
			}
		})
	}
}

// lastConv is the CPU posing as a channels-last convolver: it records the
// padding each call asks of it and convolves channels-first copies.
type lastConv struct {
	*cpu.Backend
	pads [][3]int
	acc  []bool
	last []bool
}

func (l *lastConv) Conv3dLast(dst, x, w, bias *tensor.Tensor, p tensor.ConvParams) error {
	l.pads = append(l.pads, p.Padding)
	l.acc = append(l.acc, p.Accumulate)
	l.last = append(l.last, p.WeightLast)
	return tensor.Catch(func() {
		s := tensor.NewScope(l.Backend)
		defer s.Close()
		if p.WeightLast {
			w = s.Permute(w, 0, 4, 1, 2, 3)
		}
		y := s.Permute(s.Conv3d(s.Permute(x, 0, 4, 1, 2, 3), w, bias, p.Stride, p.Padding), 0, 2, 3, 4, 1)
		d := dst.Float32s()
		for i, v := range y.Float32s() {
			if p.Accumulate {
				v += d[i]
			}
			d[i] = v
		}
	})
}

// TestConv3dLast: Scope.Conv3dLast on x (B, T, H, W, C) equals float64
// math on a backend without channels-last convolutions (channels-first
// copies) and on one with them, which is asked to pad only what is
// symmetric (the rest a padded copy made by the scope).
func TestConv3dLast(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const b, T, H, W, cin, cout = 2, 4, 5, 6, 3, 4
	x, w, bias := tensor.RandN(rng, b, T, H, W, cin), tensor.RandN(rng, cout, cin, 3, 3, 3), tensor.RandN(rng, cout)
	xs, ws, bs := x.Float32s(), w.Float32s(), bias.Float32s()
	pad := tensor.Padding{Before: [3]int{2, 1, 1}, After: [3]int{0, 1, 2}}
	stride := [3]int{1, 1, 2}
	pT, pH, pW := T+2, H+2, W+3
	oT, oH, oW := pT-2, pH-2, (pW-3)/2+1
	want := make([]float64, b*oT*oH*oW*cout)
	at := func(bi, t, y, xx, c int) float64 { // x zero-padded
		t, y, xx = t-pad.Before[0], y-pad.Before[1], xx-pad.Before[2]
		if t < 0 || t >= T || y < 0 || y >= H || xx < 0 || xx >= W {
			return 0
		}
		return float64(xs[(((bi*T+t)*H+y)*W+xx)*cin+c])
	}
	for bi := 0; bi < b; bi++ {
		for t := 0; t < oT; t++ {
			for y := 0; y < oH; y++ {
				for xx := 0; xx < oW; xx++ {
					for o := 0; o < cout; o++ {
						v := float64(bs[o])
						for c := 0; c < cin; c++ {
							for i := 0; i < 27; i++ {
								v += float64(ws[(o*cin+c)*27+i]) * at(bi, t+i/9, y+i/3%3, xx*stride[2]+i%3, c)
							}
						}
						want[(((bi*oT+t)*oH+y)*oW+xx)*cout+o] = v
					}
				}
			}
		}
	}
	lc := &lastConv{Backend: cpu.New()}
	for name, be := range map[string]tensor.Backend{"channels-first copies": cpu.New(), "channels-last": lc} {
		s := tensor.NewScope(be)
		got := s.Conv3dLast(s.Clone(x), w, bias, stride, pad, true)
		if !slices.Equal(got.Shape(), []int{b, oT, oH, oW, cout}) {
			t.Fatalf("%s: shape %v", name, got.Shape())
		}
		for i, v := range got.Float32s() {
			if math.Abs(float64(v)-want[i]) > 1e-4*math.Max(1, math.Abs(want[i])) {
				t.Fatalf("%s: [%d] %v, want %v", name, i, v, want[i])
			}
		}
		// Conv3dLastAdd adds the same convolution to what y holds.
		y0 := tensor.RandN(rng, b, oT, oH, oW, cout)
		y := s.Clone(y0)
		s.Conv3dLastAdd(y, x, w, bias, stride, pad)
		for i, v := range y.Float32s() {
			if e := want[i] + float64(y0.Float32s()[i]); math.Abs(float64(v)-e) > 1e-4*math.Max(1, math.Abs(e)) {
				t.Fatalf("%s: conv3d added: [%d] %v, want %v", name, i, v, e)
			}
		}
		if err := tensor.Catch(func() { s.Conv3dLastAdd(s.Clone(y0).Reshape(b*oT, oH, oW, cout), x, w, bias, stride, pad) }); err == nil {
			t.Errorf("%s: adding a convolution to a tensor of another shape went through", name)
		}
		// The weight packed channels-last gives the same, new or added.
		wl := s.Permute(w, 0, 2, 3, 4, 1)
		packed := s.Conv3dLastPacked(s.Clone(x), wl, bias, stride, pad, true)
		y = s.Clone(y0)
		s.Conv3dLastAddPacked(y, x, wl, bias, stride, pad)
		for i, v := range packed.Float32s() {
			e := want[i] + float64(y0.Float32s()[i])
			if math.Abs(float64(v)-want[i]) > 1e-4*math.Max(1, math.Abs(want[i])) ||
				math.Abs(float64(y.Float32s()[i])-e) > 1e-4*math.Max(1, math.Abs(e)) {
				t.Fatalf("%s: packed weight: [%d] %v and added %v, want %v and %v", name, i, v, y.Float32s()[i], want[i], e)
			}
		}
		if err := tensor.Catch(func() { s.Conv3dLastPacked(x, w.Reshape(cout, 9, 3, 1, cin), bias, stride, pad, false) }); err == nil {
			t.Errorf("%s: a packed weight of a kernel larger than the input went through", name)
		}
		s.Close()
	}
	if !slices.Equal(lc.pads, [][3]int{{0, 1, 1}, {0, 1, 1}, {0, 1, 1}, {0, 1, 1}}) ||
		!slices.Equal(lc.acc, []bool{false, true, false, true}) || !slices.Equal(lc.last, []bool{false, false, true, true}) {
		t.Errorf("the backend was asked for paddings %v, accumulating %v, packed %v", lc.pads, lc.acc, lc.last)
	}
}
