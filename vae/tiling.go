package vae

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/framepack-go/framepack/vae/internal/tiles"
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

// ParseTiling reads a tiling as the commands write it: framewise
// (DefaultTiling), none (untiled), spatial:TILE:STRIDE (SpatialTiling in
// pixels; spatial alone is 256:192), or auto, which leaves the tiling to
// the planner (Plan) and returns auto true. Its errors read after the
// option's name: `--tiling` + `"x": want …`.
func ParseTiling(s string) (t Tiling, auto bool, err error) {
	switch {
	case s == "framewise":
		return DefaultTiling(), false, nil
	case s == "none":
		return Tiling{}, false, nil
	case s == "auto":
		return Tiling{}, true, nil
	case strings.HasPrefix(s, "spatial"):
		tile, stride := 256, 192
		if parts := strings.Split(s, ":"); len(parts) == 3 {
			a, err1 := strconv.Atoi(parts[1])
			b, err2 := strconv.Atoi(parts[2])
			if err1 != nil || err2 != nil {
				return Tiling{}, false, fmt.Errorf("%q: want spatial:TILE:STRIDE in pixels", s)
			}
			// Zero would silently become the default 256/192.
			if a <= 0 || b <= 0 || b >= a || a%8 != 0 || b%8 != 0 {
				return Tiling{}, false, fmt.Errorf("%q: want spatial:TILE:STRIDE in pixels, multiples of 8 with 0 < STRIDE < TILE (spatial alone: 256:192)", s)
			}
			tile, stride = a, b
		} else if s != "spatial" {
			return Tiling{}, false, fmt.Errorf("%q: want spatial:TILE:STRIDE in pixels", s)
		}
		return SpatialTiling(tile, stride), false, nil
	}
	return Tiling{}, false, fmt.Errorf("%q: want framewise, spatial:TILE:STRIDE, none or auto", s)
}

func (t Tiling) normalized() Tiling {
	if t.TileFrames == 0 {
		t.TileFrames = 16
	}
	if t.TileFrameStride == 0 {
		t.TileFrameStride = 12
	}
	tiles.DefaultSize(&t.TileHeight, &t.TileWidth, &t.TileStrideHeight, &t.TileStrideWidth)
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

// size is the spatial tile size.
func (t Tiling) size() tiles.Size {
	return tiles.Size{TileHeight: t.TileHeight, TileWidth: t.TileWidth, StrideHeight: t.TileStrideHeight, StrideWidth: t.TileStrideWidth}
}
