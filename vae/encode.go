package vae

import (
	"math"

	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/vae/internal/tiles"
)

// Encode runs the encoder on x (B, in, T, H, W), pixels in [−1, 1], with
// diffusers' default rules (frame-wise above 16 frames, no spatial tiling)
// and returns the posterior's mean and logvar (B, latent, (T−1)/4+1, H/8,
// W/8), f32, logvar clamped to [−30, 20]. They are owned by s.
func (v *VAE) Encode(s *tensor.Scope, x *tensor.Tensor) (mean, logvar *tensor.Tensor) {
	return v.EncodeWith(s, x, DefaultTiling())
}

// EncodeWith is Encode with diffusers' tiling settings til (its _encode:
// temporal tiles when frame-wise and T > TileFrames, else spatial tiles when
// tiling is on and the image exceeds the tile; FramePack's low-VRAM mode
// encodes its start image with SpatialTiling(0, 0)).
func (v *VAE) EncodeWith(s *tensor.Scope, x *tensor.Tensor, til Tiling) (mean, logvar *tensor.Tensor) {
	if v.model().Encoder() == nil {
		tensor.Fail("vae.encode", "%v", errNoPart)
	}
	if x == nil {
		tensor.Fail("vae.encode", "no pixels")
	}
	c := &v.m.Cfg
	if x.Rank() != 5 || x.Dim(1) != c.InChannels || x.Numel() == 0 {
		tensor.Fail("vae.encode", "pixels %v: want (B, %d, T, H, W)", x.Shape(), c.InChannels)
	}
	til = til.normalized()
	m, lv := tiles.Encode("vae.encode", s, x, v.m.DT, til.check(c), func(es *tensor.Scope, xc *tensor.Tensor) *tiles.Video {
		ss, st := c.SpatialCompressionRatio, c.TemporalCompressionRatio
		nT, h, w := x.Dim(2), x.Dim(3), x.Dim(4)
		r := tiles.RoundTo(v.m.DT)
		run := func(t0, t1, h0, h1, w0, w1 int) *tiles.Video {
			ts := es.Child()
			defer ts.Close()
			return tiles.Of(v.m.Enc.forward(ts, tiles.SliceBox(ts, xc, t0, t1, h0, h1, w0, w1)))
		}
		useSpatial := til.Spatial && (h > til.TileHeight || w > til.TileWidth)
		grid := til.size().Encode(ss, h, w) // diffusers crops tiled moments to H//8, W//8
		tile := func(t0, t1 int) *tiles.Video {
			if useSpatial {
				return r.Spatial(func(h0, h1, w0, w1 int) *tiles.Video { return run(t0, t1, h0, h1, w0, w1) }, h, w, grid)
			}
			return run(t0, t1, 0, h, 0, w)
		}
		if til.Framewise && nT > til.TileFrames {
			return r.Temporal(tile, nT, til.TileFrames+1, til.TileFrameStride,
				til.TileFrameStride/st, til.TileFrames/st-til.TileFrameStride/st, c.LatentFrames(nT))
		}
		return tile(0, nT)
	})
	return s.To(m), s.To(lv)
}

// Randn is a seeded source of standard normal noise, such as
// sampler.TorchGenerator (torch.randn's CPU stream).
type Randn interface {
	Randn(shape ...int) []float32
}

// Sample draws from the posterior: mean + exp(logvar/2)·ε, with ε from rng
// in mean's shape, computed in f32 on the host. The result is a host f32
// tensor; FramePack multiplies it by ScalingFactor afterwards.
func Sample(mean, logvar *tensor.Tensor, rng Randn) *tensor.Tensor {
	m := tensor.Float32s(mean)
	lv := tensor.Float32s(logvar)
	eps := rng.Randn(mean.Shape()...)
	out := make([]float32, len(m))
	for i := range out {
		std := float32(math.Exp(float64(float32(0.5) * lv[i])))
		out[i] = m[i] + float32(std*eps[i])
	}
	return tensor.FromFloat32(out, mean.Shape()...)
}

// Mode is the posterior's mode, its mean.
func Mode(mean, logvar *tensor.Tensor) *tensor.Tensor { return mean }
