package vae

import (
	"fmt"
	"testing"

	"github.com/framepack-go/framepack/internal/testutil/golden"
	"github.com/framepack-go/framepack/internal/testutil/testdevice"
	"github.com/framepack-go/framepack/tensor"
)

// TestGoldenDecodeSections decodes the latent lengths FramePack's loops
// decode at window 9 (10, 18 and 19 frames: four to seven temporal tiles,
// the last ones short) with diffusers' default tiling (vae_decode_sections,
// bench/reference/make_golden_vae_sections.py).
func TestGoldenDecodeSections(t *testing.T) {
	golden.Run(t, "vae.decode_sections", func(t *testing.T, c *golden.Case) {
		v := loadCase(t, c, testdevice.Backend(t), tensor.F32)
		var frames []int
		c.Param("frames", &frames)
		if len(frames) == 0 {
			t.Fatalf("case %s lists no frames", c.Name)
		}
		for _, n := range frames {
			c.Compare(t, fmt.Sprintf("sample_%d", n), decode(t, v, c.Tensor(fmt.Sprintf("z_%d", n)), DefaultDecode()))
		}
	})
}

// TestGoldenEncodeTiled is enable_tiling's encode of one image
// (vae_encode_tiled): FramePack's low-VRAM mode encodes the start image so.
func TestGoldenEncodeTiled(t *testing.T) {
	golden.Run(t, "vae.encode_tiled", func(t *testing.T, c *golden.Case) {
		v := loadCase(t, c, testdevice.Backend(t), tensor.F32)
		s := tensor.NewScope(v.Backend())
		defer s.Close()
		var mean, logvar *tensor.Tensor
		if err := tensor.Catch(func() { mean, logvar = v.EncodeWith(s, c.Tensor("x"), caseTiling(c)) }); err != nil {
			t.Fatal(err)
		}
		c.Compare(t, "mean", mean)
		c.Compare(t, "logvar", logvar)
	})
}
