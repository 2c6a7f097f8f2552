package clip

import (
	"testing"

	"github.com/framepack-go/framepack/backend/cpu"
	"github.com/framepack-go/framepack/internal/testutil/golden"
	"github.com/framepack-go/framepack/internal/testutil/scopetest"
	"github.com/framepack-go/framepack/internal/testutil/testdevice"
	"github.com/framepack-go/framepack/tensor"
)

func TestGoldenCLIPText(t *testing.T) {
	be := testdevice.Backend(t)
	golden.Run(t, "text_encoder.clip", func(t *testing.T, c *golden.Case) {
		m := golden.Load(t, c, Load, be, tensor.F32)
		out := scopetest.Run(t, be, func(s *tensor.Scope) Output { return m.Forward(s, c.Tensor("input_ids").Int64s()) })
		c.Compare(t, "last_hidden_state", out.LastHiddenState)
		c.Compare(t, "pooler_output", out.Pooled)
	})
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
	m := golden.Load(t, golden.Cases(t, "text_encoder.clip")[0], Load, be, tensor.F32)
	s := tensor.NewScope(be)
	defer s.Close()
	for _, ids := range [][]int64{nil, {1, 100000}, make([]int64, 78)} {
		if err := tensor.Catch(func() { m.Forward(s, ids) }); err == nil {
			t.Errorf("ids %v: no error", ids)
		}
	}
}
