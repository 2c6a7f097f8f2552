package wan

import (
	"testing"

	"github.com/framepack-go/framepack/internal/golden"
)

func TestLoadMatchesSequential(t *testing.T) {
	arch.CheckLoadMatchesSequential(t, golden.Cases(t, "wan_vae.decode")[0].ModelDir)
}
