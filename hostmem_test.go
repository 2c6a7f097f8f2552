package framepack

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/framepack-go/framepack/internal/testutil/testdevice"
	"github.com/framepack-go/framepack/memory"
)

// TestGenerateHostBudget runs the GPU policies on the fake device (the
// CPU's kernels behind a backend that is not host memory) under a device
// budget that streams the transformer: with a host budget that holds its
// blocks they stream from a pinned copy; with one that does not, from the
// mapped checkpoint. Both give the same frames, and every stage reports
// what the host holds.
func TestGenerateHostBudget(t *testing.T) {
	req := smallRequest(testImage(t))
	req.Seconds = 0.2
	var want []byte
	for _, c := range []struct {
		name  string
		limit int64
		how   string
	}{
		{"pinned", 1 << 40, "blocks streamed from host memory"},
		{"mapped", 64 << 20, "blocks streamed from the mapped checkpoint"},
	} {
		t.Run(c.name, func(t *testing.T) {
			fp, logs := loadTinyLogged(t, Options{})
			fp.gpu = true
			fp.be = memory.Budgeted(testdevice.NewFake(), memory.Budget{Device: "small", Total: 64 << 20, Cap: 64 << 20, Preserve: 61 << 20})
			fp.ram = memory.NewHost(c.limit, 1<<40, "test")
			got, err := fp.Generate(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			if want == nil {
				want = got.Pix
			} else if !bytes.Equal(got.Pix, want) {
				t.Error("the frames differ from those of blocks streamed from pinned memory")
			}
			for _, w := range []string{c.how, "host: limit", "transformer loaded"} {
				if !strings.Contains(logs.String(), w) {
					t.Errorf("no log line saying %q", w)
				}
			}
			if h := fp.ram.Stats(); h.InUse != 0 {
				t.Errorf("host budget holds %s after the job: %v", memory.FormatBytes(h.InUse), h)
			}
		})
	}
}
