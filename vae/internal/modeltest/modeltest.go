// Package modeltest holds the tests both VAEs share (for their tests only:
// it imports the test devices).
package modeltest

import (
	"fmt"
	"testing"

	"github.com/framepack-go/framepack/internal/testutil/loadtest"
	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/vae/internal/model"
)

// CheckLoadMatchesSequential is a test: Load reads the weights of the
// checkpoint in dir in parallel, and they are the sequential path's, byte
// for byte, encoder and decoder together or apart, on every kind of
// backend.
func CheckLoadMatchesSequential[C any, PC model.Config[C], E, D any](t *testing.T, a *model.Arch[C, PC, E, D], dir string) {
	for name, be := range loadtest.Backends(t) {
		for _, o := range []model.Options{{DType: tensor.F32}, {DType: tensor.BF16, NoDecoder: true}, {DType: tensor.F16, NoEncoder: true}} {
			t.Run(fmt.Sprintf("%s/%s/enc=%v/dec=%v", name, o.DType, !o.NoEncoder, !o.NoDecoder), func(t *testing.T) {
				m, err := a.Load(dir, be, o)
				if err != nil {
					t.Fatal(err)
				}
				defer m.Close()
				seq, err := a.LoadSequential(dir, be, o)
				if err != nil {
					t.Fatal(err)
				}
				defer seq.Close()
				loadtest.Same(t, m.WeightTensors(), seq.WeightTensors())
			})
		}
	}
}
