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

// TestChannelRMSNorm: the fused channel RMS norm (cpu.Fused, the GPU
// kernel's reference) and Scope's op-by-op fallback (channels moved last,
// RMSNorm, moved back, SiLU) both equal float64 math rounded where RMSNorm
// and SiLU round, for x (B, C, T, H, W) and (B, C).
func TestChannelRMSNorm(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	s := tensor.NewScope(fused{Backend: cpu.New()})
	defer s.Close()
	ref := s.ChildWith(tensor.Settings{OpByOp: true})
	defer ref.Close()
	for _, shape := range [][]int{{2, 6, 3, 4, 5}, {3, 16}} {
		for _, dt := range []tensor.DType{tensor.F32, tensor.BF16} {
			for _, withW := range []bool{false, true} {
				for _, silu := range []bool{false, true} {
					c := shape[1]
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
					per := len(xs) / (shape[0] * c)
					want := make([]float64, len(xs))
					for b := 0; b < shape[0]; b++ {
						for p := 0; p < per; p++ {
							var q float64
							for ch := 0; ch < c; ch++ {
								v := float64(xs[(b*c+ch)*per+p])
								q += v * v
							}
							rs := 1 / math.Sqrt(q/float64(c)+1e-6)
							for ch := 0; ch < c; ch++ {
								v := float64(xs[(b*c+ch)*per+p]) * rs
								if ws != nil {
									v = float64(round(float32(v))) * float64(ws[ch])
								}
								if silu {
									v = float64(round(float32(v)))
									v /= 1 + math.Exp(-v)
								}
								want[(b*c+ch)*per+p] = v
							}
						}
					}
					tol := 1e-5
					if dt == tensor.BF16 {
						tol = 1.0 / 128 // one bf16 step (the rounding of a value at a tie may go either way)
					}
					for name, sc := range map[string]*tensor.Scope{"fused": s, "op by op": ref} {
						got := tensor.Float32s(sc.Cast(sc.ChannelRMSNorm(x, w, 1e-6, silu), tensor.F32))
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
	x, w := s.To(tensor.RandN(rng, 2, 6, 3, 4, 5)), s.To(tensor.RandN(rng, 6))
	front := s.To(tensor.RandN(rng, 2, 6, 2, 4, 5))
	want := tensor.Float32s(ref.Concat(2, front, ref.ChannelRMSNorm(x, w, 1e-6, true)))
	for name, sc := range map[string]*tensor.Scope{"fused": s, "op by op": ref} {
		got := sc.ChannelRMSNormAfter(front, x, w, 1e-6, true)
		if !slices.Equal(got.Shape(), []int{2, 6, 5, 4, 5}) {
			t.Fatalf("%s: shape %v", name, got.Shape())
		}
		for i, v := range tensor.Float32s(got) {
			if math.Abs(float64(v-want[i])) > 1e-5*math.Max(1, math.Abs(float64(want[i]))) {
				t.Fatalf("%s after a front [%d]: %v, want %v", name, i, v, want[i])
			}
		}
	}
	if err := tensor.Catch(func() { s.ChannelRMSNorm(s.To(tensor.RandN(rng, 2, 3, 4)), s.To(tensor.RandN(rng, 4)), 1e-6, false) }); err == nil {
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
