package wan

import (
	"sync"

	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/vae/internal/tiles"
	"github.com/framepack-go/framepack/weights"
)

// The peak-memory model of a decode runs the decoder's own forward code on
// a backend that allocates nothing and computes nothing (dryBackend), and
// counts the bytes of live tensors: the model cannot drift from the code.
// Like vae.DecodePeak it predicts the scope-level peak (activations and the
// feature cache), not the weights, the caller's tensors nor a backend's
// private workspaces (nor the conv3d chain's copies for a tier that is not
// channels-last). Three frames reach the steady state: from the third
// on every cache slot holds its two frames.

// dryBuf is a pointer, so that every allocation is its own (scopes key
// their buffers by identity).
type dryBuf struct{ n int64 }

func (d *dryBuf) Bytes() int64 { return d.n }

// dryBackend is a tensor.Backend whose kernels do nothing.
type dryBackend struct {
	tensor.NoKernels
	mu         sync.Mutex
	live, peak int64
}

func (d *dryBackend) Name() string { return "dry-run" }
func (d *dryBackend) Alloc(n int64) (tensor.Buffer, error) {
	d.mu.Lock()
	d.live += n
	d.peak = max(d.peak, d.live)
	d.mu.Unlock()
	return &dryBuf{n}, nil
}
func (d *dryBackend) Free(b tensor.Buffer) {
	d.mu.Lock()
	d.live -= b.Bytes()
	d.mu.Unlock()
}
func (d *dryBackend) Upload(tensor.Buffer, int64, []byte) error { return nil }

// View is a view: it holds no memory of its own.
func (d *dryBackend) View(tensor.Buffer, int64, int64) (tensor.Buffer, error) { return &dryBuf{}, nil }
func (d *dryBackend) Download([]byte, tensor.Buffer, int64) error             { return nil }

// dryLast is dryBackend convolving channels-last tensors as they are, as
// the GPU's conv3d chain does (no channels-first copies), with the GPU's
// fused kernels.
type dryLast struct{ *dryBackend }

func (d dryLast) Conv3dLast(_, _, _, _ *tensor.Tensor, _ tensor.ConvParams) error { return nil }

// The GPU's fused kernels (tensor.FusedKernels), whose memory is their
// output's alone.
func (d dryLast) LayerNormModulate(_, _, _, _ *tensor.Tensor, _ float32) error { return nil }
func (d dryLast) GatedAdd(_, _, _, _, _ *tensor.Tensor) error                  { return nil }
func (d dryLast) QKNormRoPE(_, _, _, _, _ *tensor.Tensor, _ int, _ [3]int, _, _, _, _ *tensor.Tensor, _ float32) error {
	return nil
}
func (d dryLast) ActivateColumns(tensor.UnaryOp, *tensor.Tensor, int, *tensor.Tensor, *tensor.Tensor, int, int) error {
	return nil
}
func (d dryLast) ChannelsLastRMSNorm(_, _, _ *tensor.Tensor, _ float32, _ bool) error { return nil }

// drySource allocates weights on the dry backend.
type drySource struct{ be tensor.Backend }

func (p drySource) Make(w weights.Weight) (*tensor.Tensor, error) {
	return tensor.Alloc(p.be, w.DType, w.Shape...)
}

// DecodePeak predicts the peak bytes of live tensors of Decode for latents
// of latentShape (B, z_dim, T, h, w) at tiling til, in compute dtype dt,
// including the latents' copy in dt and their f32 upload; channelsLast
// says whether the backend convolves channels-last tensors as they are (the
// GPU's conv3d chain).
func DecodePeak(cfg Config, latentShape []int, til Tiling, dt tensor.DType, channelsLast bool) int64 {
	til = til.normalized()
	b, nT, h, w := latentShape[0], latentShape[2], latentShape[3], latentShape[4]
	e := int64(dt.Size())
	zn := int64(b) * int64(cfg.ZDim) * int64(nT) * int64(h) * int64(w)
	base := zn * e
	peak := base + zn*4
	r := cfg.SpatialRatio()
	type size struct{ h, w int }
	sizes := map[size]bool{}
	if til.useDecode(r, h, w) {
		for _, b := range til.size().Decode(r, h, w).Tiles(h, w) {
			sizes[size{b[1] - b[0], b[3] - b[2]}] = true
		}
	} else {
		sizes[size{h, w}] = true
	}
	for sz := range sizes {
		peak = max(peak, base+tilePeak(cfg, b, min(nT, 3), sz.h, sz.w, dt, channelsLast))
	}
	return peak
}

// tilePeak runs n frames of a b×h×w latent tile on a dry backend.
func tilePeak(cfg Config, b, n, h, w int, dt tensor.DType, channelsLast bool) int64 {
	d := &dryBackend{}
	var be tensor.Backend = d
	if channelsLast {
		be = dryLast{d}
	}
	dec := newDecoder(weights.NewBuilder(drySource{be}, dt), &cfg)
	s := tensor.NewScope(be)
	defer s.Close()
	z := s.Empty(dt, b, cfg.ZDim, n, h, w)
	d.mu.Lock()
	d.live, d.peak = 0, 0 // weights and the latents are counted elsewhere
	d.mu.Unlock()
	if err := tensor.Catch(func() { dec.frames(s, z, n, 0, h, 0, w, func(*tensor.Tensor) {}) }); err != nil {
		panic(err) // a shape bug: the real decode would fail the same way
	}
	return d.peak
}

// DecodePeak is the package's DecodePeak for this model on its backend.
func (v *VAE) DecodePeak(latentShape []int, til Tiling) int64 {
	if v == nil {
		return 0
	}
	_, cl := tensor.As[tensor.ChannelsLastConv](v.m.Be)
	return DecodePeak(v.m.Cfg, latentShape, til, v.m.DT, cl)
}

// tilingLadder lists the tilings Plan chooses from, largest first: untiled
// (diffusers' default), then spatial tiles from 1024 down to 64 pixels with
// stride 3/4 of the tile (256/192 is enable_tiling's default).
func tilingLadder() []Tiling {
	out := []Tiling{{}}
	for _, px := range []int{1024, 768, 512, 384, 256, 192, 128, 96, 64} {
		out = append(out, SpatialTiling(px, px*3/4))
	}
	return out
}

// Plan chooses the tiling for decoding latents of latentShape within budget
// bytes of activations (the weights are already held): the first of the
// ladder whose predicted peak fits, or the smallest when none does.
func (v *VAE) Plan(latentShape []int, budget int64) (DecodeOptions, int64) {
	if v == nil {
		return DecodeOptions{}, 0
	}
	t, p := tiles.Choose(tilingLadder(), func(t Tiling) int64 { return v.DecodePeak(latentShape, t) }, budget)
	return DecodeOptions{Tiling: t}, p
}

// shrink is the largest tiling of the ladder predicted to need less memory
// than cur, for a retry after an out-of-memory failure.
func (v *VAE) shrink(latentShape []int, cur Tiling) (Tiling, bool) {
	return tiles.Smaller(tilingLadder(), func(t Tiling) int64 { return v.DecodePeak(latentShape, t) }, cur)
}
