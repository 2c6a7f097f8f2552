package siglip

import (
	"fmt"
	"testing"

	"github.com/framepack-go/framepack/internal/golden"
	"github.com/framepack-go/framepack/internal/loadtest"
	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/weights"
)

// Load reads the weights in parallel; they are the sequential path's, byte
// for byte.
func TestLoadMatchesSequential(t *testing.T) {
	dir := golden.Cases(t, "image_encoder.siglip")[0].ModelDir
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
		for _, dt := range []tensor.DType{tensor.F32, tensor.BF16} {
			t.Run(fmt.Sprintf("%s/%s", name, dt), func(t *testing.T) {
				m, err := Load(dir, be, dt)
				if err != nil {
					t.Fatal(err)
				}
				defer m.Close()
				seq := weights.FromCheckpoint(ck, be, dt)
				build(seq, cfg)
				if err := seq.Err(); err != nil {
					t.Fatal(err)
				}
				defer seq.Release()
				loadtest.Same(t, m.loaded.Held(), seq.Held())
			})
		}
	}
}
