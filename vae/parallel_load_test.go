package vae

import (
	"testing"

	"github.com/framepack-go/framepack/internal/golden"
)

func TestLoadMatchesSequential(t *testing.T) {
	arch.CheckLoadMatchesSequential(t, golden.Cases(t, "vae.decode")[0].ModelDir)
}
