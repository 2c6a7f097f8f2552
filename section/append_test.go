package section

import (
	"testing"

	"github.com/framepack-go/framepack/backend/cpu"
	"github.com/framepack-go/framepack/tensor"
)

func ramp(frames int, base float32) *tensor.Tensor {
	t := tensor.New(tensor.F32, 1, 2, frames, 1, 2)
	v := t.Float32s()
	for c := 0; c < 2; c++ {
		for f := 0; f < frames; f++ {
			for p := 0; p < 2; p++ {
				v[(c*frames+f)*2+p] = base + float32(f)
			}
		}
	}
	return t
}

func TestSoftAppend(t *testing.T) {
	s := tensor.NewScope(cpu.New())
	defer s.Close()
	a, b := ramp(6, 0), ramp(5, 100)
	var out, cat *tensor.Tensor
	if err := tensor.Catch(func() {
		out = tensor.ToHost(SoftAppend(s, a, b, 3))
		cat = tensor.ToHost(SoftAppend(s, a, b, 0))
	}); err != nil {
		t.Fatal(err)
	}
	// a's frames 0..2, then 3..5 blended with b's 0..2 by weights 1, ½, 0, then b's 3..4.
	want := []float32{0, 1, 2, 3, 0.5*4 + 0.5*101, 102, 103, 104}
	if out.Dim(2) != 8 || cat.Dim(2) != 11 {
		t.Fatalf("frames %d and %d", out.Dim(2), cat.Dim(2))
	}
	for f, w := range want {
		for c := 0; c < 2; c++ {
			if v := out.Float32s()[(c*8+f)*2]; v != w {
				t.Errorf("frame %d channel %d = %v, want %v", f, c, v, w)
			}
		}
	}
	for _, bad := range []func(){
		func() { SoftAppend(s, a, b, 6) },                                 // longer than b
		func() { SoftAppend(s, a, ramp(5, 0).Reshape(1, 2, 5, 2, 1), 2) }, // spatial mismatch
		func() { SoftAppend(s, a.Reshape(2, 6, 2), b, 2) },                // rank
	} {
		if err := tensor.Catch(bad); err == nil {
			t.Error("bad soft append accepted")
		}
	}
}

func TestPreviewImage(t *testing.T) {
	// (B=1, 3, T=2, h=1, w=2): frames laid side by side.
	p := tensor.FromFloat32([]float32{
		0, 0.5, 1, 2, // R: frame 0 (0, 0.5), frame 1 (1, 2 → clipped)
		0, 0, 0, 0,
		-1, 0.25, 0.999, 0.1,
	}, 1, 3, 2, 1, 2)
	im, err := PreviewImage(p)
	if err != nil {
		t.Fatal(err)
	}
	if im.W != 4 || im.H != 1 {
		t.Fatalf("%d×%d", im.W, im.H)
	}
	wantR := []uint8{0, 127, 255, 255}
	wantB := []uint8{0, 63, 254, 25}
	for x := 0; x < 4; x++ {
		if im.Pix[3*x] != wantR[x] || im.Pix[3*x+2] != wantB[x] {
			t.Errorf("pixel %d = %v, want R %d B %d", x, im.Pix[3*x:3*x+3], wantR[x], wantB[x])
		}
	}
	if _, err := PreviewImage(tensor.New(tensor.F32, 1, 16, 1, 2, 2)); err == nil {
		t.Error("16-channel preview accepted")
	}
}
