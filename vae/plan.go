package vae

import (
	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/vae/internal/tiles"
)

// The peak-memory model of a decode. It follows the decoder's forward op by
// op and counts what the scope allocates and frees (every forward consumes
// its input, see layers.go), so it predicts the scope-level peak: the bytes
// of live tensors, at their largest. It does not know the backend's private
// workspaces (a GPU conv's scratch, attention blocks), the weights, nor the
// caller's tensors: the budget given to PlanDecode is what is left for the
// decode's activations after those.
//
// Two variants: on a plain backend every causal convolution makes a padded
// copy of its input (and the upsamplers their upsampled frames); on one
// that convolves through the padding (the GPU's conv3d chain,
// Conv3dPadded) neither exists, and VAE.DecodePeak and VAE.Plan use that
// model. With copies, the largest term for the released model is the last
// up block's first resnet at full resolution: its shortcut output (128
// channels), the GroupNorm output and its padded copy (256 channels each)
// are alive together — about 640 channels' worth of full-resolution frames
// of a tile. (Running the shortcut first lets the 256-channel input die at
// the norm.)

type shape5 struct{ b, c, t, h, w int }

func (s shape5) n() int64 { return int64(s.b) * int64(s.c) * int64(s.t) * int64(s.h) * int64(s.w) }

type memSim struct {
	e          int64 // bytes per element
	live, peak int64
	// fusedPad: the backend convolves through the causal padding (no
	// padded copy; see causalConv.run).
	fusedPad bool
}

func (m *memSim) alloc(s shape5) {
	m.live += s.n() * m.e
	m.peak = max(m.peak, m.live)
}

func (m *memSim) free(s shape5) { m.live -= s.n() * m.e }

// conv mirrors causalConv.forward; owned says whether x is freed.
func (m *memSim) conv(x shape5, cout, k int, stride [3]int, causal, owned bool) shape5 {
	in, inOwned := x, owned
	padded := x
	if causal && k > 1 {
		padded = shape5{x.b, x.c, x.t + k - 1, x.h + 2*(k/2), x.w + 2*(k/2)}
		if !m.fusedPad { // the padded copy
			in = padded
			m.alloc(in)
			if owned {
				m.free(x)
			}
			inOwned = true
		}
	}
	out := shape5{x.b, cout, (padded.t-k)/stride[0] + 1, (padded.h-k)/stride[1] + 1, (padded.w-k)/stride[2] + 1}
	m.alloc(out)
	if inOwned {
		m.free(in)
	}
	return out
}

var one3 = [3]int{1, 1, 1}

func (m *memSim) resnet(x shape5, cout int) shape5 {
	res := x
	if x.c != cout {
		res = m.conv(x, cout, 1, one3, true, false)
	}
	m.alloc(x) // GroupNormSiLU
	if x.c != cout {
		m.free(x)
	}
	h := m.conv(x, cout, 3, one3, true, true)
	m.alloc(h) // GroupNormSiLU
	m.free(h)
	h = m.conv(h, cout, 3, one3, true, true)
	m.alloc(h) // the sum
	m.free(h)
	m.free(res)
	return h
}

func (m *memSim) attention(x shape5) shape5 {
	m.alloc(x) // GroupNorm
	m.alloc(x) // tokens
	m.free(x)
	m.alloc(x) // q, k, v
	m.alloc(x)
	m.alloc(x)
	m.free(x) // tokens
	// frameCausalAttention, one query frame at a time.
	frames := func(n int) shape5 { return shape5{x.b, x.c, n, x.h, x.w} }
	hw := x.h * x.w
	for f := 0; f < x.t; f++ {
		n := f + 1
		if x.t > 1 {
			m.alloc(frames(1)) // the frame's queries
		}
		if n < x.t {
			m.alloc(frames(n)) // keys and values of frames 0…f
			m.alloc(frames(n))
		}
		sc := shape5{x.b, 1, 1, hw, n * hw}
		m.alloc(sc) // scores
		if x.t > 1 {
			m.free(frames(1))
		}
		if n < x.t {
			m.free(frames(n))
		}
		m.alloc(sc) // softmax
		m.free(sc)
		m.alloc(frames(1)) // the frame's output
		m.free(sc)
		if n < x.t {
			m.free(frames(n))
		}
	}
	if x.t > 1 {
		m.alloc(x) // the frames concatenated
		m.free(x)
	}
	m.free(x) // q, k, v
	m.free(x)
	m.free(x)
	m.alloc(x) // to_out
	m.free(x)
	m.alloc(x) // back to channels first
	m.free(x)
	m.alloc(x) // the residual sum
	m.free(x)
	m.free(x)
	return x
}

