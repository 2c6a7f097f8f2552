package wan

import (
	"fmt"

	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/vae/internal/tiles"
)

// Tiling is diffusers' enable_tiling for AutoencoderKLWan: tiles of
// TileHeight×TileWidth pixels every TileStrideHeight/Width, blended over
// the overlap. Off (the zero value and diffusers' default), a decode is one
// tile. Zero sizes mean diffusers' defaults, 256 and 192.
type Tiling struct {
	Spatial                           bool
	TileHeight, TileWidth             int
	TileStrideHeight, TileStrideWidth int
}

// SpatialTiling is enable_tiling() with tile and stride in pixels (0: 256
// and 192).
func SpatialTiling(tile, stride int) Tiling {
	return Tiling{Spatial: true, TileHeight: tile, TileWidth: tile, TileStrideHeight: stride, TileStrideWidth: stride}.normalized()
}

func (t Tiling) normalized() Tiling {
	tiles.DefaultSize(&t.TileHeight, &t.TileWidth, &t.TileStrideHeight, &t.TileStrideWidth)
	return t
}

func (t Tiling) check(c *Config) error {
	r := c.SpatialRatio()
	for _, p := range [][2]int{{t.TileHeight, t.TileStrideHeight}, {t.TileWidth, t.TileStrideWidth}} {
		if p[0]%r != 0 || p[1]%r != 0 || p[1] <= 0 || p[1] > p[0] {
			return fmt.Errorf("spatial tile %d every %d pixels: need multiples of %d with 0 < stride ≤ tile", p[0], p[1], r)
		}
	}
	return nil
}

// size is the spatial tile size.
func (t Tiling) size() tiles.Size {
	return tiles.Size{TileHeight: t.TileHeight, TileWidth: t.TileWidth, StrideHeight: t.TileStrideHeight, StrideWidth: t.TileStrideWidth}
}

func (t Tiling) String() string {
	if !t.Spatial {
		return "untiled"
	}
	return fmt.Sprintf("spatial %dx%d every %dx%d", t.TileHeight, t.TileWidth, t.TileStrideHeight, t.TileStrideWidth)
}

// DecodeOptions configure Decode.
type DecodeOptions struct {
	Tiling
	// NoRetry makes an out-of-memory failure final instead of decoding
	// again with smaller tiles.
	NoRetry bool
	Stats   *DecodeStats
	Log     func(format string, args ...any)
}

// DecodeStats describe a finished decode: the tiling that produced the
// result, its decoder runs, the attempts that ran out of memory and were
// shrunk, the time.
type DecodeStats = tiles.Stats[Tiling]

// Decode is AutoencoderKLWan.decode(z).sample: z (B, z_dim, T, h, w) as
// the VAE takes it (already denormalized, see Config.Denormalize), decoded
// one latent frame at a time with the feature cache, into pixels (B, out,
// 1+(T−1)·4, 8h, 8w) clamped to [−1, 1]; spatially tiled when opts ask and
// the latent exceeds a tile, as diffusers' tiled_decode. The result is an
// f32 host tensor. An out-of-memory failure decodes again at the next
// smaller tiling of the planner's ladder. Latents or pixels holding NaN or
// Inf are refused. Errors panic inside s as *tensor.OpError.
func (v *VAE) Decode(s *tensor.Scope, z *tensor.Tensor, opts DecodeOptions) *tensor.Tensor {
	if v.model().Decoder() == nil {
		tensor.Fail("wan.decode", "%v", errNoPart)
	}
	if z == nil || z.Rank() != 5 || z.Dim(1) != v.m.Cfg.ZDim || z.Numel() == 0 {
		tensor.Fail("wan.decode", "latents %v: want (B, %d, T, h, w)", shapeOf(z), v.m.Cfg.ZDim)
	}
	til := opts.Tiling.normalized()
	out, st := tiles.Decode("wan.decode", "wan vae: decode", z, til, til.check(&v.m.Cfg), opts.NoRetry, opts.Log,
		func(t Tiling) (*tiles.Video, int) { return v.decodeOnce(s, z, t) },
		func(t Tiling) (Tiling, bool) { return v.shrink(z.Shape(), t) })
	out.Clamp(-1, 1) // after Decode's check of the pixels, which a clamp would defeat
	if opts.Stats != nil {
		*opts.Stats = st
	}
	return out.Tensor()
}

