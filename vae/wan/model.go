package wan

import (
	"fmt"
	"slices"

	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/weights"
)

// layer is one entry of the encoder's flat down_blocks list.
type layer interface {
	forward(s *tensor.Scope, f *featCache, x *tensor.Tensor) *tensor.Tensor
}

// encoder is WanEncoder3d followed by quant_conv.
type encoder struct {
	convIn  *causalConv
	down    []layer
	mid     *midBlock
	normOut rmsNorm
	convOut *causalConv
	quant   *conv
	taps    tapUse // for tests
}

func newEncoder(p *weights.Builder, c *Config) *encoder {
	dims := []int{c.BaseDim}
	for _, m := range c.DimMult {
		dims = append(dims, c.BaseDim*m)
	}
	e := &encoder{convIn: newCausalConv(p, "encoder.conv_in", c.InChannels, dims[0])}
	k := 0
	name := func() string { k++; return fmt.Sprintf("encoder.down_blocks.%d", k-1) }
	for i := range c.DimMult {
		in, out := dims[i], dims[i+1]
		for j := 0; j < c.NumResBlocks; j++ {
			e.down = append(e.down, newResnet(p, name(), in, out))
			in = out
		}
		if i != len(c.DimMult)-1 {
			e.down = append(e.down, newResample(p, name(), out, false, c.TemperalDownsample[i]))
		}
	}
	last := dims[len(dims)-1]
	e.mid = newMidBlock(p, "encoder.mid_block", last)
	e.normOut = newRMSNorm(p, "encoder.norm_out", last, false)
	e.convOut = newCausalConv(p, "encoder.conv_out", last, 2*c.ZDim)
	e.quant = newConv(p, "quant_conv", 2*c.ZDim, 2*c.ZDim, 1, 1, 1, [3]int{1, 1, 1})
	return e
}

// forward runs one chunk x (B, C, 1 or 4, H, W) through the encoder and
// quant_conv, channels-last between the two moves.
func (e *encoder) forward(s *tensor.Scope, f *featCache, x *tensor.Tensor) *tensor.Tensor {
	f.chunk()
	xl := s.Permute(x, 0, 2, 3, 4, 1)
	s.Free(x) // the chunk's channels-first frames, when the scope made them
	x = e.convIn.forward(s, f, xl)
	for _, l := range e.down {
		x = l.forward(s, f, x)
	}
	x = e.mid.forward(s, f, x)
	h := e.convOut.forwardNormed(s, f, e.normOut, x, true)
	q := e.quant.run(s, h, tensor.Padding{}, true)
	out := s.Permute(q, 0, 4, 1, 2, 3)
	s.Free(q)
	return out
}

// decoder is post_quant_conv followed by WanDecoder3d.
type decoder struct {
	postQuant *conv
	convIn    *causalConv
	mid       *midBlock
	blocks    []*upBlock
	normOut   rmsNorm
	convOut   *causalConv
	// tailFrom is the first up block after the last temporal upsampler
	// (0: none); wholeChunk runs the tail on the whole chunk instead, and
	// taps says when causal convs run by their temporal taps (both for
	// tests).
	tailFrom   int
	wholeChunk bool
	taps       tapUse
}

type upBlock struct {
	resnets []*resnet
	up      *resample // nil in the last block
}

