package vae

import (
	"context"
	"fmt"

	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/vae/internal/tiles"
)

// DecodeOptions configure Decode. The zero value decodes everything in one
// piece (no frame-wise tiles, no spatial tiles); DefaultDecode is diffusers'
// default; PlanDecode chooses tiles for a memory budget.
type DecodeOptions struct {
	Tiling
	// NoRetry makes an out-of-memory failure final instead of shrinking
	// the tiles and decoding again.
	NoRetry bool
	// Stats, when set, receives what the decode did.
	Stats *DecodeStats
	// Log, when set, receives one line per notable event (a shrink).
	Log func(format string, args ...any)
	// Context, when set, stops the decode between tiles once it is done
	// (cancelled): the decode fails with its error after at most one more
	// tile, not at the end of the video.
	Context context.Context
	// Progress, when set, is called after each tile is assembled with the
	// tiles done and the tiles of this attempt.
	Progress func(done, total int)
}

// DefaultDecode is diffusers' default decode (frame-wise on, no spatial
// tiling), what FramePack's high-VRAM mode runs.
func DefaultDecode() DecodeOptions { return DecodeOptions{Tiling: DefaultTiling()} }

// DecodeStats describe a finished decode: the tiling that produced the
// result, its decoder runs, the attempts that ran out of memory and were
// shrunk, the time.
type DecodeStats = tiles.Stats[Tiling]

// Decode decodes latents z (B, latent, T, h, w) — already divided by the
// scaling factor — into pixels (B, out, 4T−3, 8h, 8w) following diffusers'
// _decode rules for opts' tiling. The result is an f32 host tensor (Go
// memory, owned by no scope); the decode's device memory is freed when it
// returns. When a tile runs out of memory the decode starts again with the
// next smaller tiling (see PlanDecode), so the result always equals a whole
// decode at the tiling reported in opts.Stats. Latents holding NaN or Inf
// are refused, and so are pixels that come out non-finite. Errors panic
// inside s as *tensor.OpError (tensor.Catch).
func (v *VAE) Decode(s *tensor.Scope, z *tensor.Tensor, opts DecodeOptions) *tensor.Tensor {
	if v.model().Decoder() == nil {
		tensor.Fail("vae.decode", "%v", errNoPart)
	}
	if z == nil {
		tensor.Fail("vae.decode", "no latents")
	}
	if z.Rank() != 5 || z.Dim(1) != v.m.Cfg.LatentChannels || z.Numel() == 0 {
		tensor.Fail("vae.decode", "latents %v: want (B, %d, T, h, w)", z.Shape(), v.m.Cfg.LatentChannels)
	}
	til := opts.Tiling.normalized()
	out, st := tiles.Decode("vae.decode", "vae: decode", z, til, til.check(&v.m.Cfg), opts.NoRetry, opts.Log,
		func(t Tiling) (*tiles.Video, int) { return v.decodeOnce(s, z, t, opts) },
		func(t Tiling) (Tiling, bool) {
			return shrinkTiling(&v.m.Cfg, z.Shape(), t, v.m.DT, readsPadded(v.m.Be))
		})
	if opts.Stats != nil {
		*opts.Stats = st
	}
	return out.Tensor()
}

