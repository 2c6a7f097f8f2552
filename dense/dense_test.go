package dense

import (
	"os/exec"
	"strings"
	"testing"

	gt "gorgonia.org/tensor"

	"github.com/framepack-go/framepack"
	"github.com/framepack-go/framepack/backend/cpu"
	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/video"
)

func TestExchange(t *testing.T) {
	s := tensor.NewScope(cpu.New())
	defer s.Close()
	x := s.Cast(s.To(tensor.FromFloat32([]float32{1.5, -2, 3.25}, 3)), tensor.BF16)
	d := FromTensor(x)
	if got := d.Data().([]float32); got[0] != 1.5 || got[2] != 3.25 {
		t.Errorf("FromTensor %v", got)
	}
	back, err := ToTensor(gt.New(gt.WithShape(2), gt.WithBacking([]float64{0.5, 4})))
	if err != nil || back.Float32s()[1] != 4 {
		t.Errorf("ToTensor: %v %v", back, err)
	}
}

func TestFrames(t *testing.T) {
	var r *framepack.Result
	if Frames(r) != nil || Frames(&framepack.Result{}) != nil {
		t.Error("Frames of a nil or empty Result is not nil")
	}
	r = &framepack.Result{Frames: video.Frames{T: 2, H: 3, W: 4, Pix: make([]uint8, 2*3*4*3)}}
	if d := Frames(r); d.Shape()[0] != 2 || d.Shape()[3] != 3 || &d.Data().([]uint8)[0] != &r.Pix[0] {
		t.Errorf("Frames %v does not share the pixels", d.Shape())
	}
}

// TestLibraryWithoutGorgonia: importing framepack (or its tensor package)
// does not link gorgonia, Arrow or protobuf; only this package does.
func TestLibraryWithoutGorgonia(t *testing.T) {
	for _, pkg := range []string{"github.com/framepack-go/framepack", "github.com/framepack-go/framepack/tensor"} {
		out, err := exec.Command("go", "list", "-deps", pkg).Output()
		if err != nil {
			t.Skipf("go list: %v", err)
		}
		for _, dep := range strings.Fields(string(out)) {
			if strings.Contains(dep, "gorgonia") || strings.Contains(dep, "arrow") || strings.Contains(dep, "protobuf") {
				t.Errorf("%s depends on %s", pkg, dep)
			}
		}
	}
}