func newDecoder(p *weights.Builder, c *Config) *decoder {
	base := c.decoderBase()
	n := len(c.DimMult)
	dims := []int{base * c.DimMult[n-1]}
	for i := n - 1; i >= 0; i-- {
		dims = append(dims, base*c.DimMult[i])
	}
	d := &decoder{
		postQuant: newConv(p, "post_quant_conv", c.ZDim, c.ZDim, 1, 1, 1, [3]int{1, 1, 1}),
		convIn:    newCausalConv(p, "decoder.conv_in", c.ZDim, dims[0]),
		mid:       newMidBlock(p, "decoder.mid_block", dims[0]),
	}
	for i := 0; i < n; i++ {
		in, out := dims[i], dims[i+1]
		if i > 0 {
			in /= 2 // the previous upsampler halved the channels
		}
		name := fmt.Sprintf("decoder.up_blocks.%d", i)
		b := &upBlock{}
		for j := 0; j < c.NumResBlocks+1; j++ {
			b.resnets = append(b.resnets, newResnet(p, fmt.Sprintf("%s.resnets.%d", name, j), in, out))
			in = out
		}
		if i != n-1 {
			// temperal_upsample is temperal_downsample reversed.
			b.up = newResample(p, name+".upsamplers.0", out, true, c.TemperalDownsample[n-2-i])
			if b.up.temporal {
				d.tailFrom = i + 1
			}
		}
		d.blocks = append(d.blocks, b)
	}
	d.normOut = newRMSNorm(p, "decoder.norm_out", dims[n], false)
	d.convOut = newCausalConv(p, "decoder.conv_out", dims[n], c.OutChannels)
	// The tail runs a frame at a time: its causal convs keep their taps.
	if d.tailFrom > 0 {
		for i := d.tailFrom; i < n; i++ {
			for j, r := range d.blocks[i].resnets {
				name := fmt.Sprintf("decoder.up_blocks.%d.resnets.%d", i, j)
				r.conv1.keepTaps(p, name+".conv1")
				r.conv2.keepTaps(p, name+".conv2")
			}
		}
		d.convOut.keepTaps(p, "decoder.conv_out")
	}
	return d
}

// forward decodes one latent frame x after post_quant_conv, channels-last
// (B, 1, h, w, z_dim), with the cache of the frames before it, handing the
// pixels (B, out, T, H, W) to emit (which must not keep them: they are
// freed after).
//
// From the last temporal upsampler's spatial half on, every layer is per
// frame or a causal conv with the cache, so from there the chunk's frames
// run one at a time (the tail): each output frame is what diffusers
// computes for it, and the full-resolution activations are a quarter of a
// 4-frame chunk's. The cache ends holding the same frames, as each single
// frame's tail takes the previous frame in front.
func (d *decoder) forward(s *tensor.Scope, f *featCache, x *tensor.Tensor, emit func(*tensor.Tensor)) {
	f.chunk()
	x = d.convIn.forward(s, f, x)
	x = d.mid.forward(s, f, x)
	for i, b := range d.blocks {
		if i == d.tailFrom-1 && !d.wholeChunk {
			for _, r := range b.resnets {
				x = r.forward(s, f, x)
			}
			x = b.up.timeUp(s, f, x)
			start := f.idx
			frames := []*tensor.Tensor{x}
			if x.Dim(1) > 1 {
				// Apart, so that each frame's memory goes once it has run.
				frames = s.Split(x, 1, slices.Repeat([]int{1}, x.Dim(1))...)
				s.Free(x)
			}
			for _, fr := range frames {
				f.idx = start
				y := d.tail(s, f, b.up.spatial(s, fr), i+1)
				emit(y)
				s.Free(y)
			}
			return
		}
		x = b.forward(s, f, x)
	}
	y := d.head(s, f, x)
	emit(y)
	s.Free(y)
}

func (b *upBlock) forward(s *tensor.Scope, f *featCache, x *tensor.Tensor) *tensor.Tensor {
	for _, r := range b.resnets {
		x = r.forward(s, f, x)
	}
	if b.up != nil {
		x = b.up.forward(s, f, x)
	}
	return x
}

// tail runs up blocks from.. and the head.
func (d *decoder) tail(s *tensor.Scope, f *featCache, x *tensor.Tensor, from int) *tensor.Tensor {
	for _, b := range d.blocks[from:] {
		x = b.forward(s, f, x)
	}
	return d.head(s, f, x)
}

// head is norm_out, SiLU and conv_out, its pixels moved channels-first.
func (d *decoder) head(s *tensor.Scope, f *featCache, x *tensor.Tensor) *tensor.Tensor {
	h := d.convOut.forwardNormed(s, f, d.normOut, x, true)
	out := s.Permute(h, 0, 4, 1, 2, 3)
	s.Free(h)
	return out
}
