package wan

import (
	"errors"
	"fmt"
	"time"

	"github.com/framepack-go/framepack/tensor"
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
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&t.TileHeight, 256)
	def(&t.TileWidth, 256)
	def(&t.TileStrideHeight, 192)
	def(&t.TileStrideWidth, 192)
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

// DecodeStats describe a finished decode.
type DecodeStats struct {
	Tiling  Tiling
	Tiles   int
	Retries int
	Elapsed time.Duration
}

// Decode is AutoencoderKLWan.decode(z).sample: z (B, z_dim, T, h, w) as
// the VAE takes it (already denormalized, see Config.Denormalize), decoded
// one latent frame at a time with the feature cache, into pixels (B, out,
// 1+(T−1)·4, 8h, 8w) clamped to [−1, 1]; spatially tiled when opts ask and
// the latent exceeds a tile, as diffusers' tiled_decode. The result is an
// f32 host tensor. An out-of-memory failure decodes again at the next
// smaller tiling of the planner's ladder. Latents or pixels holding NaN or
// Inf are refused. Errors panic inside s as *tensor.OpError.
func (v *VAE) Decode(s *tensor.Scope, z *tensor.Tensor, opts DecodeOptions) *tensor.Tensor {
	if v == nil || v.dec == nil {
		tensor.Fail("wan.decode", "%v", errNoPart)
	}
	if z == nil || z.Rank() != 5 || z.Dim(1) != v.cfg.ZDim || z.Numel() == 0 {
		tensor.Fail("wan.decode", "latents %v: want (B, %d, T, h, w)", shapeOf(z), v.cfg.ZDim)
	}
	if err := tensor.NonFiniteError("the latents to decode hold non-finite values", z); err != nil {
		tensor.Fail("wan.decode", "%v", err)
	}
	til := opts.Tiling.normalized()
	if err := til.check(&v.cfg); err != nil {
		tensor.Fail("wan.decode", "%v", err)
	}
	start, retries := time.Now(), 0
	for {
		var out *vid
		var tiles int
		err := tensor.Catch(func() { out, tiles = v.decodeOnce(s, z, til) })
		if err == nil {
			// Checked before the clamp, which would hide an Inf.
			px := out.tensor()
			if err := tensor.NonFiniteError("the decoder produced non-finite pixels", px); err != nil {
				tensor.Fail("wan.decode", "%v", err)
			}
			out.clamp(-1, 1)
			if opts.Stats != nil {
				*opts.Stats = DecodeStats{Tiling: til, Tiles: tiles, Retries: retries, Elapsed: time.Since(start)}
			}
			return px
		}
		if !errors.Is(err, tensor.ErrOutOfMemory) || opts.NoRetry {
			panic(err)
		}
		next, ok := v.shrink(z.Shape(), til)
		if !ok {
			panic(&tensor.OpError{Op: "wan.decode", Err: fmt.Errorf("out of memory at the smallest tiling (%s): %w", til, err)})
		}
		if opts.Log != nil {
			opts.Log("wan vae: decode ran out of memory at %s (%v); retrying at %s", til, err, next)
		}
		til = next
		retries++
	}
}

func shapeOf(t *tensor.Tensor) []int {
	if t == nil {
		return nil
	}
	return t.Shape()
}

// decodeOnce decodes z at tiling til; the device memory is freed when it
// returns.
func (v *VAE) decodeOnce(s *tensor.Scope, z *tensor.Tensor, til Tiling) (*vid, int) {
	ds := s.Child()
	defer ds.Close()
	zc := toCompute(ds, z, v.dt)
	r := v.cfg.SpatialRatio()
	h, w := z.Dim(3), z.Dim(4)
	tiles := 0
	run := func(h0, h1, w0, w1 int) *vid { tiles++; return v.decodeTile(ds, zc, h0, h1, w0, w1) }
	if !til.useDecode(r, h, w) {
		return run(0, h, 0, w), 1
	}
	out := spatialTiles(v.dt, run, h, w, til.TileHeight/r, til.TileWidth/r, til.TileStrideHeight/r, til.TileStrideWidth/r,
		til.TileHeight-til.TileStrideHeight, til.TileWidth-til.TileStrideWidth,
		til.TileStrideHeight, til.TileStrideWidth, h*r, w*r)
	return out, tiles
}

// useDecode is _decode's test: tiling on and the latent wider or taller
// than a tile.
func (t Tiling) useDecode(r, h, w int) bool {
	return t.Spatial && (w > t.TileWidth/r || h > t.TileHeight/r)
}