// decodeOnce runs one whole decode at tiling til. The device work runs on
// its own goroutine, tile after tile in the order the assembly takes them
// (decodeBoxes), while this goroutine blends and pastes the tiles already
// decoded: the host work hides behind the device work. The device memory is
// all freed when it returns.
func (v *VAE) decodeOnce(s *tensor.Scope, z *tensor.Tensor, til Tiling, opts DecodeOptions) (*tiles.Video, int) {
	c := &v.m.Cfg
	ss, st := c.SpatialCompressionRatio, c.TemporalCompressionRatio
	nT, h, w := z.Dim(2), z.Dim(3), z.Dim(4)
	boxes := decodeBoxes(c, nT, h, w, til)
	p := v.startTiles(s, z, boxes, opts.Context)
	defer p.stop()
	next := 0
	run := func(t0, t1, h0, h1, w0, w1 int) *tiles.Video {
		if ctx := opts.Context; ctx != nil && ctx.Err() != nil {
			panic(&tensor.OpError{Op: "vae.decode", Err: ctx.Err()})
		}
		hv := p.next()
		if b := boxes[next]; b != (box{t0, t1, h0, h1, w0, w1}) {
			panic(fmt.Sprintf("vae: tile %d is %v, the assembly wants %v", next, b, box{t0, t1, h0, h1, w0, w1}))
		}
		next++
		if opts.Progress != nil {
			opts.Progress(next, len(boxes))
		}
		return tiles.Of(hv)
	}
	r := tiles.RoundTo(v.m.DT)
	grid := til.size().Decode(ss, h, w)
	spatial := func(t0, t1 int) *tiles.Video {
		return r.Spatial(func(h0, h1, w0, w1 int) *tiles.Video { return run(t0, t1, h0, h1, w0, w1) }, h, w, grid)
	}
	var out *tiles.Video
	switch til.decodePath(c, nT, h, w) {
	case pathTemporal:
		tile := func(t0, t1 int) *tiles.Video {
			if til.spatialInTemporal(c, h, w) {
				return spatial(t0, t1)
			}
			return run(t0, t1, 0, h, 0, w)
		}
		out = r.Temporal(tile, nT, til.TileFrames/st+1, til.TileFrameStride/st,
			til.TileFrameStride, til.TileFrames-til.TileFrameStride, c.SampleFrames(nT))
	case pathSpatial:
		out = spatial(0, nT)
	default:
		out = run(0, nT, 0, h, 0, w)
	}
	return out, len(boxes)
}

// tileProducer decodes boxes on its own goroutine and hands each result
// over as a host tensor; at most one finished tile waits.
type tileProducer struct {
	tiles chan *tensor.Tensor
	quit  chan struct{}
	done  chan struct{}
	fail  any // the producer's panic (an *tensor.OpError for op failures)
}

func (v *VAE) startTiles(s *tensor.Scope, z *tensor.Tensor, boxes []box, ctx context.Context) *tileProducer {
	p := &tileProducer{tiles: make(chan *tensor.Tensor), quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		defer func() { p.fail = recover() }()
		ds := s.Child()
		defer ds.Close()
		zc := tiles.ToCompute(ds, z, v.m.DT)
		for _, b := range boxes {
			if ctx != nil && ctx.Err() != nil {
				panic(&tensor.OpError{Op: "vae.decode", Err: ctx.Err()})
			}
			out := v.decodeBox(ds, zc, b)
			select {
			case p.tiles <- out:
			case <-p.quit:
				return
			}
		}
	}()
	return p
}

// decodeBox runs the decoder on one box of zc and returns the result on the
// host (memory that no backend owns).
func (v *VAE) decodeBox(ds *tensor.Scope, zc *tensor.Tensor, b box) *tensor.Tensor {
	ts := ds.Child()
	defer ts.Close()
	out := v.m.Dec.forward(ts, tiles.SliceBox(ts, zc, b.t0, b.t1, b.h0, b.h1, b.w0, b.w1))
	if out.OnHost() { // the backend's own storage: copy it out as f32
		return tiles.Of(out).Tensor()
	}
	return tensor.ToHost(out)
}

// next is the next decoded tile; a failure of the producer is raised here.
func (p *tileProducer) next() *tensor.Tensor {
	select {
	case t := <-p.tiles:
		return t
	case <-p.done:
		if p.fail != nil {
			panic(p.fail)
		}
		panic("vae: the tile producer ended early")
	}
}

// stop ends the producer and waits until its device memory is freed.
func (p *tileProducer) stop() {
	close(p.quit)
	<-p.done
}
