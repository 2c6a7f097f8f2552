package llama

import (
	"testing"

	"github.com/framepack-go/framepack/internal/testutil/golden"
	"github.com/framepack-go/framepack/internal/testutil/scopetest"
	"github.com/framepack-go/framepack/internal/testutil/testdevice"
	"github.com/framepack-go/framepack/tensor"
)

// The reference runs the padded sequence; FramePack uses only the positions
// the mask keeps, so the comparison is over those.
func TestGoldenLlama(t *testing.T) {
	be := testdevice.Backend(t)
	golden.Run(t, "text_encoder.llama", func(t *testing.T, c *golden.Case) {
		m := golden.Load(t, c, Load, be, tensor.F32)
		ids := c.Tensor("input_ids").Int64s()
		mask := c.Tensor("attention_mask").Int64s()
		n := 0
		for n < len(mask) && mask[n] == 1 {
			n++
		}
		out := scopetest.Run(t, be, func(s *tensor.Scope) Output { return m.Forward(s, ids[:n], -3, -1) })
		last := m.NumHiddenLayers
		for name, idx := range map[string]int{"hidden_states_m3": last - 2, "last": last} {
			want := c.Tensor(name)
			d := want.Dim(2)
			valid := tensor.FromFloat32(append([]float32(nil), want.Float32s()[:n*d]...), 1, n, d)
			c.CompareTo(t, name, out.Hidden[idx], valid)
		}
	})
}
