package vae

import (
	"fmt"

	"github.com/framepack-go/framepack/tensor"
)

// Tiling is how diffusers splits a decode (or encode) into pieces: frame-wise
// temporal tiles (on by default in diffusers) and spatial tiles (its
// enable_tiling). Sizes are in sample frames and pixels; zero means
// diffusers' default.
type Tiling struct {
	// Framewise decodes latents with more than TileFrames/4 frames in
	// temporal tiles of TileFrames/4+1 latent frames every
	// TileFrameStride/4, blended over TileFrames−TileFrameStride frames.
	Framewise                   bool
	TileFrames, TileFrameStride int // 16, 12; multiples of 4, stride < frames

	// Spatial decodes in tiles of TileHeight×TileWidth pixels every
	// TileStrideHeight/Width pixels, blended over the overlap.
	Spatial                           bool
	TileHeight, TileWidth             int // 256; multiples of 8
	TileStrideHeight, TileStrideWidth int // 192; multiples of 8, < tile
	// FixedWidthThreshold makes a decode that is not frame-wise tile when
	// the latent width exceeds TileWidth/8, as diffusers ≥ 0.34 does.
	// diffusers 0.33.1 (FramePack's pin, the default here) compares the
	// width with TileStrideWidth/8 instead.
	FixedWidthThreshold bool
}

// DefaultTiling is diffusers' default: frame-wise on, spatial tiling off.
func DefaultTiling() Tiling { return Tiling{Framewise: true}.normalized() }

// SpatialTiling is diffusers' enable_tiling() with tile and stride in
// pixels (0: 256 and 192), frame-wise decoding on.
func SpatialTiling(tile, stride int) Tiling {
	return Tiling{Framewise: true, Spatial: true, TileHeight: tile, TileWidth: tile,
		TileStrideHeight: stride, TileStrideWidth: stride}.normalized()
}

func (t Tiling) normalized() Tiling {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&t.TileFrames, 16)
	def(&t.TileFrameStride, 12)
	def(&t.TileHeight, 256)
	def(&t.TileWidth, 256)
	def(&t.TileStrideHeight, 192)
	def(&t.TileStrideWidth, 192)
	return t
}

func (t Tiling) check(c *Config) error {
	st, ss := c.TemporalCompressionRatio, c.SpatialCompressionRatio
	if t.TileFrames%st != 0 || t.TileFrameStride%st != 0 || t.TileFrameStride <= 0 || t.TileFrameStride >= t.TileFrames {
		return fmt.Errorf("temporal tile %d every %d frames: need multiples of %d with 0 < stride < tile", t.TileFrames, t.TileFrameStride, st)
	}
	for _, p := range [][2]int{{t.TileHeight, t.TileStrideHeight}, {t.TileWidth, t.TileStrideWidth}} {
		if p[0]%ss != 0 || p[1]%ss != 0 || p[1] <= 0 || p[1] >= p[0] {
			return fmt.Errorf("spatial tile %d every %d pixels: need multiples of %d with 0 < stride < tile", p[0], p[1], ss)
		}
	}
	return nil
}

func (t Tiling) String() string {
	s := "untiled"
	if t.Framewise {
		s = fmt.Sprintf("frame-wise %d/%d", t.TileFrames, t.TileFrameStride)
	}
	if t.Spatial {
		s += fmt.Sprintf(", spatial %dx%d every %dx%d", t.TileHeight, t.TileWidth, t.TileStrideHeight, t.TileStrideWidth)
	}
	return s
}

// decodePath is diffusers' _decode dispatch for a latent of t frames and
// h×w.
type decodePath int

const (
	pathPlain decodePath = iota
	pathSpatial
	pathTemporal
)

func (t Tiling) decodePath(c *Config, frames, h, w int) decodePath {
	ss, st := c.SpatialCompressionRatio, c.TemporalCompressionRatio
	if t.Framewise && frames > t.TileFrames/st {
		return pathTemporal
	}
	minW := t.TileStrideWidth / ss // diffusers 0.33.1
	if t.FixedWidthThreshold {
		minW = t.TileWidth / ss
	}
	if t.Spatial && (w > minW || h > t.TileHeight/ss) {
		return pathSpatial
	}
	return pathPlain
}

