package model

import (
	"fmt"
	"testing"

	"github.com/framepack-go/framepack/internal/loadtest"
	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/weights"
)

// CheckLoadMatchesSequential is a test: Load reads the weights of the
// checkpoint in dir in parallel, and they are the sequential path's, byte
// for byte, encoder and decoder together or apart, on every kind of
// backend.
func (a *Arch[C, PC, E, D]) CheckLoadMatchesSequential(t *testing.T, dir string) {
	cfg, err := a.ReadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	ck, err := weights.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	for name, be := range loadtest.Backends(t) {
		for _, o := range []Options{{DType: tensor.F32}, {DType: tensor.BF16, NoDecoder: true}, {DType: tensor.F16, NoEncoder: true}} {
			t.Run(fmt.Sprintf("%s/%s/enc=%v/dec=%v", name, o.DType, !o.NoEncoder, !o.NoDecoder), func(t *testing.T) {
				m, err := a.Load(dir, be, o)
				if err != nil {
					t.Fatal(err)
				}
				defer m.Close()
				seq, err := a.build(cfg, be, weights.FromCheckpoint(ck, be, o.DType), o)
				if err != nil {
					t.Fatal(err)
				}
				defer seq.Close()
				loadtest.Same(t, m.WeightTensors(), seq.WeightTensors())
			})
		}
	}
}
