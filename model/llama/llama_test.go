package llama

import (
	"testing"

	"github.com/framepack-go/framepack/internal/golden"
	"github.com/framepack-go/framepack/internal/testdevice"
	"github.com/framepack-go/framepack/tensor"
)

// The reference runs the padded sequence; FramePack uses only the positions
// the mask keeps, so the comparison is over those.
func TestGoldenLlama(t *testing.T) {
	be := testdevice.Backend(t)
	for _, c := range golden.Cases(t, "text_encoder.llama") {
		t.Run(c.Name, func(t *testing.T) {
			m, err := Load(c.ModelDir, be, tensor.F32)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			ids := c.Tensor("input_ids").Int64s()
			mask := c.Tensor("attention_mask").Int64s()
			n := 0
			for n < len(mask) && mask[n] == 1 {
				n++
			}
			s := tensor.NewScope(be)
			defer s.Close()
			var out Output
			if err := tensor.Catch(func() { out = m.Forward(s, ids[:n], -3, -1) }); err != nil {
				t.Fatal(err)
			}
			last := m.NumHiddenLayers
			for name, idx := range map[string]int{"hidden_states_m3": last - 2, "last": last} {
				want := c.Tensor(name)
				d := want.Dim(2)
				valid := tensor.FromFloat32(append([]float32(nil), want.Float32s()[:n*d]...), 1, n, d)
				c.CompareTo(t, name, out.Hidden[idx], valid)
			}
		})
	}
}
