package wan

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/framepack-go/framepack/backend/cpu"
	"github.com/framepack-go/framepack/internal/testutil/errtest"
	"github.com/framepack-go/framepack/tensor"
)

// tinyConfig covers every path of the released layout at a tiny size:
// spatial and temporal down/up sampling, shortcuts, the mid block's
// attention.
func tinyConfig() Config {
	c := DefaultConfig()
	c.BaseDim, c.ZDim = 8, 4
	c.DimMult = []int{1, 2, 2, 2}
	c.NumResBlocks = 1
	c.LatentsMean, c.LatentsStd = []float32{0.1, -0.2, 0.3, 0}, []float32{2, 1, 0.5, 1.5}
	return c
}

func randn(seed uint64, shape ...int) *tensor.Tensor {
	return tensor.RandN(rand.New(rand.NewPCG(seed, 7)), shape...)
}

func TestDecodeEncodeShapes(t *testing.T) {
	be := cpu.New()
	v := randomVAE(t, tinyConfig(), be, Options{}, 1)
	s := tensor.NewScope(be)
	defer s.Close()
	var px, mean, logvar *tensor.Tensor
	if err := tensor.Catch(func() { px = v.Decode(s, randn(1, 1, 4, 3, 4, 6), DecodeOptions{}) }); err != nil {
		t.Fatal(err)
	}
	if got, want := px.Shape(), []int{1, 3, 9, 32, 48}; !equal(got, want) {
		t.Fatalf("decoded %v, want %v", got, want)
	}
	for _, x := range px.Float32s() {
		if !(x >= -1 && x <= 1) {
			t.Fatalf("pixel %v outside [-1, 1]", x)
		}
	}
	if err := tensor.Catch(func() { mean, logvar = v.Encode(s, randn(2, 1, 3, 11, 32, 48)) }); err != nil {
		t.Fatal(err)
	}
	// 11 frames: frame 0 and two chunks of 4; the last 2 frames are not read.
	if got, want := mean.Shape(), []int{1, 4, 3, 4, 6}; !equal(got, want) || !equal(logvar.Shape(), want) {
		t.Fatalf("encoded %v / %v, want %v", got, logvar.Shape(), want)
	}
	if math.IsNaN(float64(mean.Float32s()[0])) {
		t.Fatal("NaN")
	}
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// randomVAE is RandomWeights, failing the test on an error; the VAE closes
// when the test ends.
func randomVAE(t *testing.T, cfg Config, be tensor.Backend, opts Options, seed uint64) *VAE {
	t.Helper()
	v, err := RandomWeights(cfg, be, opts, seed)
	return errtest.Closing(t, v, err)
}