func (m *memSim) mid(c *Config, x shape5) shape5 {
	x = m.resnet(x, x.c)
	if c.MidBlockAddAttention {
		x = m.attention(x)
	}
	return m.resnet(x, x.c)
}

func (m *memSim) upsample(x shape5, spatial, temporal bool) shape5 {
	sp := 1
	if spatial {
		sp = 2
	}
	up := shape5{x.b, x.c, x.t, x.h * sp, x.w * sp}
	if m.fusedPad { // read through by the convolution, never made
		if temporal {
			up.t = 1 + (x.t-1)*2
		}
		out := shape5{x.b, x.c, up.t, up.h, up.w}
		m.alloc(out)
		m.free(x)
		return out
	}
	if x.t == 1 || !temporal {
		m.alloc(up)
		m.free(x)
	} else {
		first := shape5{x.b, x.c, 1, x.h, x.w}
		rest := shape5{x.b, x.c, x.t - 1, x.h, x.w}
		m.alloc(first)
		m.alloc(rest)
		m.free(x)
		f := shape5{x.b, x.c, 1, x.h * sp, x.w * sp}
		m.alloc(f)
		m.free(first)
		r := shape5{x.b, x.c, 2 * (x.t - 1), x.h * sp, x.w * sp}
		m.alloc(r)
		m.free(rest)
		up = shape5{x.b, x.c, 1 + r.t, x.h * sp, x.w * sp}
		m.alloc(up)
		m.free(f)
		m.free(r)
	}
	return m.conv(up, up.c, 3, one3, true, true)
}

// decoder mirrors decoder.forward on a latent z; owned says whether z is
// freed after post_quant_conv. It returns the output shape, still live.
func (m *memSim) decoder(c *Config, z shape5, owned bool) shape5 {
	ch := c.BlockOutChannels
	x := m.conv(z, c.LatentChannels, 1, one3, false, owned)
	x = m.conv(x, ch[len(ch)-1], 3, one3, true, true)
	x = m.mid(c, x)
	for i := range ch {
		out := ch[len(ch)-1-i]
		for j := 0; j < c.LayersPerBlock+1; j++ {
			x = m.resnet(x, out)
		}
		if sp, tm := c.resample(i); sp || tm {
			x = m.upsample(x, sp, tm)
		}
	}
	m.alloc(x) // GroupNormSiLU
	m.free(x)
	return m.conv(x, c.OutChannels, 3, one3, true, true)
}

// box is a latent region [t0,t1)×[h0,h1)×[w0,w1) run through the decoder.
type box struct{ t0, t1, h0, h1, w0, w1 int }

// decodeBoxes lists the decoder runs of a decode, as decodeOnce makes them.
func decodeBoxes(c *Config, nT, h, w int, til Tiling) []box {
	ss, st := c.SpatialCompressionRatio, c.TemporalCompressionRatio
	grid := til.size().Decode(ss, h, w)
	spatial := func(t0, t1 int) []box {
		var bs []box
		for _, hw := range grid.Tiles(h, w) {
			bs = append(bs, box{t0, t1, hw[0], hw[1], hw[2], hw[3]})
		}
		return bs
	}
	switch til.decodePath(c, nT, h, w) {
	case pathTemporal:
		var bs []box
		tin := til.TileFrames/st + 1
		for i := 0; i < nT; i += til.TileFrameStride / st {
			t1 := min(i+tin, nT)
			if til.spatialInTemporal(c, h, w) {
				bs = append(bs, spatial(i, t1)...)
			} else {
				bs = append(bs, box{i, t1, 0, h, 0, w})
			}
		}
		return bs
	case pathSpatial:
		return spatial(0, nT)
	}
	return []box{{0, nT, 0, h, 0, w}}
}

// DecodePeak predicts the peak bytes of live tensors of Decode for latents
// of latentShape (B, C, T, h, w) at tiling til in compute dtype dt,
// including the latents' own copy in dt and an f32 upload of them.
func DecodePeak(cfg Config, latentShape []int, til Tiling, dt tensor.DType) int64 {
	return decodePeak(cfg, latentShape, til, dt, false)
}

