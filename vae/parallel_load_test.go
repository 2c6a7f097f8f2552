package vae

import (
	"testing"

	"github.com/framepack-go/framepack/internal/testutil/golden"
	"github.com/framepack-go/framepack/vae/internal/modeltest"
)

func TestLoadMatchesSequential(t *testing.T) {
	modeltest.CheckLoadMatchesSequential(t, arch, golden.Cases(t, "vae.decode")[0].ModelDir)
}
