package framepack

import (
	"errors"
	"strings"
	"testing"

	"github.com/framepack-go/framepack/memory"
)

// CheckFit accepts a short job within a small budget and refuses a long
// one at a large resolution, naming the budget and the need; the need
// grows with the length and the resolution.
func TestCheckFit(t *testing.T) {
	t.Parallel()
	p, _ := loadTinyLogged(t, Options{VRAMLimit: memory.Bytes(200 * memory.MiB)})
	small := p.DefaultRequest()
	small.Seconds, small.Resolution, small.LatentWindowSize = 1, 64, 3
	if err := p.CheckFit(small, 400, 300); err != nil {
		t.Fatalf("a 1 s job at 64: %v", err)
	}
	big := small
	big.Seconds, big.Resolution = 60, 640
	err := p.CheckFit(big, 400, 300)
	var fe *FitError
	if !errors.As(err, &fe) {
		t.Fatalf("a 60 s job at 640 under a 200 MiB cap: %v", err)
	}
	if fe.Flag != "--vram-limit" || fe.Have != 200<<20 || fe.Need <= fe.Have || !strings.Contains(err.Error(), "704×544") {
		t.Fatalf("the refusal: %+v: %v", fe, err)
	}
	longer := big
	longer.Seconds = 120
	var fe2 *FitError
	if err := p.CheckFit(longer, 400, 300); !errors.As(err, &fe2) || fe2.Need <= fe.Need {
		t.Fatalf("twice as long needs more: %v (%d, before %d)", err, fe2.Need, fe.Need)
	}
	t.Logf("%v", err)
	if err := p.CheckFit(small, 0, 300); err == nil {
		t.Error("an image without pixels fits")
	}
}
