package siglip

import (
	"testing"

	"github.com/framepack-go/framepack/backend/cpu"
	"github.com/framepack-go/framepack/internal/golden"
	"github.com/framepack-go/framepack/tensor"
)

func TestGoldenSiglip(t *testing.T) {
	be := cpu.New()
	for _, c := range golden.Cases(t, "image_encoder.siglip") {
		t.Run(c.Name, func(t *testing.T) {
			m, err := Load(c.ModelDir, be, tensor.F32)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			s := tensor.NewScope(be)
			defer s.Close()
			var out *tensor.Tensor
			if err := tensor.Catch(func() { out = m.Forward(s, c.Tensor("pixel_values")) }); err != nil {
				t.Fatal(err)
			}
			c.Compare(t, "last_hidden_state", out)
		})
	}
}
