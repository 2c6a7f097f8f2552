package clip

import (
	"testing"

	"github.com/framepack-go/framepack/backend/cpu"
	"github.com/framepack-go/framepack/internal/golden"
	"github.com/framepack-go/framepack/internal/scopetest"
	"github.com/framepack-go/framepack/internal/testdevice"
	"github.com/framepack-go/framepack/tensor"
)

func TestGoldenCLIPText(t *testing.T) {
	be := testdevice.Backend(t)
	for _, c := range golden.Cases(t, "text_encoder.clip") {
		t.Run(c.Name, func(t *testing.T) {
			m := golden.Model(t, c, func(dir string) (*Model, error) { return Load(dir, be, tensor.F32) })
			out := scopetest.Run(t, be, func(s *tensor.Scope) Output { return m.Forward(s, c.Tensor("input_ids").Int64s()) })
			c.Compare(t, "last_hidden_state", out.LastHiddenState)
			c.Compare(t, "pooler_output", out.Pooled)
		})
	}
}

func TestEOSPosition(t *testing.T) {
	ids := []int64{49406, 320, 49407, 49407}
	if got := eosPosition(ids, 2); got != 2 {
		t.Errorf("legacy rule: %d, want 2 (first largest id)", got)
	}
	if got := eosPosition([]int64{5, 9, 7, 9}, 7); got != 2 {
		t.Errorf("eos id rule: %d, want 2", got)
	}
	if got := eosPosition([]int64{5, 9}, 7); got != 0 {
		t.Errorf("no eos: %d, want 0 as torch's argmax of all-false", got)
	}
}

func TestBadTokens(t *testing.T) {
	be := cpu.New()
	m := golden.Model(t, golden.Cases(t, "text_encoder.clip")[0], func(dir string) (*Model, error) { return Load(dir, be, tensor.F32) })
	s := tensor.NewScope(be)
	defer s.Close()
	for _, ids := range [][]int64{nil, {1, 100000}, make([]int64, 78)} {
		if err := tensor.Catch(func() { m.Forward(s, ids) }); err == nil {
			t.Errorf("ids %v: no error", ids)
		}
	}
}
