package vae

import (
	"math"
	"testing"

	"github.com/framepack-go/framepack/internal/numcmp"
	"github.com/framepack-go/framepack/internal/testutil/golden"
	"github.com/framepack-go/framepack/internal/testutil/scopetest"
	"github.com/framepack-go/framepack/internal/testutil/testdevice"
	"github.com/framepack-go/framepack/sampler"
	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/vae/internal/tiles"
)

// goldenModel loads the golden cases' tiny VAE.
func goldenModel(t *testing.T) *VAE {
	t.Helper()
	cs := golden.Cases(t, "vae.encode")
	return loadCase(t, cs[0], testdevice.Backend(t), tensor.F32)
}

func encode(t *testing.T, v *VAE, x *tensor.Tensor, til Tiling) (mean, logvar *tiles.Video) {
	t.Helper()
	out := scopetest.Run(t, v.Backend(), func(s *tensor.Scope) [2]*tensor.Tensor {
		m, lv := v.EncodeWith(s, x, til)
		return [2]*tensor.Tensor{m, lv}
	})
	return tiles.Of(out[0]), tiles.Of(out[1])
}

// crop copies x[..., t0:t1, h0:h1, w0:w1] of a host tensor.
func crop(x *tensor.Tensor, t0, t1, h0, h1, w0, w1 int) *tensor.Tensor {
	src := tiles.Of(x)
	out := tiles.New(src.B, src.C, t1-t0, h1-h0, w1-w0)
	tiles.Paste(out, 0, 0, 0, src, t0, h0, w0, t1-t0, h1-h0, w1-w0)
	return out.Tensor()
}

// TestEncodeTemporalTiles checks frame-wise encoding (T > 16) against the
// rule written out by hand: windows of 17 frames every 12, the first latent
// of later windows dropped, a one-latent blend (which takes the earlier
// window's last latent), 4 then 3 latents kept.
func TestEncodeTemporalTiles(t *testing.T) {
	v := goldenModel(t)
	x := randLatents(11, 1, 3, 21, 16, 16)
	got, _ := encode(t, v, x, DefaultTiling())
	a, _ := encode(t, v, crop(x, 0, 17, 0, 16, 0, 16), Tiling{})
	b, _ := encode(t, v, crop(x, 12, 21, 0, 16, 0, 16), Tiling{})
	if got.T != 6 || a.T != 5 || b.T != 3 {
		t.Fatalf("latent frames %d, %d, %d; want 6, 5, 3", got.T, a.T, b.T)
	}
	// Expected frames: a[0..3], then a[4] (the blend of a[4] with b[1] at
	// weight 0), then b[2].
	want := tiles.New(1, 16, 6, 2, 2)
	tiles.Paste(want, 0, 0, 0, a, 0, 0, 0, 5, 2, 2)
	tiles.Paste(want, 5, 0, 0, b, 2, 0, 0, 1, 2, 2)
	if d := numcmp.RelL2(values(got), values(want)); d != 0 {
		t.Errorf("frame-wise encode differs from the hand-made one: rel_l2 %g", d)
	}
}

// TestEncodeSpatialTiles checks tiled_encode (enable_tiling(32, 32, 24, 24))
// against crops encoded alone and blended by hand over 1 latent pixel,
// keeping 3×3 latents per tile.
func TestEncodeSpatialTiles(t *testing.T) {
	v := goldenModel(t)
	x := randLatents(12, 1, 3, 1, 48, 64)
	got, _ := encode(t, v, x, SpatialTiling(32, 24))
	var tl [2][3]*tiles.Video
	for i := range 2 {
		for j := range 3 {
			tl[i][j], _ = encode(t, v, crop(x, 0, 1, 24*i, min(24*i+32, 48), 24*j, min(24*j+32, 64)), Tiling{})
		}
	}
	want := tiles.New(1, 16, 1, 6, 8)
	for i := range 2 {
		for j := range 3 {
			tile := tl[i][j]
			// blend_v then blend_h with extent 1: the first row (column)
			// becomes the neighbour's last.
			if i > 0 {
				up := tl[i-1][j]
				for c := range 16 {
					for x := range tile.W {
						tile.Frame(0, c, 0)[x] = up.Frame(0, c, 0)[(up.H-1)*up.W+x]
					}
				}
			}
			if j > 0 {
				left := tl[i][j-1]
				for c := range 16 {
					for y := range tile.H {
						tile.Frame(0, c, 0)[y*tile.W] = left.Frame(0, c, 0)[y*left.W+left.W-1]
					}
				}
			}
			nh, nw := min(3, tile.H, 6-3*i), min(3, tile.W, 8-3*j)
			tiles.Paste(want, 0, 3*i, 3*j, tile, 0, 0, 0, 1, nh, nw)
		}
	}
	if d := numcmp.RelL2(values(got), values(want)); d != 0 {
		t.Errorf("tiled encode differs from the hand-made one: rel_l2 %g", d)
	}
	// A tile as large as the image is the plain encode.
	plain, _ := encode(t, v, x, Tiling{})
	big, _ := encode(t, v, x, SpatialTiling(64, 32))
	if d := numcmp.RelL2(values(big), values(plain)); d != 0 {
		t.Errorf("tile ≥ image changed the result: rel_l2 %g", d)
	}
}

// values are a video's values.
func values(v *tiles.Video) []float32 { return v.Tensor().Float32s() }

type fixedNoise []float32

func (f fixedNoise) Randn(shape ...int) []float32 { return f[:tensor.Numel(shape)] }

func TestSample(t *testing.T) {
	mean := tensor.FromFloat32([]float32{0, 1, -2, 0.5}, 1, 4, 1, 1, 1)
	logvar := tensor.FromFloat32([]float32{0, -2, 2, -30}, 1, 4, 1, 1, 1)
	eps := fixedNoise{1, -1, 0.5, 2}
	got := Sample(mean, logvar, eps).Float32s()
	for i := range got {
		want := float64(mean.Float32s()[i]) + math.Exp(0.5*float64(logvar.Float32s()[i]))*float64(eps[i])
		if math.Abs(float64(got[i])-want) > 1e-6*math.Max(1, math.Abs(want)) {
			t.Errorf("sample[%d] = %v, want %v", i, got[i], want)
		}
	}
	if Mode(mean, logvar) != mean {
		t.Error("mode is not the mean")
	}
}

// The sampler's torch-compatible generator is a posterior noise source.
var _ Randn = (*sampler.TorchGenerator)(nil)
