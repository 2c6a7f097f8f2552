package tiles

// Grid is a spatial tiling as diffusers' tiled_decode and tiled_encode run
// it: input tiles of InH×InW every StrideH×StrideW, each blended with the
// (already blended) tile above over BlendH output rows and with the one to
// its left over BlendW columns, cut to KeepH×KeepW output pixels; the whole
// is cropped to OutH×OutW.
type Grid struct {
	InH, InW         int
	StrideH, StrideW int
	KeepH, KeepW     int
	BlendH, BlendW   int
	OutH, OutW       int
}

// Tiles lists the input boxes [h0,h1)×[w0,w1) of an h×w input, in the order
// Spatial runs them (rows from the top, each from the left).
func (g Grid) Tiles(h, w int) [][4]int {
	var out [][4]int
	for i := 0; i < h; i += g.StrideH {
		for j := 0; j < w; j += g.StrideW {
			out = append(out, [4]int{i, min(i+g.InH, h), j, min(j+g.InW, w)})
		}
	}
	return out
}

// Spatial runs run on every tile of an h×w input and assembles the results.
// Blending needs only the row above and the tile to the left, so tiles are
// assembled as they arrive (same order and arithmetic as diffusers' two
// passes).
func (r Blender) Spatial(run func(h0, h1, w0, w1 int) *Video, h, w int, g Grid) *Video {
	var out *Video
	var above []*Video
	y := 0
	for i := 0; i < h; i += g.StrideH {
		var row []*Video
		x, keptH := 0, 0
		for j := 0; j < w; j += g.StrideW {
			tile := run(i, min(i+g.InH, h), j, min(j+g.InW, w))
			if out == nil {
				out = New(tile.B, tile.C, tile.T, g.OutH, g.OutW)
			}
			if above != nil {
				r.BlendV(above[len(row)], tile, g.BlendH)
			}
			if len(row) > 0 {
				r.BlendH(row[len(row)-1], tile, g.BlendW)
			}
			kh, kw := min(tile.H, g.KeepH), min(tile.W, g.KeepW)
			if nh, nw := min(kh, g.OutH-y), min(kw, g.OutW-x); nh > 0 && nw > 0 {
				Paste(out, 0, y, x, tile, 0, 0, 0, tile.T, nh, nw)
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

// Temporal is diffusers' _temporal_tiled_decode / _temporal_tiled_encode
// loop: inputs [i, i+tin) of n frames every sin run through tile (which may
// tile spatially), the first output frame of every tile but the first
// dropped, blended over bout frames and cut to sout (sout+1 for the first);
// the result has outT frames. Tiles are assembled as they arrive.
func (r Blender) Temporal(tile func(t0, t1 int) *Video, n, tin, sin, sout, bout, outT int) *Video {
	var out, prev *Video
	t := 0
	for i := 0; i < n; i += sin {
		d := tile(i, min(i+tin, n))
		keep := sout + 1
		if i > 0 {
			d = d.DropFirst()
			r.BlendT(prev, d, bout)
			keep = sout
		} else {
			out = New(d.B, d.C, outT, d.H, d.W)
		}
		k := min(keep, d.T)
		if m := min(k, outT-t); m > 0 {
			Paste(out, t, 0, 0, d, 0, 0, 0, m, d.H, d.W)
		}
		t += k
		prev = d
	}
	return out
}

// Size is a spatial tiling in pixels: diffusers' tile_sample_min_height,
// _width and tile_sample_stride_height, _width.
type Size struct{ TileHeight, TileWidth, StrideHeight, StrideWidth int }

// DefaultSize gives zero sizes diffusers' defaults, the same for both VAEs:
// 256-pixel tiles every 192 pixels.
func DefaultSize(tileH, tileW, strideH, strideW *int) {
	for _, d := range []struct {
		v *int
		n int
	}{{tileH, 256}, {tileW, 256}, {strideH, 192}, {strideW, 192}} {
		if *d.v == 0 {
			*d.v = d.n
		}
	}
}

// Decode is the grid of a tiled decode of an h×w latent, r pixels a latent:
// latent tiles in, pixels out.
func (s Size) Decode(r, h, w int) Grid {
	return Grid{InH: s.TileHeight / r, InW: s.TileWidth / r, StrideH: s.StrideHeight / r, StrideW: s.StrideWidth / r,
		KeepH: s.StrideHeight, KeepW: s.StrideWidth,
		BlendH: s.TileHeight - s.StrideHeight, BlendW: s.TileWidth - s.StrideWidth,
		OutH: h * r, OutW: w * r}
}

// Encode is the grid of a tiled encode of h×w pixels, r pixels a latent:
// pixel tiles in, latents out (cropped to h/r×w/r, as diffusers does).
func (s Size) Encode(r, h, w int) Grid {
	return Grid{InH: s.TileHeight, InW: s.TileWidth, StrideH: s.StrideHeight, StrideW: s.StrideWidth,
		KeepH: s.StrideHeight / r, KeepW: s.StrideWidth / r,
		BlendH: s.TileHeight/r - s.StrideHeight/r, BlendW: s.TileWidth/r - s.StrideWidth/r,
		OutH: h / r, OutW: w / r}
}