// decodeTile decodes the latent box [h0,h1)×[w0,w1) of every frame onto
// the host.
func (v *VAE) decodeTile(ds *tensor.Scope, zc *tensor.Tensor, h0, h1, w0, w1 int) *vid {
	var out *vid
	t := 0
	v.dec.frames(ds, zc, zc.Dim(2), h0, h1, w0, w1, func(y *tensor.Tensor) {
		if out == nil {
			out = newVid(y.Dim(0), y.Dim(1), v.cfg.SampleFrames(zc.Dim(2)), y.Dim(3), y.Dim(4))
		}
		out.pasteFrames(t, y)
		t += y.Dim(2)
	})
	if t != out.t {
		panic(fmt.Sprintf("wan vae: decoded %d frames, want %d", t, out.t))
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
	defer f.release()
	for k := 0; k < n; k++ {
		func() {
			fs := cs.Child()
			defer fs.Close()
			zk := sliceBox(fs, zc, k, k+1, h0, h1, w0, w1)
			x := d.postQuant.run(fs, zk, tensor.Padding{}, zk != zc)
			d.forward(fs, f, x, emit)
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
	if v == nil || v.enc == nil {
		tensor.Fail("wan.encode", "%v", errNoPart)
	}
	c := &v.cfg
	if x == nil || x.Rank() != 5 || x.Dim(1) != c.InChannels || x.Numel() == 0 {
		tensor.Fail("wan.encode", "pixels %v: want (B, %d, T, H, W)", shapeOf(x), c.InChannels)
	}
	r := c.SpatialRatio()
	if x.Dim(3)%r != 0 || x.Dim(4)%r != 0 {
		tensor.Fail("wan.encode", "pixels %v: height and width must be multiples of %d", x.Shape(), r)
	}
	til = til.normalized()
	if err := til.check(c); err != nil {
		tensor.Fail("wan.encode", "%v", err)
	}
	es := s.Child()
	defer es.Close()
	xc := toCompute(es, x, v.dt)
	h, w := x.Dim(3), x.Dim(4)
	run := func(h0, h1, w0, w1 int) *vid { return v.encodeTile(es, xc, h0, h1, w0, w1) }
	var mom *vid
	if til.Spatial && (w > til.TileWidth || h > til.TileHeight) {
		mom = spatialTiles(v.dt, run, h, w, til.TileHeight, til.TileWidth, til.TileStrideHeight, til.TileStrideWidth,
			til.TileHeight/r-til.TileStrideHeight/r, til.TileWidth/r-til.TileStrideWidth/r,
			til.TileStrideHeight/r, til.TileStrideWidth/r, h/r, w/r)
	} else {
		mom = run(0, h, 0, w)
	}
	return mom.posterior()
}

// encodeTile encodes the pixel box [h0,h1)×[w0,w1): frame 0, then chunks
// of 4 frames, with a fresh feature cache.
func (v *VAE) encodeTile(es *tensor.Scope, xc *tensor.Tensor, h0, h1, w0, w1 int) *vid {
	cs := es.Child()
	defer cs.Close()
	f := newFeatCache(cs)
	defer f.release()
	nT := xc.Dim(2)
	chunks := 1 + (nT-1)/4
	var out *vid
	t := 0
	for i := 0; i < chunks; i++ {
		t0, t1 := 0, 1
		if i > 0 {
			t0, t1 = 1+4*(i-1), 1+4*i
		}
		func() {
			fs := cs.Child()
			defer fs.Close()
			y := v.enc.forward(fs, f, sliceBox(fs, xc, t0, t1, h0, h1, w0, w1))
			if out == nil {
				out = newVid(y.Dim(0), y.Dim(1), v.cfg.LatentFrames(nT), y.Dim(3), y.Dim(4))
			}
			out.pasteFrames(t, y)
			t += y.Dim(2)
		}()
	}
	if t != out.t {
		panic(fmt.Sprintf("wan vae: encoded %d latent frames, want %d", t, out.t))
	}
	return out
}

// toCompute puts x on s's backend in dt.
func toCompute(s *tensor.Scope, x *tensor.Tensor, dt tensor.DType) *tensor.Tensor {
	on := s.To(x)
	out := s.Cast(on, dt)
	if out != on && on != x {
		s.Free(on)
	}
	return out
}

// sliceBox copies x[:, :, t0:t1, h0:h1, w0:w1] (x itself when the box is
// everything).
func sliceBox(s *tensor.Scope, x *tensor.Tensor, t0, t1, h0, h1, w0, w1 int) *tensor.Tensor {
	orig := x
	for i, r := range [3][2]int{{t0, t1}, {h0, h1}, {w0, w1}} {
		ax := 2 + i
		if r[0] == 0 && r[1] == x.Dim(ax) {
			continue
		}
		y := s.Slice(x, ax, r[0], r[1])
		if x != orig {
			s.Free(x)
		}
		x = y
	}
	return x
}
