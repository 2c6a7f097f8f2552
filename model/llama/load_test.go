package llama

import (
	"slices"
	"testing"

	"github.com/framepack-go/framepack/internal/testutil/golden"
	"github.com/framepack-go/framepack/internal/testutil/loadtest"
	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/weights"
)

// Load reads the weights in parallel; they are the sequential path's, byte
// for byte, and q and k hold the checkpoint's rows in the interleaved
// order, rounded once to the compute dtype.
func TestLoadMatchesSequential(t *testing.T) {
	dir := golden.Cases(t, "text_encoder.llama")[0].ModelDir
	ck, err := weights.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	loadtest.MatchesSequentialHF(t, dir, []tensor.DType{tensor.F32, tensor.BF16, tensor.F16}, Load, ReadConfig, build,
		func(t *testing.T, dt tensor.DType, m, seq *Model) {
			// q of layer 0 against the checkpoint, reordered here.
			raw, err := ck.Host("layers.0.self_attn.q_proj.weight")
			if err != nil {
				t.Fatal(err)
			}
			src := raw.ToFloat32()
			rows, cols, hd := raw.Dim(0), raw.Dim(1), m.HeadDim
			want := make([]float32, len(src))
			for h := 0; h < rows/hd; h++ {
				for i := 0; i < hd/2; i++ {
					for j, r := range [2]int{i, i + hd/2} {
						copy(want[(h*hd+2*i+j)*cols:][:cols], src[(h*hd+r)*cols:][:cols])
					}
				}
			}
			wb := tensor.BytesOf(want)
			switch dt {
			case tensor.BF16:
				h := make([]uint16, len(want))
				tensor.NarrowBF16(h, want)
				wb = tensor.BytesOf(h)
			case tensor.F16:
				h := make([]uint16, len(want))
				tensor.NarrowF16(h, want)
				wb = tensor.BytesOf(h)
			}
			if raw.DType() != tensor.F32 {
				t.Fatalf("the golden checkpoint's q is %s, want f32 (the expected rounding assumes it)", raw.DType())
			}
			if !slices.Equal(loadtest.Bytes(t, m.layers[0].q), wb) {
				t.Error("q rows are not the checkpoint's in interleaved order")
			}
			if got, want := m.Bytes(), seq.Bytes(); got != want || got == 0 {
				t.Errorf("Bytes %d, sequential %d", got, want)
			}
		})
}