func shapeOf(t *tensor.Tensor) []int {
	if t == nil {
		return nil
	}
	return t.Shape()
}

// decodeOnce decodes z at tiling til; the device memory is freed when it
// returns.
func (v *VAE) decodeOnce(s *tensor.Scope, z *tensor.Tensor, til Tiling) (*tiles.Video, int) {
	ds := s.Child()
	defer ds.Close()
	zc := tiles.ToCompute(ds, z, v.m.DT)
	r := v.m.Cfg.SpatialRatio()
	h, w := z.Dim(3), z.Dim(4)
	n := 0
	run := func(h0, h1, w0, w1 int) *tiles.Video { n++; return v.decodeTile(ds, zc, h0, h1, w0, w1) }
	if !til.useDecode(r, h, w) {
		return run(0, h, 0, w), 1
	}
	return tiles.RoundTo(v.m.DT).Spatial(run, h, w, til.size().Decode(r, h, w)), n
}

// useDecode is _decode's test: tiling on and the latent wider or taller
// than a tile.
func (t Tiling) useDecode(r, h, w int) bool {
	return t.Spatial && (w > t.TileWidth/r || h > t.TileHeight/r)
}

// decodeTile decodes the latent box [h0,h1)×[w0,w1) of every frame onto
// the host.
func (v *VAE) decodeTile(ds *tensor.Scope, zc *tensor.Tensor, h0, h1, w0, w1 int) *tiles.Video {
	// The video's host memory is made, its pages touched, beside the first
	// frames' device work rather than between two frames while the device
	// waits.
	r := v.m.Cfg.SpatialRatio()
	made := make(chan *tiles.Video, 1)
	go func() {
		made <- tiles.NewTouched(zc.Dim(0), v.m.Cfg.OutChannels, v.m.Cfg.SampleFrames(zc.Dim(2)), (h1-h0)*r, (w1-w0)*r)
	}()
	var out *tiles.Video
	t := 0
	v.m.Dec.frames(ds, zc, zc.Dim(2), h0, h1, w0, w1, func(y *tensor.Tensor) {
		if out == nil {
			out = <-made
			if out.B != y.Dim(0) || out.C != y.Dim(1) || out.H != y.Dim(3) || out.W != y.Dim(4) {
				panic(fmt.Sprintf("wan vae: decoded frames %v for a video of %dx%dx%dx%d", y.Shape(), out.B, out.C, out.H, out.W))
			}
		}
		if !y.OnHost() && y.DType() != tensor.F32 {
			// Widened on the device: the host only copies the frame, and the
			// device waits less for it before the next frame's work.
			yf := ds.Cast(y, tensor.F32)
			defer ds.Free(yf)
			y = yf
		}
		out.SetFrames(t, y)
		t += y.Dim(2)
	})
	if t != out.T {
		panic(fmt.Sprintf("wan vae: decoded %d frames, want %d", t, out.T))
	}
	return out
}

// frames decodes the first n latent frames of the box [h0,h1)×[w0,w1) of
// zc one at a time with a fresh feature cache (clear_cache), handing the
// pixels to emit in order, before they are freed.
func (d *decoder) frames(ds *tensor.Scope, zc *tensor.Tensor, n, h0, h1, w0, w1 int, emit func(*tensor.Tensor)) {
	cs := ds.Child()
	defer cs.Close()
	f := newFeatCache(cs)
	f.use = d.taps
	defer f.release()
	for k := 0; k < n; k++ {
		func() {
			fs := cs.Child()
			defer fs.Close()
			zk := tiles.SliceBox(fs, zc, k, k+1, h0, h1, w0, w1)
			zl := fs.Permute(zk, 0, 2, 3, 4, 1) // channels-last
			if zk != zc {
				fs.Free(zk)
			}
			d.forward(fs, f, d.postQuant.run(fs, zl, tensor.Padding{}, true), emit)
		}()
	}
}

