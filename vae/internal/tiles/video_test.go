package tiles

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/framepack-go/framepack/tensor"
)

// opaque is a device whose memory the host cannot see: only uploads and
// downloads reach it.
type opaque struct{ tensor.NoKernels }

type opaqueBuf struct{ b []byte }

func (o *opaqueBuf) Bytes() int64 { return int64(len(o.b)) }

func (opaque) Name() string                         { return "opaque" }
func (opaque) Alloc(n int64) (tensor.Buffer, error) { return &opaqueBuf{make([]byte, n)}, nil }
func (opaque) Free(tensor.Buffer)                   {}
func (opaque) Upload(d tensor.Buffer, off int64, src []byte) error {
	copy(d.(*opaqueBuf).b[off:], src)
	return nil
}
func (opaque) Download(dst []byte, s tensor.Buffer, off int64) error {
	copy(dst, s.(*opaqueBuf).b[off:])
	return nil
}

// TestSetFramesFromDevice: the frames of an f32 device tensor are
// downloaded channel by channel straight into their place, for several
// batches and channels at a frame offset; the other frames stay zero.
func TestSetFramesFromDevice(t *testing.T) {
	const b, c, T, h, w = 2, 3, 5, 4, 6
	y := tensor.RandN(rand.New(rand.NewPCG(1, 2)), b, c, 2, h, w)
	want := y.Float32s()
	yd, err := tensor.Alloc(opaque{}, tensor.F32, y.Shape()...)
	if err != nil {
		t.Fatal(err)
	}
	if err := yd.Backend().Upload(yd.Buffer(), 0, y.HostBytes()); err != nil {
		t.Fatal(err)
	}
	if yd.OnHost() {
		t.Fatal("the opaque device's tensor is on the host")
	}
	v := NewTouched(b, c, T, h, w)
	v.SetFrames(2, yd)
	for bi := 0; bi < b; bi++ {
		for ci := 0; ci < c; ci++ {
			for ti := 0; ti < T; ti++ {
				for i, got := range v.Frame(bi, ci, ti) {
					exp := float32(0)
					if ti == 2 || ti == 3 {
						exp = want[((bi*c+ci)*2+ti-2)*h*w+i]
					}
					if got != exp {
						t.Fatalf("(%d, %d, %d)[%d] = %v, want %v", bi, ci, ti, i, got, exp)
					}
				}
			}
		}
	}
}

// TestClampLong: a video long enough to be clamped over the cores is
// clamped everywhere, NaN staying NaN.
func TestClampLong(t *testing.T) {
	v := New(1, 3, 5, 300, 301) // 1.35 M values
	for i := range v.data {
		v.data[i] = float32(i%7) - 3
	}
	v.data[12345] = float32(math.NaN())
	v.Clamp(-1, 1)
	for i, x := range v.data {
		switch {
		case i == 12345:
			if x == x {
				t.Fatalf("NaN clamped to %v", x)
			}
		case x != min(max(float32(i%7)-3, -1), 1):
			t.Fatalf("[%d] = %v", i, x)
		}
	}
}

// TestSetFramesChecksShape: frames that do not fit the video are an error
// before anything is copied (the device path downloads straight into the
// video's memory).
func TestSetFramesChecksShape(t *testing.T) {
	v := New(1, 3, 4, 2, 2)
	for _, c := range []struct {
		t0    int
		shape []int
	}{
		{3, []int{1, 3, 2, 2, 2}},  // past the last frame
		{-1, []int{1, 3, 1, 2, 2}}, // before the first
		{0, []int{1, 4, 1, 2, 2}},  // channels
		{0, []int{1, 3, 1, 1, 4}},  // the same pixels, another size
	} {
		err := tensor.Catch(func() { v.SetFrames(c.t0, tensor.New(tensor.F32, c.shape...)) })
		if err == nil || !strings.Contains(err.Error(), "set frames") {
			t.Errorf("frames %v at %d: %v, want a set frames error", c.shape, c.t0, err)
		}
	}
}
