package vae

import (
	"fmt"
	"math"

	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/weights"
)

// Every forward below consumes its input: it frees the input (when the
// scope owns it) as soon as the input is dead, so a decode holds only what it
// still needs. Callers that need a tensor afterwards must not pass it.

// causalConv is HunyuanVideoCausalConv3d: replicate padding of kT−1 frames in
// front and k/2 pixels on each side, then an unpadded convolution. A plain
// conv (quant_conv, post_quant_conv) has causal == false and no padding.
type causalConv struct {
	w, b   *tensor.Tensor
	k      int
	stride [3]int
	causal bool
}

func newCausalConv(p *weights.Builder, name string, cin, cout, k int, stride [3]int) *causalConv {
	return &causalConv{
		w: p.Get(name+".conv.weight", cout, cin, k, k, k), b: p.Get(name+".conv.bias", cout),
		k: k, stride: stride, causal: true,
	}
}

func newPlainConv(p *weights.Builder, name string, cin, cout int) *causalConv {
	return &causalConv{
		w: p.Get(name+".weight", cout, cin, 1, 1, 1), b: p.Get(name+".bias", cout),
		k: 1, stride: [3]int{1, 1, 1},
	}
}

func (c *causalConv) forward(s *tensor.Scope, x *tensor.Tensor) *tensor.Tensor {
	return c.run(s, x, true)
}

// run is forward; consume says whether x is freed. The causal padding goes
// through Scope.Conv3dPadded: a backend that convolves through a padding
// (the GPU's conv3d chain) reads x itself, others get a padded copy.
func (c *causalConv) run(s *tensor.Scope, x *tensor.Tensor, consume bool) *tensor.Tensor {
	if c.causal && c.k > 1 {
		return s.Conv3dPadded(x, c.w, c.b, c.stride, c.padding(), consume)
	}
	y := s.Conv3d(x, c.w, c.b, c.stride, [3]int{})
	if consume {
		s.Free(x)
	}
	return y
}

// readsPadded reports whether be convolves through a padding without a
// padded copy (what the peak-memory model must assume).
func readsPadded(be tensor.Backend) bool {
	_, ok := tensor.As[tensor.PaddedConv](be)
	return ok
}

// padding is the causal padding: kT−1 frames in front, k/2 pixels each
// side, replicated.
func (c *causalConv) padding() tensor.Padding {
	h := c.k / 2
	return tensor.Padding{Before: [3]int{c.k - 1, h, h}, After: [3]int{0, h, h}, Mode: tensor.PadReplicate}
}

// groupNorm is an affine GroupNorm (eps 1e-6).
type groupNorm struct {
	w, b   *tensor.Tensor
	groups int
}

func newGroupNorm(p *weights.Builder, name string, ch, groups int) groupNorm {
	return groupNorm{w: p.Get(name+".weight", ch), b: p.Get(name+".bias", ch), groups: groups}
}

// resnet is HunyuanVideoResnetBlockCausal3D:
// conv2(SiLU(GN2(conv1(SiLU(GN1(x)))))) + shortcut(x).
type resnet struct {
	norm1, norm2 groupNorm
	conv1, conv2 *causalConv
	shortcut     *causalConv // 1×1×1 causal conv when channels change
}

// newResnets reads a block's n resnets, name.resnets.0 to n−1: the first
// takes cin channels to cout, the others keep cout.
func newResnets(p *weights.Builder, name string, n, cin, cout, groups int) []*resnet {
	rs := make([]*resnet, n)
	for j := range rs {
		rs[j] = newResnet(p, fmt.Sprintf("%s.resnets.%d", name, j), cin, cout, groups)
		cin = cout
	}
	return rs
}

func newResnet(p *weights.Builder, name string, cin, cout, groups int) *resnet {
	r := &resnet{
		norm1: newGroupNorm(p, name+".norm1", cin, groups),
		conv1: newCausalConv(p, name+".conv1", cin, cout, 3, [3]int{1, 1, 1}),
		norm2: newGroupNorm(p, name+".norm2", cout, groups),
		conv2: newCausalConv(p, name+".conv2", cout, cout, 3, [3]int{1, 1, 1}),
	}
	if cin != cout {
		r.shortcut = newCausalConv(p, name+".conv_shortcut", cin, cout, 1, [3]int{1, 1, 1})
	}
	return r
}

func (r *resnet) forward(s *tensor.Scope, x *tensor.Tensor) *tensor.Tensor {
	res := x
	if r.shortcut != nil {
		// The shortcut first: x (the wider tensor) is then dead after the
		// first norm instead of living through both convs.
		res = r.shortcut.run(s, x, false)
	}
	h := s.GroupNormSiLU(x, r.norm1.w, r.norm1.b, r.norm1.groups, normEps)
	if res != x {
		s.Free(x)
	}
	h = r.conv1.forward(s, h)
	g := s.GroupNormSiLU(h, r.norm2.w, r.norm2.b, r.norm2.groups, normEps)
	s.Free(h)
	h = r.conv2.forward(s, g)
	out := s.Add(h, res)
	s.Free(h, res)
	return out
}

// attention is the mid block's single-head self-attention over all T·H·W
// positions with a frame-causal mask (a position sees every position of its
// own and earlier frames), GroupNorm in front and a residual connection.
type attention struct {
	norm             groupNorm
	q, k, v, out     *tensor.Tensor // weights (C, C)
	qb, kb, vb, outb *tensor.Tensor
}

