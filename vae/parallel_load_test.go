package vae

import (
	"fmt"
	"testing"

	"github.com/framepack-go/framepack/internal/golden"
	"github.com/framepack-go/framepack/internal/loadtest"
	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/weights"
)

// Load reads the weights in parallel; they are the sequential path's, byte
// for byte, encoder and decoder together or apart.
func TestLoadMatchesSequential(t *testing.T) {
	dir := golden.Cases(t, "vae.decode")[0].ModelDir
	cfg, err := ReadConfig(dir)
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
				v, err := Load(dir, be, o)
				if err != nil {
					t.Fatal(err)
				}
				defer v.Close()
				seq, err := build(cfg, be, weights.FromCheckpoint(ck, be, o.DType), o)
				if err != nil {
					t.Fatal(err)
				}
				defer seq.Close()
				loadtest.Same(t, v.loaded.Held(), seq.loaded.Held())
			})
		}
	}
}
