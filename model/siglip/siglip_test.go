package siglip

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/framepack-go/framepack/backend/cpu"
	"github.com/framepack-go/framepack/internal/testutil/golden"
	"github.com/framepack-go/framepack/internal/testutil/plantest"
	"github.com/framepack-go/framepack/internal/testutil/scopetest"
	"github.com/framepack-go/framepack/internal/testutil/testdevice"
	"github.com/framepack-go/framepack/tensor"
)

func TestGoldenSiglip(t *testing.T) {
	be := testdevice.Backend(t)
	golden.Run(t, "image_encoder.siglip", func(t *testing.T, c *golden.Case) {
		m := golden.Load(t, c, Load, be, tensor.F32)
		out := scopetest.Run(t, be, func(s *tensor.Scope) *tensor.Tensor { return m.Forward(s, c.Tensor("pixel_values")) })
		c.Compare(t, "last_hidden_state", out)
	})
}

// The case made by bench/reference/make_golden_siglip.py: an image size that
// is not a multiple of the patch size, as in the released encoder (384, 14).
func TestGoldenSiglipNonMultiple(t *testing.T) {
	const name = "siglip_vision_nonmultiple"
	dir, err := golden.Dir()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, name, "case.json")); errors.Is(err, fs.ErrNotExist) {
		t.Skipf("golden case %s is not in %s yet (python3 bench/reference/make_golden_siglip.py --out DIR writes it)", name, dir)
	}
	var c *golden.Case
	for _, k := range golden.Cases(t, "image_encoder.siglip") {
		if k.Name == name {
			c = k
		}
	}
	if c == nil {
		t.Fatalf("%s/%s/case.json is not an image_encoder.siglip case", dir, name)
	}
	be := cpu.New()
	m := golden.Load(t, c, Load, be, tensor.F32)
	if m.ImageSize%m.PatchSize == 0 {
		t.Fatalf("image_size %d is a multiple of patch_size %d: not the case this test is for", m.ImageSize, m.PatchSize)
	}
	out := scopetest.Run(t, be, func(s *tensor.Scope) *tensor.Tensor { return m.Forward(s, c.Tensor("pixel_values")) })
	if out.Dim(1) != m.Tokens() {
		t.Errorf("%d tokens, want %d", out.Dim(1), m.Tokens())
	}
	c.Compare(t, "last_hidden_state", out)
}

// The golden model with image_size raised past a multiple of patch_size
// (32 → 35 with patch 8: still 4×4 patches, 3 pixel rows and columns never
// read) gives the golden output for the golden pixels padded with anything.
func TestSiglipImageSizeNotMultiple(t *testing.T) {
	var c *golden.Case
	for _, k := range golden.Cases(t, "image_encoder.siglip") {
		if k.Name == "siglip_vision" {
			c = k
		}
	}
	if c == nil {
		t.Skip("golden case siglip_vision absent")
	}
	var size, patch, big int
	dir := plantest.EditedConfig(t, c.ModelDir, func(cfg map[string]any) {
		size, patch = int(cfg["image_size"].(float64)), int(cfg["patch_size"].(float64))
		big = size + patch - 1
		cfg["image_size"] = big
	}, "model.safetensors")
	be := cpu.New()
	m, err := Load(dir, be, tensor.F32)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.Tokens() != (size/patch)*(size/patch) {
		t.Fatalf("image_size %d, patch_size %d: %d tokens, want %d", big, patch, m.Tokens(), (size/patch)*(size/patch))
	}
	px := c.Tensor("pixel_values")
	src := px.Float32s()
	padded := make([]float32, 3*big*big)
	for i := range padded {
		padded[i] = float32(i%7) - 3 // the unread border
	}
	for ch := 0; ch < 3; ch++ {
		for y := 0; y < size; y++ {
			copy(padded[(ch*big+y)*big:], src[(ch*size+y)*size:(ch*size+y+1)*size])
		}
	}
	s := tensor.NewScope(be)
	defer s.Close()
	var out *tensor.Tensor
	if err := tensor.Catch(func() { out = m.Forward(s, tensor.FromFloat32(padded, 1, 3, big, big)) }); err != nil {
		t.Fatal(err)
	}
	c.Compare(t, "last_hidden_state", out)
}