// spatialInTemporal is the check inside the temporal loop (which uses the
// tile width, in every version).
func (t Tiling) spatialInTemporal(c *Config, h, w int) bool {
	ss := c.SpatialCompressionRatio
	return t.Spatial && (w > t.TileWidth/ss || h > t.TileHeight/ss)
}

// video is a host (B, C, T, H, W) f32 array: decoded tiles and their
// assembly. Values are representable in the compute dtype.
type video struct {
	b, c, t, h, w int
	data          []float32
}

func newVideo(b, c, t, h, w int) *video {
	return &video{b: b, c: c, t: t, h: h, w: w, data: make([]float32, b*c*t*h*w)}
}

func videoOf(x *tensor.Tensor) *video {
	v := &video{b: x.Dim(0), c: x.Dim(1), t: x.Dim(2), h: x.Dim(3), w: x.Dim(4)}
	if x.DType() == tensor.F32 {
		v.data = append([]float32(nil), tensor.Float32s(x)...)
	} else {
		v.data = tensor.Float32s(x)
	}
	return v
}

func (v *video) idx(b, c, t, y, x int) int { return (((b*v.c+c)*v.t+t)*v.h+y)*v.w + x }

// dropFirst removes the first frame.
func (v *video) dropFirst() *video {
	out := newVideo(v.b, v.c, max(v.t-1, 0), v.h, v.w)
	fs := v.h * v.w
	for bc := 0; bc < v.b*v.c; bc++ {
		copy(out.data[bc*out.t*fs:(bc+1)*out.t*fs], v.data[(bc*v.t+1)*fs:(bc+1)*v.t*fs])
	}
	return out
}

// paste copies src[.., t0:t0+nt, y0:y0+nh, x0:x0+nw] into dst at (dt, dy, dx).
func paste(dst *video, dt, dy, dx int, src *video, t0, y0, x0, nt, nh, nw int) {
	for b := 0; b < src.b; b++ {
		for c := 0; c < src.c; c++ {
			for t := 0; t < nt; t++ {
				for y := 0; y < nh; y++ {
					d := dst.idx(b, c, dt+t, dy+y, dx)
					s := src.idx(b, c, t0+t, y0+y, x0)
					copy(dst.data[d:d+nw], src.data[s:s+nw])
				}
			}
		}
	}
}

// blender computes diffusers' blend a·(1−k/e) + b·(k/e) as torch does in the
// compute dtype: each product is rounded to it, then the sum.
type blender func(float32) float32

func roundTo(dt tensor.DType) blender {
	switch dt {
	case tensor.F16:
		return tensor.RoundF16
	case tensor.BF16:
		return tensor.RoundBF16
	}
	return func(f float32) float32 { return f }
}

func (r blender) mix(a, b, wa, wb float32) float32 {
	return r(r(float32(a*wa)) + r(float32(b*wb)))
}

func weightsAt(k, e int) (wa, wb float32) {
	return float32(1 - float64(k)/float64(e)), float32(float64(k) / float64(e))
}

// blendAxis blends the last e positions of a into the first e of b along
// axis ax (2: T, 3: H, 4: W), in place on b (diffusers' blend_t/v/h). a and b
// have equal sizes on the other axes.
func (r blender) blendAxis(a, b *video, ax, extent int) {
	na, nb := a.dim(ax), b.dim(ax)
	e := min(na, nb, extent)
	for k := 0; k < e; k++ {
		wa, wb := weightsAt(k, e)
		ka := na - e + k
		for bi := 0; bi < b.b; bi++ {
			for c := 0; c < b.c; c++ {
				switch ax {
				case 2:
					da, db := a.idx(bi, c, ka, 0, 0), b.idx(bi, c, k, 0, 0)
					r.mixRow(a.data[da:da+b.h*b.w], b.data[db:db+b.h*b.w], wa, wb)
				case 3:
					for t := 0; t < b.t; t++ {
						da, db := a.idx(bi, c, t, ka, 0), b.idx(bi, c, t, k, 0)
						r.mixRow(a.data[da:da+b.w], b.data[db:db+b.w], wa, wb)
					}
				case 4:
					for t := 0; t < b.t; t++ {
						for y := 0; y < b.h; y++ {
							i := b.idx(bi, c, t, y, k)
							b.data[i] = r.mix(a.data[a.idx(bi, c, t, y, ka)], b.data[i], wa, wb)
						}
					}
				}
			}
		}
	}
}

