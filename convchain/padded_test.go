package convchain

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"testing"

	"github.com/framepack-go/framepack/backend/cpu"
	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/tensor/backendtest"
)

// padTier pads itself: it records the input it was given and runs the CPU
// backend on a padded copy of its own.
type padTier struct {
	cpu    tensor.Backend
	fail   bool
	padded [][]int // the x shapes RunPadded saw
}

func (*padTier) Name() string { return "padding" }
func (*padTier) Plan(k Key, _ *Plan) (*Plan, error) {
	if k.Layout != "ncdhw" { // as the GPU's channels-first tiers
		return nil, fmt.Errorf("padTier: layout %s", k.Layout)
	}
	return &Plan{}, nil
}
func (t *padTier) Run(_ *Plan, dst, x, w, bias *tensor.Tensor, p tensor.ConvParams) error {
	return t.cpu.Conv3d(dst, x, w, bias, p)
}
func (t *padTier) RunPadded(_ *Plan, dst, x, w, bias *tensor.Tensor, p tensor.ConvParams, pad tensor.Padding) error {
	t.padded = append(t.padded, x.Shape())
	if t.fail {
		return errors.New("padTier fails")
	}
	px, err := pad.Materialize(t.cpu, x)
	if err != nil {
		return err
	}
	defer tensor.Release(px)
	return t.cpu.Conv3d(dst, px, w, bias, p)
}

// TestConv3dPadded checks that a padded convolution equals Pad then Conv3d,
// through a tier that pads itself and through one that gets a padded copy.
func TestConv3dPadded(t *testing.T) {
	c := cpu.New()
	rng := rand.New(rand.NewPCG(3, 4))
	rnd := func(shape ...int) *tensor.Tensor { return tensor.RandN(rng, shape...) }
	x, w, b := rnd(1, 3, 4, 5, 6), rnd(2, 3, 3, 3, 3), rnd(2)
	pad := tensor.Padding{Before: [3]int{2, 1, 1}, After: [3]int{0, 1, 1}, Mode: tensor.PadReplicate}
	px := tensor.New(tensor.F32, 1, 3, 6, 7, 8)
	if err := c.Pad(px, x, pad.Before[:], pad.Mode); err != nil {
		t.Fatal(err)
	}
	want := tensor.New(tensor.F32, 1, 2, 4, 5, 6)
	if err := c.Conv3d(want, px, w, b, tensor.ConvParams{}); err != nil {
		t.Fatal(err)
	}
	for _, fail := range []bool{false, true} {
		pt := &padTier{cpu: c, fail: fail}
		ch, err := New([]Tier{pt, CPUTier(c)}, Options{CachePath: "off", Faults: &Faults{}})
		if err != nil {
			t.Fatal(err)
		}
		got := tensor.New(tensor.F32, 1, 2, 4, 5, 6)
		if err := Wrap(c, ch).Conv3dPadded(got, x, w, b, tensor.ConvParams{}, pad); err != nil {
			t.Fatal(err)
		}
		for i, v := range want.Float32s() {
			if d := got.Float32s()[i] - v; d > 1e-5 || d < -1e-5 {
				t.Fatalf("fail=%v: element %d is %v, want %v", fail, i, got.Float32s()[i], v)
			}
		}
		if len(pt.padded) != 1 || pt.padded[0][2] != 4 {
			t.Errorf("fail=%v: the padding tier saw inputs %v, want the unpadded (1, 3, 4, 5, 6)", fail, pt.padded)
		}
		ran := ""
		for _, s := range ch.Summary() {
			if s.Convs > 0 {
				ran = s.Tier
			}
		}
		if (fail && ran != "cpu") || (!fail && ran != "padding") {
			t.Errorf("fail=%v: ran on %q", fail, ran)
		}
		found := false
		for _, ch := range ch.remembered {
			found = found || ch.Key.X == [5]int{1, 3, 6, 7, 8}
		}
		if !found {
			t.Errorf("fail=%v: no choice under the padded shape: %v", fail, ch.remembered)
		}
	}
}

// upsampleRef is the causal nearest upsample by loops: frame 0 once, every
// later frame ft times (or every frame ft times without the causal rule).
func upsampleRef(x *tensor.Tensor, f [3]int, causal bool) *tensor.Tensor {
	b, c, t, h, w := x.Dim(0), x.Dim(1), x.Dim(2), x.Dim(3), x.Dim(4)
	tu := t * f[0]
	if causal {
		tu = 1 + (t-1)*f[0]
	}
	out := tensor.New(tensor.F32, b, c, tu, h*f[1], w*f[2])
	src, dst := x.Float32s(), out.Float32s()
	i := 0
	for bc := 0; bc < b*c; bc++ {
		for j := 0; j < tu; j++ {
			st := j / f[0]
			if causal {
				st = 0
				if j > 0 {
					st = 1 + (j-1)/f[0]
				}
			}
			for y := 0; y < h*f[1]; y++ {
				for z := 0; z < w*f[2]; z++ {
					dst[i] = src[((bc*t+st)*h+y/f[1])*w+z/f[2]]
					i++
				}
			}
		}
	}
	return out
}

