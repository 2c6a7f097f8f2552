package convchain

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/framepack-go/framepack/backend/cpu"
	"github.com/framepack-go/framepack/tensor"
)

// padTier pads itself: it records the input it was given and runs the CPU
// backend on a padded copy of its own.
type padTier struct {
	cpu    tensor.Backend
	fail   bool
	padded [][]int // the x shapes RunPadded saw
}

func (*padTier) Name() string                   { return "padding" }
func (*padTier) Plan(Key, *Plan) (*Plan, error) { return &Plan{}, nil }
func (t *padTier) Run(_ *Plan, dst, x, w, bias *tensor.Tensor, p tensor.ConvParams) error {
	return t.cpu.Conv3d(dst, x, w, bias, p)
}
func (t *padTier) RunPadded(_ *Plan, dst, x, w, bias *tensor.Tensor, p tensor.ConvParams, pad Padding) error {
	t.padded = append(t.padded, x.Shape())
	if t.fail {
		return errors.New("padTier fails")
	}
	shape := x.Shape()
	for i := 0; i < 3; i++ {
		shape[2+i] += pad.Before[i] + pad.After[i]
	}
	px := tensor.New(x.DType(), shape...)
	if err := t.cpu.Pad(px, x, pad.Before[:], pad.Mode); err != nil {
		return err
	}
	return t.cpu.Conv3d(dst, px, w, bias, p)
}

// TestConv3dPadded checks that a padded convolution equals Pad then Conv3d,
// through a tier that pads itself and through one that gets a padded copy.
func TestConv3dPadded(t *testing.T) {
	c := cpu.New()
	rng := rand.New(rand.NewPCG(3, 4))
	rnd := func(shape ...int) *tensor.Tensor {
		v := make([]float32, tensor.Numel(shape))
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		return tensor.FromFloat32(v, shape...)
	}
	x, w, b := rnd(1, 3, 4, 5, 6), rnd(2, 3, 3, 3, 3), rnd(2)
	pad := Padding{Before: [3]int{2, 1, 1}, After: [3]int{0, 1, 1}, Mode: tensor.PadReplicate}
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