func (r blender) mixRow(a, b []float32, wa, wb float32) {
	for i := range b {
		b[i] = r.mix(a[i], b[i], wa, wb)
	}
}

func (v *video) dim(ax int) int {
	switch ax {
	case 0:
		return v.b
	case 1:
		return v.c
	case 2:
		return v.t
	case 3:
		return v.h
	}
	return v.w
}

func (v *video) tensor() *tensor.Tensor { return tensor.FromFloat32(v.data, v.b, v.c, v.t, v.h, v.w) }

// tileFn runs the model on the box [t0,t1)×[h0,h1)×[w0,w1) of its input and
// returns the result on the host.
type tileFn func(t0, t1, h0, h1, w0, w1 int) *video

// spatialTiles is diffusers' tiled_decode / tiled_encode over frames
// [t0,t1): tiles of tin input pixels every sin, each giving tout output
// pixels; blended over bout output pixels and cut to sout; the result is
// cropped to (outH, outW). Blending needs only the row above and the tile
// to the left, so tiles are assembled as they arrive (same order and
// arithmetic as diffusers' two passes).
func (r blender) spatialTiles(run tileFn, t0, t1, h, w int, tinH, tinW, sinH, sinW, soutH, soutW, boutH, boutW, outH, outW int) *video {
	var out *video
	var above []*video
	y := 0
	for i := 0; i < h; i += sinH {
		var row []*video
		x, keptH := 0, 0
		for j := 0; j < w; j += sinW {
			tile := run(t0, t1, i, min(i+tinH, h), j, min(j+tinW, w))
			if out == nil {
				out = newVideo(tile.b, tile.c, tile.t, outH, outW)
			}
			if above != nil {
				r.blendAxis(above[len(row)], tile, 3, boutH)
			}
			if len(row) > 0 {
				r.blendAxis(row[len(row)-1], tile, 4, boutW)
			}
			kh, kw := min(tile.h, soutH), min(tile.w, soutW)
			if nh, nw := min(kh, outH-y), min(kw, outW-x); nh > 0 && nw > 0 {
				paste(out, 0, y, x, tile, 0, 0, 0, tile.t, nh, nw)
			}
			x += kw
			keptH = kh
			row = append(row, tile)
		}
		y += keptH
		above = row
	}
	return out
}

// temporalTiles is diffusers' _temporal_tiled_decode / _temporal_tiled_encode
// loop: inputs [i, i+tin) every sin frames run through tile (which may tile
// spatially), the first output frame of every tile but the first dropped,
// blended over bout frames and cut to sout (sout+1 for the first); the
// result has outT frames. Tiles are assembled as they arrive.
func (r blender) temporalTiles(tile func(t0, t1 int) *video, n, tin, sin, sout, bout, outT int) *video {
	var out, prev *video
	t := 0
	for i := 0; i < n; i += sin {
		d := tile(i, min(i+tin, n))
		keep := sout + 1
		if i > 0 {
			d = d.dropFirst()
			r.blendAxis(prev, d, 2, bout)
			keep = sout
		} else {
			out = newVideo(d.b, d.c, outT, d.h, d.w)
		}
		k := min(keep, d.t)
		if m := min(k, outT-t); m > 0 {
			paste(out, t, 0, 0, d, 0, 0, 0, m, d.h, d.w)
		}
		t += k
		prev = d
	}
	return out
}