// TestConv3dPaddedUpsample checks the causal upsample of Padding, made by
// the chain for a plain tier, against loops.
func TestConv3dPaddedUpsample(t *testing.T) {
	c := cpu.New()
	rng := rand.New(rand.NewPCG(5, 6))
	x := tensor.RandN(rng, 2, 3, 3, 4, 5)
	w := tensor.RandN(rng, 4, 3, 3, 3, 3)
	for _, tc := range []struct {
		f      [3]int
		causal bool
	}{{[3]int{2, 2, 2}, true}, {[3]int{1, 2, 2}, false}, {[3]int{2, 1, 3}, false}} {
		pad := tensor.Padding{Before: [3]int{2, 1, 1}, After: [3]int{0, 1, 1}, Mode: tensor.PadReplicate, Upsample: tc.f, CausalFirst: tc.causal}
		up := upsampleRef(x, tc.f, tc.causal)
		px := tensor.New(tensor.F32, pad.Shape(x.Shape())...)
		if err := c.Pad(px, up, pad.Before[:], pad.Mode); err != nil {
			t.Fatal(err)
		}
		out := []int{2, 4, px.Dim(2) - 2, px.Dim(3) - 2, px.Dim(4) - 2}
		want := tensor.New(tensor.F32, out...)
		if err := c.Conv3d(want, px, w, nil, tensor.ConvParams{}); err != nil {
			t.Fatal(err)
		}
		ch, err := New([]Tier{CPUTier(c)}, Options{CachePath: "off", Faults: &Faults{}})
		if err != nil {
			t.Fatal(err)
		}
		got := tensor.New(tensor.F32, out...)
		if err := Wrap(c, ch).Conv3dPadded(got, x, w, nil, tensor.ConvParams{}, pad); err != nil {
			t.Fatal(err)
		}
		for i, v := range want.Float32s() {
			if d := got.Float32s()[i] - v; d > 1e-4 || d < -1e-4 {
				t.Fatalf("%v causal %v: element %d is %v, want %v", tc.f, tc.causal, i, got.Float32s()[i], v)
			}
		}
	}
}

// TestChainOps runs the op suite through the chain's backend: its
// convolutions, padded ones included, go through a tier that pads itself;
// every other op is the inner backend's.
func TestChainOps(t *testing.T) {
	c := cpu.New()
	ch, err := New([]Tier{&padTier{cpu: c}, CPUTier(c)}, Options{CachePath: "off", Faults: &Faults{}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	be := Wrap(c, ch)
	backendtest.Run(t, be)
	if s := ch.Summary(); s[0].Convs == 0 {
		t.Errorf("no convolution went through the chain: %v", s)
	}
}

// TestConv3dLastOnChannelsFirstTier: a channels-last call on a tier that
// is not channels-last plans a channels-first key and runs on copies; the
// result is the channels-first convolution moved channels-last.
func TestConv3dLastOnChannelsFirstTier(t *testing.T) {
	c := cpu.New()
	pt := &padTier{cpu: c}
	ch, err := New([]Tier{pt}, Options{CachePath: "off", Faults: &Faults{}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(9, 10))
	x, w, b := tensor.RandN(rng, 1, 3, 4, 5, 2), tensor.RandN(rng, 4, 2, 3, 3, 3), tensor.RandN(rng, 4)
	p := tensor.ConvParams{Padding: [3]int{0, 1, 1}}
	got := tensor.New(tensor.F32, 1, 1, 4, 5, 4)
	if err := Wrap(c, ch).Conv3dLast(got, x, w, b, p); err != nil {
		t.Fatal(err)
	}
	s := tensor.NewScope(c)
	defer s.Close()
	want := s.Permute(s.Conv3d(s.Permute(x, 0, 4, 1, 2, 3), w, b, [3]int{1, 1, 1}, p.Padding), 0, 2, 3, 4, 1)
	for i, v := range want.Float32s() {
		if d := got.Float32s()[i] - v; d > 1e-4 || d < -1e-4 {
			t.Fatalf("element %d is %v, want %v", i, got.Float32s()[i], v)
		}
	}
	// Accumulating adds the same convolution to what dst holds.
	p.Accumulate = true
	if err := Wrap(c, ch).Conv3dLast(got, x, w, b, p); err != nil {
		t.Fatal(err)
	}
	for i, v := range want.Float32s() {
		if d := got.Float32s()[i] - 2*v; d > 1e-4 || d < -1e-4 {
			t.Fatalf("accumulated: element %d is %v, want %v", i, got.Float32s()[i], 2*v)
		}
	}
	// A packed weight (Cout, kT, kH, kW, Cin) gives the same, under the
	// same key.
	p = tensor.ConvParams{Padding: [3]int{0, 1, 1}, WeightLast: true}
	packed := tensor.New(tensor.F32, 1, 1, 4, 5, 4)
	if err := Wrap(c, ch).Conv3dLast(packed, x, s.Permute(w, 0, 2, 3, 4, 1), b, p); err != nil {
		t.Fatal(err)
	}
	for i, v := range want.Float32s() {
		if d := packed.Float32s()[i] - v; d > 1e-4 || d < -1e-4 {
			t.Fatalf("packed weight: element %d is %v, want %v", i, packed.Float32s()[i], v)
		}
	}
	if k, kp := KeyOfLast("", x, w, b, tensor.ConvParams{Padding: p.Padding}), KeyOfLast("", x, s.Permute(w, 0, 2, 3, 4, 1), b, p); k.String() != kp.String() {
		t.Errorf("key %s with a packed weight, want %s", kp, k)
	}
}
