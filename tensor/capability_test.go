package tensor_test

import (
	"math"
	"math/rand/v2"
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
