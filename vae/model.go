package vae

import (
	"fmt"

	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/weights"
)

// encoder is HunyuanVideoEncoder3D followed by quant_conv.
type encoder struct {
	convIn  *causalConv
	blocks  []*block
	mid     *midBlock
	normOut groupNorm
	convOut *causalConv
	quant   *causalConv
}

// block is a down or up block: its resnets, then its resampler.
type block struct {
	resnets  []*resnet
	resample interface { // nil in the last block
		forward(s *tensor.Scope, x *tensor.Tensor) *tensor.Tensor
	}
}

func (b *block) forward(s *tensor.Scope, x *tensor.Tensor) *tensor.Tensor {
	for _, r := range b.resnets {
		x = r.forward(s, x)
	}
	if b.resample != nil {
		x = b.resample.forward(s, x)
	}
	return x
}

func newEncoder(p *weights.Builder, c *Config) *encoder {
	g := c.NormNumGroups
	ch := c.BlockOutChannels
	e := &encoder{convIn: newCausalConv(p, "encoder.conv_in", c.InChannels, ch[0], 3, [3]int{1, 1, 1})}
	out := ch[0]
	for i := range ch {
		in := out
		out = ch[i]
		name := fmt.Sprintf("encoder.down_blocks.%d", i)
		b := &block{resnets: newResnets(p, name, c.LayersPerBlock, in, out, g)}
		if sp, tm := c.resample(i); sp || tm {
			stride := [3]int{1, 1, 1}
			if sp {
				stride[1], stride[2] = 2, 2
			}
			if tm {
				stride[0] = 2
			}
			b.resample = newCausalConv(p, name+".downsamplers.0.conv", out, out, 3, stride)
		}
		e.blocks = append(e.blocks, b)
	}
	last := ch[len(ch)-1]
	e.mid = newMidBlock(p, "encoder.mid_block", last, g, c.MidBlockAddAttention)
	e.normOut = newGroupNorm(p, "encoder.conv_norm_out", last, g)
	e.convOut = newCausalConv(p, "encoder.conv_out", last, 2*c.LatentChannels, 3, [3]int{1, 1, 1})
	e.quant = newPlainConv(p, "quant_conv", 2*c.LatentChannels, 2*c.LatentChannels)
	return e
}

// forward maps x (B, C, T, H, W) to the moments (B, 2·latent, T', H/8, W/8).
func (e *encoder) forward(s *tensor.Scope, x *tensor.Tensor) *tensor.Tensor {
	x = e.convIn.forward(s, x)
	for _, b := range e.blocks {
		x = b.forward(s, x)
	}
	x = e.mid.forward(s, x)
	h := s.GroupNormSiLU(x, e.normOut.w, e.normOut.b, e.normOut.groups, normEps)
	s.Free(x)
	h = e.convOut.forward(s, h)
	return e.quant.forward(s, h)
}

// decoder is post_quant_conv followed by HunyuanVideoDecoder3D.
type decoder struct {
	postQuant *causalConv
	convIn    *causalConv
	mid       *midBlock
	blocks    []*block
	normOut   groupNorm
	convOut   *causalConv
}

func newDecoder(p *weights.Builder, c *Config) *decoder {
	g := c.NormNumGroups
	ch := c.BlockOutChannels
	last := ch[len(ch)-1]
	d := &decoder{
		postQuant: newPlainConv(p, "post_quant_conv", c.LatentChannels, c.LatentChannels),
		convIn:    newCausalConv(p, "decoder.conv_in", c.LatentChannels, last, 3, [3]int{1, 1, 1}),
		mid:       newMidBlock(p, "decoder.mid_block", last, g, c.MidBlockAddAttention),
	}
	out := last
	for i := range ch {
		in := out
		out = ch[len(ch)-1-i]
		name := fmt.Sprintf("decoder.up_blocks.%d", i)
		b := &block{resnets: newResnets(p, name, c.LayersPerBlock+1, in, out, g)}
		if sp, tm := c.resample(i); sp || tm {
			b.resample = &upsample{
				conv:    newCausalConv(p, name+".upsamplers.0.conv", out, out, 3, [3]int{1, 1, 1}),
				spatial: sp, temporal: tm,
			}
		}
		d.blocks = append(d.blocks, b)
	}
	d.normOut = newGroupNorm(p, "decoder.conv_norm_out", ch[0], g)
	d.convOut = newCausalConv(p, "decoder.conv_out", ch[0], c.OutChannels, 3, [3]int{1, 1, 1})
	return d
}

// forward maps z (B, latent, T, h, w) to (B, out, 4T−3, 8h, 8w).
func (d *decoder) forward(s *tensor.Scope, z *tensor.Tensor) *tensor.Tensor {
	x := d.postQuant.forward(s, z)
	x = d.convIn.forward(s, x)
	x = d.mid.forward(s, x)
	for _, b := range d.blocks {
		x = b.forward(s, x)
	}
	h := s.GroupNormSiLU(x, d.normOut.w, d.normOut.b, d.normOut.groups, normEps)
	s.Free(x)
	return d.convOut.forward(s, h)
}
