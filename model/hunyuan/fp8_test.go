package hunyuan

import (
	"maps"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/framepack-go/framepack/backend/cpu"
	"github.com/framepack-go/framepack/internal/numcmp"
	"github.com/framepack-go/framepack/internal/testutil/golden"
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
	golden.Run(t, "transformer", func(t *testing.T, c *golden.Case) {
		in := caseInputs(c)
		bf := forward(t, loadModel(t, c.ModelDir, Options{DType: tensor.BF16}), in).Float32s()
		for _, o := range []Options{{}, {HostBlocks: true}, {HostBlocks: true, StreamFromFile: true}} {
			o.DType, o.FP8 = tensor.BF16, true
			host := o.HostBlocks
			m := loadModel(t, c.ModelDir, o)
			if host {
				if _, h := m.WeightBytes(); h == 0 && !m.StreamsFromFile() {
					t.Fatal("no block streams from the host")
				}
			}
			got := forward(t, m, in).Float32s()
			r := numcmp.RelL2(got, bf)
			rRef := numcmp.RelL2(got, c.Tensor("output").Float32s())
			t.Logf("fp8 weights (host blocks %v, from file %v): rel_l2 %.3g vs bf16 weights, %.3g vs the f32 reference", host, m.StreamsFromFile(), r, rRef)
			if r > 4e-2 || math.IsNaN(r) {
				t.Errorf("fp8 weights: rel_l2 %.3g vs bf16 weights > 4e-2", r)
			}
			if r < 1e-4 {
				t.Errorf("fp8 weights: rel_l2 %.3g vs bf16: the weights were not quantized", r)
			}
		}
	})
}

// noFP8 hides the backend's FP8Weights (and its other capabilities): the
// Scope dequantizes with ordinary ops, as on a GPU.
type noFP8 struct{ tensor.Backend }

// TestGoldenFP8Dequantized runs FP8 weights through the Scope's dequantizing
// fallback: the same figures as the CPU's own FP8 Linear, within bf16.
// TestGoldenFP8Compute runs the golden transformers with FP8 weights and
// FP8 compute (each block linear's input quantized per token) on the test
// device: the error against the same model with bf16 weights, resident and
// streamed, and that it differs from weight-only FP8 (the inputs really
// are quantized).
func TestGoldenFP8Compute(t *testing.T) {
	golden.Run(t, "transformer", func(t *testing.T, c *golden.Case) {
		in := caseInputs(c)
		bf := forward(t, loadModel(t, c.ModelDir, Options{DType: tensor.BF16}), in).Float32s()
		weightOnly := forward(t, loadModel(t, c.ModelDir, Options{DType: tensor.BF16, FP8: true}), in).Float32s()
		for _, o := range []Options{{}, {HostBlocks: true}} {
			o.DType, o.FP8, o.FP8Compute = tensor.BF16, true, true
			got := forward(t, loadModel(t, c.ModelDir, o), in).Float32s()
			r := numcmp.RelL2(got, bf)
			rRef := numcmp.RelL2(got, c.Tensor("output").Float32s())
			rW := numcmp.RelL2(got, weightOnly)
			t.Logf("fp8 compute (host blocks %v): rel_l2 %.3g vs bf16 weights, %.3g vs the f32 reference, %.3g vs weight-only fp8",
				o.HostBlocks, r, rRef, rW)
			if r > 6e-2 || math.IsNaN(r) {
				t.Errorf("fp8 compute: rel_l2 %.3g vs bf16 weights > 6e-2", r)
			}
			if rW < 1e-4 {
				t.Errorf("fp8 compute: rel_l2 %.3g vs weight-only fp8: the inputs were not quantized", rW)
			}
		}
	})
}

// TestWeightBytesFP8 checks the planned size against what a loaded model
// holds, with and without FP8 weights (the blocks' arenas align each weight
// to 256 bytes: at most 255 more a weight).
func TestWeightBytesFP8(t *testing.T) {
	golden.Run(t, "transformer", func(t *testing.T, c *golden.Case) {
		for _, o := range []Options{{DType: tensor.BF16}, {DType: tensor.BF16, FP8: true}} {
			m := loadModel(t, c.ModelDir, o)
			dev, host := m.WeightBytes()
			want, err := WeightBytes(m.cfg, o)
			if err != nil {
				t.Fatal(err)
			}
			p, _ := plan(m.cfg, o)
			if got := dev + host; got < want || got > want+int64(255*len(p.Weights())) {
				t.Errorf("fp8 %v: planned %d bytes, the loaded model holds %d", o.FP8, want, got)
			}
		}
	})
}

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
	r := numcmp.RelL2(forward(t, m2, in).Float32s(), want)
	t.Logf("dequantized fallback vs FP8 Linear: rel_l2 %.3g", r)
	if r > 1e-2 || math.IsNaN(r) {
		t.Errorf("dequantized fallback vs FP8 Linear: rel_l2 %.3g > 1e-2", r)
	}
}

// fp8Checkpoint writes dir's checkpoint with the blocks' linear weights
// stored as F8_E4M3 with a per-row weight_scale (quantized here, as
// QuantizeF8E4M3Rows does at load), everything else as it is.
func fp8Checkpoint(t *testing.T, dir string) string {
	t.Helper()
	return rewriteModel(t, dir, func(ts map[string]*tensor.Tensor) {
		for _, name := range slices.Sorted(maps.Keys(ts)) {
			h := ts[name]
			blockLinear := (strings.HasPrefix(name, "transformer_blocks.") || strings.HasPrefix(name, "single_transformer_blocks.")) &&
				strings.HasSuffix(name, ".weight") && !strings.Contains(name, "norm") && h.Rank() == 2
			if !blockLinear {
				continue
			}
			rows, cols := h.Dim(0), h.Dim(1)
			q, sc := make([]byte, rows*cols), make([]float32, rows)
			tensor.QuantizeF8E4M3Rows(q, sc, h.ToFloat32(), rows, cols)
			qt, err := tensor.FromBytes(tensor.F8E4M3, q, rows, cols)
			if err != nil {
				t.Fatal(err)
			}
			ts[name] = qt
			ts[strings.TrimSuffix(name, ".weight")+".weight_scale"] = tensor.FromFloat32(sc, rows)
		}
	})
}

// TestGoldenFP8Checkpoint loads a checkpoint that stores the block linears
// as FP8 with scales: with FP8 weights the codes are used as stored (the
// same output as quantizing the original at load); without, they are
// widened and scaled into bf16 weights (the same values, rounded to bf16).
func TestGoldenFP8Checkpoint(t *testing.T) {
	c := golden.Cases(t, "transformer")[0]
	in := caseInputs(c)
	dir := fp8Checkpoint(t, c.ModelDir)
	atLoad := forward(t, loadModel(t, c.ModelDir, Options{DType: tensor.BF16, FP8: true}), in).Float32s()
	stored := forward(t, loadModel(t, dir, Options{DType: tensor.BF16, FP8: true}), in).Float32s()
	if r := numcmp.RelL2(stored, atLoad); r != 0 {
		t.Errorf("stored fp8 vs quantized at load: rel_l2 %.3g, want 0", r)
	}
	widened := forward(t, loadModel(t, dir, Options{DType: tensor.BF16}), in).Float32s()
	r := numcmp.RelL2(widened, atLoad)
	t.Logf("stored fp8 widened to bf16 vs fp8 weights: rel_l2 %.3g", r)
	if r > 1e-2 || math.IsNaN(r) {
		t.Errorf("stored fp8 widened to bf16 vs fp8 weights: rel_l2 %.3g > 1e-2", r)
	}
}