// Encode is AutoencoderKLWan.encode(x).latent_dist without spatial tiling:
// x (B, in, T, H, W), pixels in [−1, 1], encoded frame 0 then 4 frames at a
// time with the feature cache (frames past the last whole chunk are not
// read, as in diffusers); it returns the posterior's mean and logvar (B,
// z_dim, LatentFrames(T), H/8, W/8), f32 host tensors, logvar clamped to
// [−30, 20]. The raw latents: Config.Normalize gives the pipelines' scale.
func (v *VAE) Encode(s *tensor.Scope, x *tensor.Tensor) (mean, logvar *tensor.Tensor) {
	return v.EncodeWith(s, x, Tiling{})
}

// EncodeWith is Encode with diffusers' tiled_encode when til is spatial and
// the video exceeds a tile.
func (v *VAE) EncodeWith(s *tensor.Scope, x *tensor.Tensor, til Tiling) (mean, logvar *tensor.Tensor) {
	if v.model().Encoder() == nil {
		tensor.Fail("wan.encode", "%v", errNoPart)
	}
	c := &v.m.Cfg
	if x == nil || x.Rank() != 5 || x.Dim(1) != c.InChannels || x.Numel() == 0 {
		tensor.Fail("wan.encode", "pixels %v: want (B, %d, T, H, W)", shapeOf(x), c.InChannels)
	}
	r := c.SpatialRatio()
	if x.Dim(3)%r != 0 || x.Dim(4)%r != 0 {
		tensor.Fail("wan.encode", "pixels %v: height and width must be multiples of %d", x.Shape(), r)
	}
	til = til.normalized()
	return tiles.Encode("wan.encode", s, x, v.m.DT, til.check(c), func(es *tensor.Scope, xc *tensor.Tensor) *tiles.Video {
		h, w := x.Dim(3), x.Dim(4)
		run := func(h0, h1, w0, w1 int) *tiles.Video { return v.encodeTile(es, xc, h0, h1, w0, w1) }
		if til.Spatial && (w > til.TileWidth || h > til.TileHeight) {
			return tiles.RoundTo(v.m.DT).Spatial(run, h, w, til.size().Encode(r, h, w))
		}
		return run(0, h, 0, w)
	})
}

// encodeTile encodes the pixel box [h0,h1)×[w0,w1): frame 0, then chunks
// of 4 frames, with a fresh feature cache.
func (v *VAE) encodeTile(es *tensor.Scope, xc *tensor.Tensor, h0, h1, w0, w1 int) *tiles.Video {
	cs := es.Child()
	defer cs.Close()
	f := newFeatCache(cs)
	f.use = v.m.Enc.taps
	defer f.release()
	nT := xc.Dim(2)
	chunks := 1 + (nT-1)/4
	var out *tiles.Video
	t := 0
	for i := 0; i < chunks; i++ {
		t0, t1 := 0, 1
		if i > 0 {
			t0, t1 = 1+4*(i-1), 1+4*i
		}
		func() {
			fs := cs.Child()
			defer fs.Close()
			y := v.m.Enc.forward(fs, f, tiles.SliceBox(fs, xc, t0, t1, h0, h1, w0, w1))
			if out == nil {
				out = tiles.New(y.Dim(0), y.Dim(1), v.m.Cfg.LatentFrames(nT), y.Dim(3), y.Dim(4))
			}
			out.SetFrames(t, y)
			t += y.Dim(2)
		}()
	}
	if t != out.T {
		panic(fmt.Sprintf("wan vae: encoded %d latent frames, want %d", t, out.T))
	}
	return out
}
