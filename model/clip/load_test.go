package clip

import (
	"testing"

	"github.com/framepack-go/framepack/internal/testutil/golden"
	"github.com/framepack-go/framepack/internal/testutil/loadtest"
	"github.com/framepack-go/framepack/tensor"
)

// Load reads the weights in parallel; they are the sequential path's, byte
// for byte.
func TestLoadMatchesSequential(t *testing.T) {
	dir := golden.Cases(t, "text_encoder.clip")[0].ModelDir
	loadtest.MatchesSequentialHF(t, dir, []tensor.DType{tensor.F32, tensor.BF16}, Load, ReadConfig, build, nil)
}