func newAttention(p *weights.Builder, name string, ch, groups int) *attention {
	return &attention{
		norm: newGroupNorm(p, name+".group_norm", ch, groups),
		q:    p.Get(name+".to_q.weight", ch, ch), qb: p.Get(name+".to_q.bias", ch),
		k: p.Get(name+".to_k.weight", ch, ch), kb: p.Get(name+".to_k.bias", ch),
		v: p.Get(name+".to_v.weight", ch, ch), vb: p.Get(name+".to_v.bias", ch),
		out: p.Get(name+".to_out.0.weight", ch, ch), outb: p.Get(name+".to_out.0.bias", ch),
	}
}

func (a *attention) forward(s *tensor.Scope, x *tensor.Tensor) *tensor.Tensor {
	b, c, t, h, w := x.Dim(0), x.Dim(1), x.Dim(2), x.Dim(3), x.Dim(4)
	l := t * h * w
	// GroupNorm over (B, C, L) is the same as over (B, C, T, H, W).
	n := s.GroupNorm(x, a.norm.w, a.norm.b, a.norm.groups, normEps)
	tok := s.Transpose(n.Reshape(b, c, l), 1, 2) // (B, L, C)
	s.Free(n)
	q := s.Linear(tok, a.q, a.qb)
	k := s.Linear(tok, a.k, a.kb)
	v := s.Linear(tok, a.v, a.vb)
	s.Free(tok)
	o := frameCausalAttention(s, q, k, v, t, h*w)
	s.Free(q, k, v)
	p := s.Linear(o.Reshape(b, l, c), a.out, a.outb)
	s.Free(o)
	y := s.Transpose(p, 1, 2) // (B, C, L)
	s.Free(p)
	out := s.Add(y.Reshape(b, c, t, h, w), x)
	s.Free(y, x)
	return out
}

// frameCausalAttention is single-head attention softmax(q·kᵀ/√C)·v on q,
// k, v (B, T·HW, C) in which a token sees every token of its own and the
// earlier frames. It runs one query frame at a time: the keys of frames
// 0…f are all visible to frame f, so each frame is two plain matrix
// products (the vendor BLAS) and a softmax, whatever C is — the VAE's
// C = 512 is beyond attention kernels' head sizes. The scores of one frame,
// HW × (f+1)·HW, are the largest temporary.
func frameCausalAttention(s *tensor.Scope, q, k, v *tensor.Tensor, t, hw int) *tensor.Tensor {
	l, c := q.Dim(1), q.Dim(2)
	scale := float32(1 / math.Sqrt(float64(c)))
	outs := make([]*tensor.Tensor, t)
	for f := 0; f < t; f++ {
		n := (f + 1) * hw
		qf := q
		if t > 1 {
			qf = s.Slice(q, 1, f*hw, (f+1)*hw)
		}
		kf, vf := k, v
		if n < l {
			kf, vf = s.Slice(k, 1, 0, n), s.Slice(v, 1, 0, n)
		}
		sc := s.ScaledMatMul(qf, kf, false, true, scale)
		if qf != q {
			s.Free(qf)
		}
		if kf != k {
			s.Free(kf)
		}
		p := s.Softmax(sc)
		s.Free(sc)
		outs[f] = s.MatMul(p, vf, false, false)
		s.Free(p)
		if vf != v {
			s.Free(vf)
		}
	}
	if t == 1 {
		return outs[0]
	}
	o := s.Concat(1, outs...)
	s.Free(outs...)
	return o
}

// midBlock is resnets.0 → attentions.0 → resnets.1.
type midBlock struct {
	res0, res1 *resnet
	attn       *attention // nil without mid_block_add_attention
}

func newMidBlock(p *weights.Builder, name string, ch, groups int, addAttn bool) *midBlock {
	m := &midBlock{res0: newResnet(p, name+".resnets.0", ch, ch, groups)}
	if addAttn {
		m.attn = newAttention(p, name+".attentions.0", ch, groups)
	}
	m.res1 = newResnet(p, name+".resnets.1", ch, ch, groups)
	return m
}

func (m *midBlock) forward(s *tensor.Scope, x *tensor.Tensor) *tensor.Tensor {
	x = m.res0.forward(s, x)
	if m.attn != nil {
		x = m.attn.forward(s, x)
	}
	return m.res1.forward(s, x)
}

// upsample is HunyuanVideoUpsampleCausal3D: the first frame is upsampled in
// space only, the others by the full factor (nearest), then a causal conv.
type upsample struct {
	conv     *causalConv
	temporal bool
	spatial  bool
}

func (u *upsample) forward(s *tensor.Scope, x *tensor.Tensor) *tensor.Tensor {
	t := x.Dim(2)
	sp := 1
	if u.spatial {
		sp = 2
	}
	tm := 1
	if u.temporal {
		tm = 2
	}
	if readsPadded(s.Backend()) && u.conv.causal && u.conv.k > 1 {
		// The convolution reads x through the upsample and the padding:
		// neither the upsampled frames nor their padded copy are made.
		pad := u.conv.padding()
		pad.Upsample, pad.CausalFirst = [3]int{tm, sp, sp}, true
		return s.Conv3dPadded(x, u.conv.w, u.conv.b, u.conv.stride, pad, true)
	}
	var up *tensor.Tensor
	if t == 1 || tm == 1 {
		up = s.UpsampleNearest(x, [3]int{1, sp, sp})
		s.Free(x)
	} else {
		first := s.Slice(x, 2, 0, 1)
		rest := s.Slice(x, 2, 1, t)
		s.Free(x)
		f := s.UpsampleNearest(first, [3]int{1, sp, sp})
		s.Free(first)
		r := s.UpsampleNearest(rest, [3]int{tm, sp, sp})
		s.Free(rest)
		up = s.Concat(2, f, r)
		s.Free(f, r)
	}
	return u.conv.forward(s, up)
}
