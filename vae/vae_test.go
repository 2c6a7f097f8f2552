package vae

import (
	"testing"

	"github.com/framepack-go/framepack/backend/cpu"
	"github.com/framepack-go/framepack/internal/golden"
	"github.com/framepack-go/framepack/tensor"
)

// loadCase loads the case's model on be in dt.
func loadCase(t *testing.T, c *golden.Case, be tensor.Backend, dt tensor.DType) *VAE {
	t.Helper()
	v, err := Load(c.ModelDir, be, Options{DType: dt})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.Close)
	return v
}

func decode(t *testing.T, v *VAE, z *tensor.Tensor, opts DecodeOptions) *tensor.Tensor {
	t.Helper()
	var out *tensor.Tensor
	s := tensor.NewScope(v.Backend())
	defer s.Close()
	if err := tensor.Catch(func() { out = v.Decode(s, z, opts) }); err != nil {
		t.Fatal(err)
	}
	return out
}

// caseTiling is enable_tiling(**tiling) of a case.
func caseTiling(c *golden.Case) Tiling {
	var p struct {
		H  int `json:"tile_sample_min_height"`
		W  int `json:"tile_sample_min_width"`
		SH int `json:"tile_sample_stride_height"`
		SW int `json:"tile_sample_stride_width"`
	}
	c.Param("tiling", &p)
	return Tiling{Framewise: true, Spatial: true, TileHeight: p.H, TileWidth: p.W,
		TileStrideHeight: p.SH, TileStrideWidth: p.SW}.normalized()
}

func TestGoldenDecode(t *testing.T) {
	for _, c := range golden.Cases(t, "vae.decode") {
		t.Run(c.Name, func(t *testing.T) {
			v := loadCase(t, c, cpu.New(), tensor.F32)
			c.Compare(t, "sample", decode(t, v, c.Tensor("z"), DefaultDecode()))
		})
	}
}

func TestGoldenDecodeTiled(t *testing.T) {
	for _, c := range golden.Cases(t, "vae.decode_tiled") {
		t.Run(c.Name, func(t *testing.T) {
			v := loadCase(t, c, cpu.New(), tensor.F32)
			z := c.Tensor("z")
			var st DecodeStats
			c.Compare(t, "sample", decode(t, v, z, DecodeOptions{Tiling: caseTiling(c), Stats: &st}))
			if st.Tiles < 2 {
				t.Errorf("tiled decode ran %d tiles", st.Tiles)
			}
			c.Compare(t, "sample_untiled", decode(t, v, z, DefaultDecode()))
		})
	}
}

func TestGoldenEncode(t *testing.T) {
	for _, c := range golden.Cases(t, "vae.encode") {
		t.Run(c.Name, func(t *testing.T) {
			v := loadCase(t, c, cpu.New(), tensor.F32)
			s := tensor.NewScope(v.Backend())
			defer s.Close()
			var mean, logvar *tensor.Tensor
			if err := tensor.Catch(func() { mean, logvar = v.Encode(s, c.Tensor("x")) }); err != nil {
				t.Fatal(err)
			}
			c.Compare(t, "mean", mean)
			c.Compare(t, "logvar", logvar)
		})
	}
}
