package framepack

import (
	"bytes"
	"context"
	"testing"

	"github.com/framepack-go/framepack/memory"
)

// TestPipelineStaysLoaded: two Generate calls on one Pipeline give the
// frames of two fresh Pipelines; where the budget holds every model the
// second call loads nothing, and under a cap that does not hold them all
// (with room for activations) it loads them again.
func TestPipelineStaysLoaded(t *testing.T) {
	t.Parallel() // its own pipelines; the tests that measure the process run first, alone
	img := testImage(t)
	reqs := []Request{smallRequest(img), smallRequest(img)}
	reqs[0].Seconds, reqs[0].Steps = 0.2, 2
	reqs[1].Seed, reqs[1].Prompt, reqs[1].Seconds, reqs[1].Steps = 7, "A boat on a lake.", 0.8, 2

	fresh := make([]*Result, len(reqs))
	for i, r := range reqs {
		fresh[i] = runShared(t, r).Result // a fresh pipeline's
	}
	for _, c := range []struct {
		name          string
		cap, preserve int64
		keep          bool
	}{{"fits", 1 << 30, 0, true}, {"not all at once", 128 << 20, 0, false}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p := loadTiny(t)
			p.be = memory.Budgeted(p.dev.CPU, memory.Budget{Device: "test", Total: c.cap, Cap: c.cap, Preserve: c.preserve})
			p.dev.Backend = p.be // the decode plans in its room
			if p.keepAll() != c.keep {
				t.Fatalf("keepAll %v under cap %d", p.keepAll(), c.cap)
			}
			for i, r := range reqs {
				res, err := p.Generate(context.Background(), r)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(res.Pix, fresh[i].Pix) || res.T != fresh[i].T {
					t.Errorf("job %d: frames differ from a fresh pipeline's (%d frames, fresh %d)", i+1, res.T, fresh[i].T)
				}
				switch {
				case i == 0 && len(res.Loads) == 0:
					t.Errorf("job 1 loaded nothing")
				case i == 1 && c.keep && len(res.Loads) != 0:
					t.Errorf("job 2 reloaded %v though every model stayed loaded", res.Loads)
				case i == 1 && !c.keep && len(res.Loads) < 5:
					t.Errorf("job 2 loaded %d models under a cap that holds one at a time", len(res.Loads))
				}
			}
			if err := p.Unload(); err != nil {
				t.Fatal(err)
			}
			if st := p.MemoryStats(); st.InUse != 0 {
				t.Errorf("after Unload: %v", st)
			}
		})
	}
}
