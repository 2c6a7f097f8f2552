package framepack

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/framepack-go/framepack/memory"
	"github.com/framepack-go/framepack/tensor"
)

// trimCounter is a backend with pools whose trims are counted.
type trimCounter struct {
	tensor.Backend
	trims int
}

func (b *trimCounter) Trim() error { b.trims++; return nil }

func (b *trimCounter) HostBacked() bool {
	hb, ok := b.Backend.(tensor.HostBacked)
	return ok && hb.HostBacked()
}

// A run charges each model's device bytes to its part name, and every
// unload leaves its owner holding 0 bytes and trims the pools; under a
// small budget the transformer is gone before each decode.
func TestGenerateResidency(t *testing.T) {
	t.Parallel() // its own pipelines; the tests that measure the process run first, alone
	owners := []string{PartTextEncoder, PartTextEncoder2, PartImageEncoder, PartVAE, PartTransformer}
	for _, c := range []struct {
		name          string
		cap, preserve int64
		keep          bool
	}{
		{"high VRAM", 1 << 30, 0, true},
		{"small budget", 64 << 20, 60 << 20, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p, logs := loadTinyLogged(t, Options{})
			tc := &trimCounter{Backend: p.dev.CPU}
			p.be = memory.Budgeted(tc, memory.Budget{Device: "counted", Total: c.cap, Cap: c.cap, Preserve: c.preserve})

			req := smallRequest(testImage(t))
			req.Seconds = 0.8 // two sections
			var checked int
			req.Progress = func(pr Progress) {
				held := func(o string) int64 { return p.be.Held(o) }
				switch {
				case pr.Stage == StageSample && pr.Step == 1:
					checked++
					for _, o := range []string{PartTextEncoder, PartTextEncoder2, PartImageEncoder} {
						if c.keep != (held(o) != 0) {
							t.Errorf("section %d: %s holds %d bytes while sampling (every model kept loaded: %v)", pr.Section, o, held(o), c.keep)
						}
					}
					if held(PartTransformer) <= 0 {
						t.Errorf("section %d: the transformer is charged %d bytes while sampling", pr.Section, held(PartTransformer))
					}
					if !c.keep && held(PartVAE) != 0 {
						t.Errorf("section %d: the VAE holds %d bytes beside the transformer under the small budget", pr.Section, held(PartVAE))
					}
				case pr.Stage == StageDecode && pr.Tile == 0:
					checked++
					if c.keep != (held(PartTransformer) > 0) {
						t.Errorf("section %d: the transformer holds %d bytes at the decode (kept loaded: %v)", pr.Section, held(PartTransformer), c.keep)
					}
				}
			}
			if _, err := p.Generate(context.Background(), req); err != nil {
				t.Fatal(err)
			}
			if checked != 4 {
				t.Fatalf("%d checks ran, want 4", checked)
			}
			if c.keep {
				// Every model stays loaded for the next Generate until
				// Unload (or Close).
				for _, o := range owners {
					if p.be.Held(o) <= 0 {
						t.Errorf("%s holds nothing after the run though every model fits", o)
					}
				}
				if err := p.Unload(); err != nil {
					t.Fatal(err)
				}
			}

			st := p.MemoryStats()
			var names []string
			for _, h := range st.Owners {
				names = append(names, h.Owner)
				if h.Bytes != 0 {
					t.Errorf("%s holds %d bytes after the run", h.Owner, h.Bytes)
				}
			}
			if !slices.Equal(names, owners) || st.InUse != 0 {
				t.Errorf("after the run: %v", st)
			}

			// The log: each model's bytes charged to it when it is loaded,
			// 0 B after each unload, a trim for each.
			unloads := 0
			for _, o := range owners {
				loadedLine, unloadedLine := false, false
				for line := range strings.Lines(logs.String()) {
					switch {
					case strings.Contains(line, fmt.Sprintf("memory: %s unloaded → resident, uploaded", o)) ||
						strings.Contains(line, fmt.Sprintf("memory: %s on host → resident, uploaded", o)):
						loadedLine = true
						if strings.Contains(line, " "+o+" 0 B") {
							t.Errorf("%s charged nothing when loaded: %s", o, line)
						}
					case strings.Contains(line, fmt.Sprintf("memory: %s resident → unloaded", o)):
						unloadedLine = true
						unloads++
						if !strings.Contains(line, " "+o+" 0 B") {
							t.Errorf("%s still charged after its unload: %s", o, line)
						}
					}
				}
				if !loadedLine || !unloadedLine {
					t.Errorf("%s: loaded logged %v, unloaded logged %v", o, loadedLine, unloadedLine)
				}
			}
			// Kept: each model once, by Unload. Otherwise the text
			// encoders, image encoder, VAE encoder, then the transformer
			// and the decoder once a section.
			want := 5
			if !c.keep {
				want = 4 + 2*2
			}
			if unloads != want {
				t.Errorf("%d unloads logged, want %d", unloads, want)
			}
			if tc.trims < unloads {
				t.Errorf("%d trims for %d unloads", tc.trims, unloads)
			}
		})
	}
}
