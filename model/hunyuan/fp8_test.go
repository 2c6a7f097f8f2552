package hunyuan

import (
	"math"
	"testing"

	"github.com/framepack-go/framepack/backend/cpu"
	"github.com/framepack-go/framepack/internal/golden"
	"github.com/framepack-go/framepack/tensor"
)

// TestGoldenFP8Weights runs the golden cases with the blocks' linears as
// FP8 E4M3 (quantized at load, one scale per output channel, dequantized on
// the fly) and bf16 compute, against the same model with bf16 weights: the
// error FP8 weights add to a forward pass. Measured on the CPU: rel_l2
// 0.0331 (transformer_a), 0.0265 (transformer_b), 0.0310
// (transformer_bf16_weights), resident or streamed blocks alike. That is
// E4M3's own rounding (3 mantissa bits: about 2.5% relative L2 on each
// weight, TestFP8QuantizeRows), carried through the blocks.
func TestGoldenFP8Weights(t *testing.T) {
	for _, c := range golden.Cases(t, "transformer") {
		t.Run(c.Name, func(t *testing.T) {
			in := caseInputs(c)
			bf := forward(t, loadModel(t, c.ModelDir, Options{DType: tensor.BF16}), in).Float32s()
			for _, host := range []bool{false, true} {
				m := loadModel(t, c.ModelDir, Options{DType: tensor.BF16, FP8: true, HostBlocks: host})
				if host {
					if _, h := m.WeightBytes(); h == 0 {
						t.Fatal("no block streams from the host")
					}
				}
				got := forward(t, m, in).Float32s()
				r := relL2(got, bf)
				rRef := relL2(got, c.Tensor("output").Float32s())
				t.Logf("fp8 weights (host blocks %v): rel_l2 %.3g vs bf16 weights, %.3g vs the f32 reference", host, r, rRef)
				if r > 4e-2 || math.IsNaN(r) {
					t.Errorf("fp8 weights: rel_l2 %.3g vs bf16 weights > 4e-2", r)
				}
				if r < 1e-4 {
					t.Errorf("fp8 weights: rel_l2 %.3g vs bf16: the weights were not quantized", r)
				}
			}
		})
	}
}

// noFP8 hides the backend's FP8Weights (and its other capabilities): the
// Scope dequantizes with ordinary ops, as on a GPU.
type noFP8 struct{ tensor.Backend }

// TestGoldenFP8Dequantized runs FP8 weights through the Scope's dequantizing
// fallback: the same figures as the CPU's own FP8 Linear, within bf16.
func TestGoldenFP8Dequantized(t *testing.T) {
	c := golden.Cases(t, "transformer")[0]
	in := caseInputs(c)
	m := loadModel(t, c.ModelDir, Options{DType: tensor.BF16, FP8: true})
	want := forward(t, m, in).Float32s()
	m2, err := Load(c.ModelDir, noFP8{cpu.New()}, Options{DType: tensor.BF16, FP8: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	r := relL2(forward(t, m2, in).Float32s(), want)
	t.Logf("dequantized fallback vs FP8 Linear: rel_l2 %.3g", r)
	if r > 1e-2 || math.IsNaN(r) {
		t.Errorf("dequantized fallback vs FP8 Linear: rel_l2 %.3g > 1e-2", r)
	}
}
