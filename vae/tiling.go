package vae

import (
	"fmt"
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
				r.blendV(above[len(row)], tile, boutH)
			}
			if len(row) > 0 {
				r.blendH(row[len(row)-1], tile, boutW)
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
			r.blendT(prev, d, bout)
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