// DecodePeak is the package's DecodePeak for this model on its backend: a
// backend that convolves through the causal padding needs no padded copies.
func (v *VAE) DecodePeak(latentShape []int, til Tiling) int64 {
	if v == nil {
		return 0
	}
	return decodePeak(v.m.Cfg, latentShape, til, v.m.DT, readsPadded(v.m.Be))
}

func decodePeak(cfg Config, latentShape []int, til Tiling, dt tensor.DType, fusedPad bool) int64 {
	til = til.normalized()
	b, nT, h, w := latentShape[0], latentShape[2], latentShape[3], latentShape[4]
	e := int64(dt.Size())
	z := shape5{b, cfg.LatentChannels, nT, h, w}
	base := z.n() * e
	peak := base + z.n()*4 // the f32 upload and its cast, for a moment
	seen := map[box]bool{}
	for _, bx := range decodeBoxes(&cfg, nT, h, w, til) {
		key := box{0, bx.t1 - bx.t0, 0, bx.h1 - bx.h0, 0, bx.w1 - bx.w0}
		if seen[key] {
			continue
		}
		seen[key] = true
		m := &memSim{e: e, fusedPad: fusedPad}
		x := z
		owned := false
		for i, n := range [3]int{key.t1, key.h1, key.w1} {
			if n == [3]int{nT, h, w}[i] {
				continue
			}
			y := x
			switch i {
			case 0:
				y.t = n
			case 1:
				y.h = n
			case 2:
				y.w = n
			}
			m.alloc(y)
			if owned {
				m.free(x)
			}
			x, owned = y, true
		}
		m.decoder(&cfg, x, owned)
		peak = max(peak, base+m.peak)
	}
	return peak
}

// tilingLadder lists the tilings PlanDecode chooses from, largest tiles
// first: diffusers' default (frame-wise 16/12, untiled in space), then
// spatial tiles from 1024 down to 32 pixels with stride 3/4 of the tile
// (256/192 is diffusers' enable_tiling default, FramePack's low-VRAM mode),
// then shorter temporal tiles (12/8, 8/4) with the same spatial ladder.
func tilingLadder() []Tiling {
	var out []Tiling
	for _, tf := range [][2]int{{16, 12}, {12, 8}, {8, 4}} {
		base := Tiling{Framewise: true, TileFrames: tf[0], TileFrameStride: tf[1]}
		out = append(out, base.normalized())
		for _, px := range []int{1024, 768, 512, 384, 256, 192, 128, 96, 64, 32} {
			t := base
			t.Spatial = true
			t.TileHeight, t.TileWidth = px, px
			t.TileStrideHeight, t.TileStrideWidth = px*3/4, px*3/4
			out = append(out, t.normalized())
		}
	}
	return out
}

// PlanDecode chooses the tiling for decoding latents of latentShape (B, C,
// T, h, w) in dtype dt within budget bytes of activations: the first tiling
// of the ladder (see tilingLadder) whose predicted peak fits. Its result is
// identical to diffusers' decode at the same tile sizes. When nothing fits it
// returns the smallest tiling, with a planned peak above the budget.
func PlanDecode(cfg Config, latentShape []int, budget int64, dt tensor.DType) (DecodeOptions, int64) {
	return planDecode(cfg, latentShape, budget, dt, false)
}

func planDecode(cfg Config, latentShape []int, budget int64, dt tensor.DType, fusedPad bool) (DecodeOptions, int64) {
	t, p := tiles.Choose(tilingLadder(), func(t Tiling) int64 { return decodePeak(cfg, latentShape, t, dt, fusedPad) }, budget)
	return DecodeOptions{Tiling: t}, p
}

// Plan is PlanDecode for this model's config and compute dtype. The budget
// is for the decode's activations: the weights (WeightBytes) are already
// held.
func (v *VAE) Plan(latentShape []int, budget int64) (DecodeOptions, int64) {
	if v == nil {
		return DecodeOptions{}, 0
	}
	return planDecode(v.m.Cfg, latentShape, budget, v.m.DT, readsPadded(v.m.Be))
}

// shrinkTiling is the largest tiling of the ladder predicted to need less
// memory than cur, for a retry after an out-of-memory failure.
func shrinkTiling(c *Config, latentShape []int, cur Tiling, dt tensor.DType, fusedPad bool) (Tiling, bool) {
	return tiles.Smaller(tilingLadder(), func(t Tiling) int64 { return decodePeak(*c, latentShape, t, dt, fusedPad) }, cur)
}
