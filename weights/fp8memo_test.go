package weights

import (
	"sync"
	"sync/atomic"
	"testing"
)

// TestFP8MemoQuantizesOnce: the two halves of an FP8 weight, filled one
// after the other or at once, quantize each part once between them (or
// twice at worst when both start together), and nothing stays behind.
func TestFP8MemoQuantizesOnce(t *testing.T) {
	var m fp8Memo
	var calls atomic.Int64
	quantize := func(p Spec) ([]byte, []float32, error) {
		calls.Add(1)
		return []byte(p.Name), []float32{float32(len(p.Name))}, nil
	}
	parts := []Spec{{Name: "a.weight"}, {Name: "bb.weight"}, {Name: "ccc.weight"}}
	for half := 0; half < 2; half++ {
		for _, p := range parts {
			q, sc, err := m.get(p, quantize)
			if err != nil || string(q) != p.Name || sc[0] != float32(len(p.Name)) {
				t.Fatalf("%s: %q %v %v", p.Name, q, sc, err)
			}
		}
	}
	if calls.Load() != int64(len(parts)) {
		t.Errorf("sequential halves: %d quantizations of %d parts", calls.Load(), len(parts))
	}
	if len(m.m) != 0 {
		t.Errorf("%d parts left in the memo", len(m.m))
	}
	calls.Store(0)
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, p := range parts {
				if _, _, err := m.get(p, quantize); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if c := calls.Load(); c < int64(len(parts)) || c > int64(2*len(parts)) {
		t.Errorf("concurrent halves: %d quantizations", c)
	}
	if len(m.m) != 0 {
		t.Errorf("%d parts left in the memo after concurrent halves", len(m.m))
	}
}
