package hunyuan

import (
	"math"
	"testing"

	"github.com/framepack-go/framepack/backend/cpu"
	"github.com/framepack-go/framepack/internal/golden"
	"github.com/framepack-go/framepack/tensor"
)

// caseInputs reads a golden case's transformer inputs.
func caseInputs(c *golden.Case) *Inputs {
	return &Inputs{
		HiddenStates:         c.Tensor("hidden_states"),
		Timestep:             c.Tensor("timestep").Float32s(),
		Guidance:             c.Tensor("guidance").Float32s(),
		EncoderHiddenStates:  c.Tensor("encoder_hidden_states"),
		EncoderAttentionMask: c.Tensor("encoder_attention_mask"),
		PooledProjections:    c.Tensor("pooled_projections"),
		ImageEmbeddings:      c.Tensor("image_embeddings"),
		LatentIndices:        c.Tensor("latent_indices").Int64s(),
		CleanLatents:         c.Tensor("clean_latents"),
		CleanLatentIndices:   c.Tensor("clean_latent_indices").Int64s(),
		CleanLatents2x:       c.Tensor("clean_latents_2x"),
		CleanLatent2xIndices: c.Tensor("clean_latent_2x_indices").Int64s(),
		CleanLatents4x:       c.Tensor("clean_latents_4x"),
		CleanLatent4xIndices: c.Tensor("clean_latent_4x_indices").Int64s(),
	}
}

// forward runs one call and returns the host output.
func forward(t testing.TB, m *Model, in *Inputs) *tensor.Tensor {
	t.Helper()
	s := tensor.NewScope(m.Backend())
	defer s.Close()
	var out *tensor.Tensor
	if err := tensor.Catch(func() { out = tensor.ToHost(s.Clone(m.Forward(s, in))) }); err != nil {
		t.Fatalf("forward: %v", err)
	}
	return out
}

func loadModel(t testing.TB, dir string, opts Options) *Model {
	t.Helper()
	m, err := Load(dir, cpu.New(), opts)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	t.Cleanup(m.Close)
	return m
}

func TestGoldenTransformer(t *testing.T) {
	for _, c := range golden.Cases(t, "transformer") {
		t.Run(c.Name, func(t *testing.T) {
			m := loadModel(t, c.ModelDir, Options{})
			c.Compare(t, "output", forward(t, m, caseInputs(c)))
		})
	}
}

func relL2(a, b []float32) float64 {
	var num, den float64
	for i := range a {
		d := float64(a[i]) - float64(b[i])
		num += d * d
		den += float64(b[i]) * float64(b[i])
	}
	return math.Sqrt(num / den)
}
