package wan

import (
	"math"

	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/weights"
)

// The activations are channels-last, (B, T, H, W, C): the vendor libraries'
// fast convolution layout, so that no convolution repacks its input, and
// the RMS norms and the attention read rows of channels. Every forward below
// consumes its input (frees it when the scope owns it) as soon as it is
// dead, as in package vae; the feature cache's tensors live in the cache's
// own scope until they are replaced.

// cacheT is diffusers' CACHE_T: a causal conv keeps the last two frames of
// its input for the next chunk.
const cacheT = 2

// slot is one entry of diffusers' feat_cache: nil (first chunk), "Rep" (an
// upsampler's first chunk: no temporal upsample yet), or frames: x holds
// them in order, or, for a causal conv run by its temporal taps one frame at
// a time, ring holds the last two input frames (1, 2, H, W, C) with the
// older at index oldest (zero frames stand for those not there yet).
type slot struct {
	x      *tensor.Tensor
	rep    bool
	ring   *tensor.Tensor
	oldest int
}

// tapUse says when a causal conv of a one-frame chunk runs by its temporal
// taps (where the backend makes views).
type tapUse int

const (
	// tapsWhenLarger: when a frame of its input is larger than its weight,
	// so that the taps' copy of the weight costs less than the frames they
	// spare.
	tapsWhenLarger tapUse = iota
	tapsAlways
	tapsNever
)

// featCache is diffusers' feat_cache and feat_idx: each causal conv (and
// temporal resampler) takes the next slot in forward order every chunk.
type featCache struct {
	s     *tensor.Scope // owns the cached frames and the taps
	slots []slot
	idx   int
	use   tapUse
	taps  map[*causalConv]taps
}

// taps are a causal conv's weight (Cout, Cin, 3, kH, kW) cut along time for
// the ring: the first two taps in order and swapped, for the two frames of
// the ring as they lie, and the last tap alone, for the new frame.
type taps struct{ first, swapped, last *tensor.Tensor }

func newFeatCache(s *tensor.Scope) *featCache { return &featCache{s: s} }

// next is the slot of the next cached layer of this chunk.
func (f *featCache) next() *slot {
	if f.idx == len(f.slots) {
		f.slots = append(f.slots, slot{})
	}
	sl := &f.slots[f.idx]
	f.idx++
	return sl
}

// chunk starts a new chunk (feat_idx = [0]).
func (f *featCache) chunk() { f.idx = 0 }

// release frees every cached tensor (clear_cache) and the taps.
func (f *featCache) release() {
	for i := range f.slots {
		f.drop(&f.slots[i])
	}
	for _, t := range f.taps {
		f.s.Free(t.first, t.swapped, t.last)
	}
	f.slots, f.idx, f.taps = nil, 0, nil
}

// drop frees the slot's frames (they were copied where they are needed).
func (f *featCache) drop(sl *slot) {
	f.s.Free(sl.x, sl.ring)
	sl.x, sl.ring = nil, nil
}

// join puts the frames of a slot's ring in order in x.
func (f *featCache) join(sl *slot) {
	if sl.ring == nil {
		return
	}
	if sl.oldest == 0 {
		sl.x = sl.ring
	} else {
		newer, older := f.s.Slice(sl.ring, 1, 0, 1), f.s.Slice(sl.ring, 1, 1, 2)
		sl.x = f.s.Concat(1, older, newer)
		f.s.Free(newer, older, sl.ring)
	}
	sl.ring = nil
}

// toRing makes the slot's ring from its frames in order (zero frames in
// front of fewer than two), for the next frame like x.
func (f *featCache) toRing(sl *slot, x *tensor.Tensor) {
	if sl.ring != nil {
		return
	}
	sh := x.Shape()
	sh[1] = cacheT
	switch {
	case sl.x == nil:
		sl.ring = f.s.Zeros(x.DType(), sh...)
	case sl.x.Dim(1) < cacheT:
		sh[1] = cacheT - sl.x.Dim(1)
		z := f.s.Zeros(x.DType(), sh...)
		sl.ring = f.s.Concat(1, z, sl.x)
		f.s.Free(z)
	default:
		t := sl.x.Dim(1)
		sl.ring = f.s.Slice(sl.x, 1, t-cacheT, t)
	}
	f.s.Free(sl.x)
	sl.x, sl.oldest = nil, 0
}

// tapsOf is c's taps: those it keeps, or cut on first use.
func (f *featCache) tapsOf(c *causalConv) taps {
	if c.kept != nil {
		return *c.kept
	}
	t, ok := f.taps[c]
	if !ok {
		ax := 2 // kT
		if c.packed {
			ax = 1
		}
		t = cutTaps(f.s, c.w, ax)
		if f.taps == nil {
			f.taps = map[*causalConv]taps{}
		}
		f.taps[c] = t
	}
	return t
}

// cutTaps cuts w's taps along its time axis ax.
func cutTaps(s *tensor.Scope, w *tensor.Tensor, ax int) taps {
	w0, w1 := s.Slice(w, ax, 0, 1), s.Slice(w, ax, 1, 2)
	t := taps{first: s.Slice(w, ax, 0, 2), swapped: s.Concat(ax, w1, w0), last: s.Slice(w, ax, 2, 3)}
	s.Free(w0, w1)
	return t
}

// dropTaps frees c's taps, when made.
func (f *featCache) dropTaps(c *causalConv) {
	if t, ok := f.taps[c]; ok {
		f.s.Free(t.first, t.swapped, t.last)
		delete(f.taps, c)
	}
}

// byTaps reports whether c runs the one-frame chunk x by its taps.
func (f *featCache) byTaps(c *causalConv, x *tensor.Tensor) bool {
	if x.Dim(0) != 1 || x.Dim(1) != 1 || f.use == tapsNever {
		return false
	}
	if _, views := f.s.ViewRows(x, 0, 1); !views {
		return false
	}
	return f.use == tapsAlways || x.Numel() > c.weightNumel()
}

// set replaces the slot's frames.
func (f *featCache) set(sl *slot, x *tensor.Tensor) {
	if sl.x != nil {
		f.s.Free(sl.x)
	}
	sl.x, sl.rep = x, false
}

// tail is x's last cacheT frames, with the previous cache's last frame in
// front when x has fewer (diffusers' "cache last frame of last two chunk");
// a copy owned by the cache's scope.
func (f *featCache) tail(sl *slot, x *tensor.Tensor) *tensor.Tensor {
	t := x.Dim(1)
	last := f.s.Slice(x, 1, max(t-cacheT, 0), t)
	if last.Dim(1) < cacheT && sl.x != nil {
		prev := f.s.Slice(sl.x, 1, sl.x.Dim(1)-1, sl.x.Dim(1))
		cat := f.s.Concat(1, prev, last)
		f.s.Free(prev, last)
		return cat
	}
	return last
}

// conv is a convolution of channels-last x under a zero padding: the
// library pads what is symmetric, a padded copy the rest (the front frames
// of conv_in's and the time convolutions' first chunks, the downsamplers'
// right and bottom edges). On a backend that convolves channels-last
// tensors the weight is packed at load, (Cout, kT, kH, kW, Cin), the
// libraries' order, so no packed copy of it is kept beside it.
type conv struct {
	w, b   *tensor.Tensor // w (Cout, Cin, kT, kH, kW), or packed (Cout, kT, kH, kW, Cin)
	packed bool
	stride [3]int
}

func newConv(p *weights.Builder, name string, cout, cin, kt, kh, kw int, stride [3]int) *conv {
	c := &conv{w: p.Get(name+".weight", cout, cin, kt, kh, kw), b: p.Get(name+".bias", cout), stride: stride}
	c.pack(p, name)
	return c
}

// newConv2d is an nn.Conv2d run on every frame: its (Cout, Cin, kH, kW)
// weight as a conv3d of temporal kernel 1.
func newConv2d(p *weights.Builder, name string, cout, cin, k int, stride int) *conv {
	w := p.Get(name+".weight", cout, cin, k, k)
	if w != nil {
		w = w.Reshape(cout, cin, 1, k, k)
	}
	c := &conv{w: w, b: p.Get(name+".bias", cout), stride: [3]int{1, stride, stride}}
	c.pack(p, name)
	return c
}

// pack replaces the weight by its packed copy when the backend convolves
// channels-last tensors.
func (c *conv) pack(p *weights.Builder, name string) {
	if c.w == nil {
		return
	}
	if _, ok := tensor.As[tensor.ChannelsLastConv](c.w.Backend()); !ok {
		return
	}
	var out *tensor.Tensor
	if err := tensor.Catch(func() {
		s := tensor.NewScope(c.w.Backend())
		defer s.Close()
		out = s.Permute(c.w, 0, 2, 3, 4, 1)
		s.Keep(out)
	}); err != nil {
		p.Fail("wan vae: %s.weight: packing it channels-last: %v", name, err)
		return
	}
	p.Free(c.w)
	c.w, c.packed = p.Adopt(out), true
}

// run convolves x (B, T, H, W, Cin) padded as pad says.
func (c *conv) run(s *tensor.Scope, x *tensor.Tensor, pad tensor.Padding, consume bool) *tensor.Tensor {
	return c.with(s, x, c.w, c.b, pad, consume)
}

// with convolves x with w (c's weight or part of it, in c's layout) and
// bias.
func (c *conv) with(s *tensor.Scope, x, w, bias *tensor.Tensor, pad tensor.Padding, consume bool) *tensor.Tensor {
	if c.packed {
		return s.Conv3dLastPacked(x, w, bias, c.stride, pad, consume)
	}
	return s.Conv3dLast(x, w, bias, c.stride, pad, consume)
}

// add adds the convolution of x with w (as in with) and bias to y.
func (c *conv) add(s *tensor.Scope, y, x, w, bias *tensor.Tensor, pad tensor.Padding) {
	if c.packed {
		s.Conv3dLastAddPacked(y, x, w, bias, c.stride, pad)
	} else {
		s.Conv3dLastAdd(y, x, w, bias, c.stride, pad)
	}
}

// causalConv is WanCausalConv3d with kernel 3 and padding 1: two zero
// frames in front (fewer when cached frames stand in for them), one zero
// pixel each side.
type causalConv struct {
	conv
	// kept are the taps held in place of the weight (keepTaps), nil when
	// the weight is held.
	kept *taps
}

func newCausalConv(p *weights.Builder, name string, cin, cout int) *causalConv {
	return &causalConv{conv: *newConv(p, name, cout, cin, 3, 3, 3, [3]int{1, 1, 1})}
}

// keepTaps holds the packed weight's taps in place of it, for a convolution
// that runs one frame at a time (the decoder's tail): no decode cuts them
// again, and the weight is made from them for the rare chunk of more frames.
func (c *causalConv) keepTaps(p *weights.Builder, name string) {
	if c.w == nil || !c.packed {
		return
	}
	var t taps
	if err := tensor.Catch(func() {
		s := tensor.NewScope(c.w.Backend())
		defer s.Close()
		t = cutTaps(s, c.w, 1)
		s.Keep(t.first, t.swapped, t.last)
	}); err != nil {
		p.Fail("wan vae: %s.weight: its taps: %v", name, err)
		return
	}
	p.Free(c.w)
	c.w = nil
	t.first, t.swapped, t.last = p.Adopt(t.first), p.Adopt(t.swapped), p.Adopt(t.last)
	c.kept = &t
}

// weight is the convolution's weight, made from the kept taps when it is
// not held (temp: the caller frees it).
func (c *causalConv) weight(s *tensor.Scope) (w *tensor.Tensor, temp bool) {
	if c.kept == nil {
		return c.w, false
	}
	return s.Concat(1, c.kept.first, c.kept.last), true
}

// weightNumel is the weight's number of values.
func (c *causalConv) weightNumel() int {
	if c.kept == nil {
		return c.w.Numel()
	}
	return c.kept.first.Numel() + c.kept.last.Numel()
}

// forward runs the conv on x with the feature cache: the slot's frames go
// in front of x, and x's tail replaces them.
func (c *causalConv) forward(s *tensor.Scope, f *featCache, x *tensor.Tensor) *tensor.Tensor {
	sl := f.next()
	f.join(sl)
	tail := f.tail(sl, x)
	in, front := x, 2
	if sl.x != nil {
		prev := s.To(sl.x)
		in = s.Concat(1, prev, x)
		s.Free(x)
		front -= sl.x.Dim(1)
	}
	w, temp := c.weight(s)
	y := c.with(s, in, w, c.b, c.padding(front), true)
	if temp {
		s.Free(w)
	}
	f.set(sl, tail)
	return y
}

// forwardNormed is forward(SiLU(n(x))) with the norm written behind the
// slot's frames, so no concat copies it. With consume, x is freed (when the
// scope owns it) once normed, before the convolution runs.
func (c *causalConv) forwardNormed(s *tensor.Scope, f *featCache, n rmsNorm, x *tensor.Tensor, consume bool) *tensor.Tensor {
	return c.forwardNormedInto(s, f, n, x, consume, nil)
}

// forwardNormedInto is forwardNormed added to into (a residual, which
// becomes the result: no output of its own is made), or into a new tensor
// when into is nil.
func (c *causalConv) forwardNormedInto(s *tensor.Scope, f *featCache, n rmsNorm, x *tensor.Tensor, consume bool, into *tensor.Tensor) *tensor.Tensor {
	sl := f.next()
	if f.byTaps(c, x) {
		return c.forwardTaps(s, f, sl, n, x, consume, into)
	}
	f.join(sl)
	f.dropTaps(c) // a first one-frame chunk made them; longer chunks follow
	var prev, zeros *tensor.Tensor
	front := 2
	if sl.x != nil {
		prev = s.To(sl.x)
		front -= sl.x.Dim(1)
	}
	if front > 0 {
		// The causal zero frames go in front as frames (no padded copy of
		// the input); the cache then holds them like any other frames.
		zeros = s.Zeros(x.DType(), x.Dim(0), front, x.Dim(2), x.Dim(3), x.Dim(4))
		if prev != nil {
			zp := s.Concat(1, zeros, prev)
			s.Free(zeros)
			zeros = zp
		}
		prev, front = zeros, 0
	}
	in := s.ChannelsLastRMSNormAfter(prev, x, n.gamma, n.eps, true)
	if zeros != nil {
		s.Free(zeros)
	}
	if consume {
		s.Free(x)
	}
	w, temp := c.weight(s)
	y := into
	if y == nil {
		y = c.with(s, in, w, c.b, c.padding(front), false)
	} else {
		c.add(s, y, in, w, c.b, c.padding(front))
	}
	if temp {
		s.Free(w)
	}
	// The cached frames are in the input now: they go before the new ones
	// (the input's last cacheT frames) are copied out, so that the old and
	// the new are never held beside the convolution's operands.
	f.drop(sl)
	t := in.Dim(1)
	f.set(sl, f.s.Slice(in, 1, max(t-cacheT, 0), t))
	s.Free(in)
	return y
}

// forwardTaps is forwardNormed for a one-frame chunk x by the temporal
// taps: the first two over the ring's frames as they lie, then SiLU(n(x))
// written over the older frame (that convolution was its last reader) and
// the last tap over it, added. No frame is copied, and the input is never
// three frames at once.
func (c *causalConv) forwardTaps(s *tensor.Scope, f *featCache, sl *slot, n rmsNorm, x *tensor.Tensor, consume bool, into *tensor.Tensor) *tensor.Tensor {
	f.toRing(sl, x)
	t := f.tapsOf(c)
	pad := c.padding(0)
	o := sl.oldest
	w := t.first
	if o == 1 {
		w = t.swapped
	}
	y := into
	if y == nil {
		y = c.with(s, sl.ring, w, c.b, pad, false)
	} else {
		c.add(s, y, sl.ring, w, c.b, pad)
	}
	newest, _ := f.s.ViewRows(sl.ring, o, o+1)
	s.ChannelsLastRMSNormInto(newest, x, n.gamma, n.eps, true)
	if consume {
		s.Free(x)
	}
	c.add(s, y, newest, t.last, nil, pad)
	sl.oldest = 1 - o
	return y
}

// padding: front zero frames (two less those the cache supplied), one zero
// pixel each side.
func (c *causalConv) padding(front int) tensor.Padding {
	return tensor.Padding{Before: [3]int{front, 1, 1}, After: [3]int{0, 1, 1}, Mode: tensor.PadZeros}
}

// rmsNorm is WanRMS_norm without bias: F.normalize over the channels times
// √C·γ, which is x·rsqrt(mean(x²) + ε)·γ with ε = (1e-12)²/C standing for
// F.normalize's floor on the norm.
type rmsNorm struct {
	gamma *tensor.Tensor // (C)
	eps   float32
}

func newRMSNorm(p *weights.Builder, name string, ch int, images bool) rmsNorm {
	var g *tensor.Tensor
	if images {
		g = p.Get(name+".gamma", ch, 1, 1)
	} else {
		g = p.Get(name+".gamma", ch, 1, 1, 1)
	}
	if g != nil {
		g = g.Reshape(ch)
	}
	return rmsNorm{gamma: g, eps: float32(1e-24 / float64(ch))}
}

// resnet is WanResidualBlock: conv2(SiLU(norm2(conv1(SiLU(norm1(x)))))) +
// shortcut(x), the two 3×3×3 convs cached.
type resnet struct {
	norm1, norm2 rmsNorm
	conv1, conv2 *causalConv
	shortcut     *conv // 1×1×1 when the channels change
}

func newResnet(p *weights.Builder, name string, cin, cout int) *resnet {
	r := &resnet{
		norm1: newRMSNorm(p, name+".norm1", cin, false),
		conv1: newCausalConv(p, name+".conv1", cin, cout),
		norm2: newRMSNorm(p, name+".norm2", cout, false),
		conv2: newCausalConv(p, name+".conv2", cout, cout),
	}
	if cin != cout {
		r.shortcut = newConv(p, name+".conv_shortcut", cout, cin, 1, 1, 1, [3]int{1, 1, 1})
	}
	return r
}

func (r *resnet) forward(s *tensor.Scope, f *featCache, x *tensor.Tensor) *tensor.Tensor {
	res := x
	if r.shortcut != nil {
		res = r.shortcut.run(s, x, tensor.Padding{}, false)
	}
	h := r.conv1.forwardNormed(s, f, r.norm1, x, res != x) // x is the residual, or gone once normed
	// conv2 adds to the residual, which becomes the output.
	return r.conv2.forwardNormedInto(s, f, r.norm2, h, true, res)
}

// attention is WanAttentionBlock: single-head self-attention within each
// frame (no cache), RMS norm in front, residual.
type attention struct {
	norm       rmsNorm
	qkv, qkvb  *tensor.Tensor // (3C, C), (3C)
	proj, prjb *tensor.Tensor // (C, C), (C)
}

func newAttention(p *weights.Builder, name string, ch int) *attention {
	a := &attention{
		norm: newRMSNorm(p, name+".norm", ch, true),
		qkv:  p.Get(name+".to_qkv.weight", 3*ch, ch, 1, 1), qkvb: p.Get(name+".to_qkv.bias", 3*ch),
		proj: p.Get(name+".proj.weight", ch, ch, 1, 1), prjb: p.Get(name+".proj.bias", ch),
	}
	if a.qkv != nil && a.proj != nil { // nil: a plan, or a failed load
		a.qkv, a.proj = a.qkv.Reshape(3*ch, ch), a.proj.Reshape(ch, ch)
	}
	return a
}

func (a *attention) forward(s *tensor.Scope, x *tensor.Tensor) *tensor.Tensor {
	b, t, h, w, c := x.Dim(0), x.Dim(1), x.Dim(2), x.Dim(3), x.Dim(4)
	hw := h * w
	n := s.RMSNorm(x.Reshape(b*t, hw, c), a.norm.gamma, a.norm.eps) // one row per pixel
	qkv := s.Linear(n, a.qkv, a.qkvb)
	s.Free(n)
	parts := s.Split(qkv, 2, c, c, c)
	s.Free(qkv)
	q, k, v := parts[0], parts[1], parts[2]
	// softmax(q·kᵀ/√C)·v per frame as two BLAS products: the head size
	// (384 in the released model) is beyond the attention kernels'.
	sc := s.Empty(q.DType(), b*t, hw, hw)
	err := s.Backend().MatMul(sc, q, k, tensor.MatMulParams{Batch: b * t, M: hw, N: hw, K: c, TransB: true,
		Alpha: float32(1 / math.Sqrt(float64(c)))})
	if err != nil {
		panic(&tensor.OpError{Op: "matmul", Err: err})
	}
	s.Free(q, k)
	pr := s.Softmax(sc)
	s.Free(sc)
	o := s.MatMul(pr, v, false, false)
	s.Free(pr, v)
	y := s.Linear(o, a.proj, a.prjb)
	s.Free(o)
	out := s.Add(y.Reshape(b, t, h, w, c), x)
	s.Free(y, x)
	return out
}

// midBlock is WanMidBlock: resnets.0 → attentions.0 → resnets.1.
type midBlock struct {
	res0, res1 *resnet
	attn       *attention
}

func newMidBlock(p *weights.Builder, name string, ch int) *midBlock {
	return &midBlock{
		res0: newResnet(p, name+".resnets.0", ch, ch),
		attn: newAttention(p, name+".attentions.0", ch),
		res1: newResnet(p, name+".resnets.1", ch, ch),
	}
}

func (m *midBlock) forward(s *tensor.Scope, f *featCache, x *tensor.Tensor) *tensor.Tensor {
	x = m.res0.forward(s, f, x)
	x = m.attn.forward(s, x)
	return m.res1.forward(s, f, x)
}

// resample is WanResample: spatial ×2 up (nearest, then a 3×3 conv to half
// the channels) or down (pad right and bottom, 3×3 stride 2), each frame
// alone; the 3-D modes add time_conv, cached.
type resample struct {
	up       bool
	temporal bool
	conv     *conv // resample.1; for up, its sub-pixel form (newSubpixel)
	timeConv *conv
}

func newResample(p *weights.Builder, name string, dim int, up, temporal bool) *resample {
	r := &resample{up: up, temporal: temporal}
	if up {
		r.conv = newSubpixel(p, name+".resample.1", dim/2, dim)
		if temporal {
			r.timeConv = newConv(p, name+".time_conv", 2*dim, dim, 3, 1, 1, [3]int{1, 1, 1})
		}
	} else {
		r.conv = newConv2d(p, name+".resample.1", dim, dim, 3, 2)
		if temporal {
			r.timeConv = newConv(p, name+".time_conv", dim, dim, 3, 1, 1, [3]int{2, 1, 1})
		}
	}
	return r
}

func (r *resample) forward(s *tensor.Scope, f *featCache, x *tensor.Tensor) *tensor.Tensor {
	if r.up {
		if r.temporal {
			x = r.timeUp(s, f, x)
		}
		return r.spatial(s, x)
	}
	x = r.conv.run(s, x, tensor.Padding{After: [3]int{0, 1, 1}}, true)
	if r.temporal {
		x = r.timeDown(s, f, x)
	}
	return x
}

// spatial is an up resampler's per-frame half: nearest ×2 in H and W, then
// the 3×3 conv to half the channels. It consumes x.
//
// It runs as newSubpixel's convolution of the small frame, then moves each
// output pixel's four parities into place: the ×2 frame is never made.
func (r *resample) spatial(s *tensor.Scope, x *tensor.Tensor) *tensor.Tensor {
	b, t, h, w := x.Dim(0), x.Dim(1), x.Dim(2), x.Dim(3)
	y4 := r.conv.run(s, x, tensor.Padding{Before: [3]int{0, 1, 1}, After: [3]int{0, 1, 1}}, true) // (B, T, h, w, 4C)
	c := y4.Dim(4) / 4
	// Channels (a, b, C) at (i, j) are pixel (2i+a, 2j+b): (B·T·h, w, a, (b, C))
	// → (B·T·h, a, w, (b, C)) is (B, T, 2h, 2w, C).
	out := s.Permute(y4.Reshape(b*t*h, w, 2, 2*c), 0, 2, 1, 3)
	s.Free(y4)
	return out.Reshape(b, t, 2*h, 2*w, c)
}

// newSubpixel is nn.Upsample(scale 2, nearest) then nn.Conv2d(cin, cout, 3,
// padding 1) on every frame, as one 3×3 convolution of the small frame to
// 4·cout channels: output pixel (2i+a, 2j+b) reads small rows i−1, i (a = 0)
// or i, i+1 (a = 1), so its kernel rows are (w0, w1+w2, 0) or (0, w0+w1, w2),
// and the same for columns with b. The channels are in (a, b, cout) order;
// the bias repeats.
func newSubpixel(p *weights.Builder, name string, cout, cin int) *conv {
	w, bias := p.Get(name+".weight", cout, cin, 3, 3), p.Get(name+".bias", cout)
	c := &conv{stride: [3]int{1, 1, 1}}
	if w == nil || bias == nil {
		return c // a plan, or a failed load
	}
	var sw, sb *tensor.Tensor
	if err := tensor.Catch(func() {
		s := tensor.NewScope(w.Backend())
		defer s.Close()
		var parts []*tensor.Tensor
		for a := range 2 {
			rows := foldParity(s, w, 2, a)
			for b := range 2 {
				parts = append(parts, foldParity(s, rows, 3, b))
			}
		}
		sw = s.Concat(0, parts...).Reshape(4*cout, cin, 1, 3, 3)
		sb = s.Concat(0, bias, bias, bias, bias)
		s.Keep(sw, sb)
	}); err != nil {
		p.Fail("wan vae: %s: the sub-pixel weights: %v", name, err)
		return c
	}
	p.Free(w)
	p.Free(bias)
	c.w, c.b = p.Adopt(sw), p.Adopt(sb)
	c.pack(p, name)
	return c
}

// foldParity folds axis ax (a 3×3 kernel's row or column) of w for output
// parity a: (w0, w1+w2, 0) for a = 0, (0, w0+w1, w2) for a = 1.
func foldParity(s *tensor.Scope, w *tensor.Tensor, ax, a int) *tensor.Tensor {
	t0, t1, t2 := s.Slice(w, ax, 0, 1), s.Slice(w, ax, 1, 2), s.Slice(w, ax, 2, 3)
	z := s.Zeros(w.DType(), t0.Shape()...)
	if a == 0 {
		return s.Concat(ax, t0, s.Add(t1, t2), z)
	}
	return s.Concat(ax, z, s.Add(t0, t1), t2)
}

// timeUp doubles the frames: the first chunk passes through ("Rep"); later
// ones run time_conv (2C channels out, zero frames in front for the chunk
// after "Rep", the cached frames after that) and interleave its halves.
func (r *resample) timeUp(s *tensor.Scope, f *featCache, x *tensor.Tensor) *tensor.Tensor {
	sl := f.next()
	if sl.x == nil && !sl.rep {
		sl.rep = true
		return x
	}
	var tail *tensor.Tensor
	if sl.rep {
		last := f.s.Slice(x, 1, max(x.Dim(1)-cacheT, 0), x.Dim(1))
		if last.Dim(1) < cacheT {
			z := f.s.Zeros(last.DType(), last.Shape()...)
			tail = f.s.Concat(1, z, last)
			f.s.Free(z, last)
		} else {
			tail = last
		}
	} else {
		tail = f.tail(sl, x)
	}
	b, t, h, w, c := x.Dim(0), x.Dim(1), x.Dim(2), x.Dim(3), x.Dim(4)
	in, front := x, 2
	if !sl.rep {
		in = s.Concat(1, s.To(sl.x), x)
		s.Free(x)
		front -= sl.x.Dim(1)
	}
	y := r.timeConv.run(s, in, tensor.Padding{Before: [3]int{front, 0, 0}}, true)
	f.set(sl, tail)
	// (B, T, H, W, 2C) → (B, 2T, H, W, C): frame 2i is the first half of
	// the channels at i, frame 2i+1 the second.
	il := s.Permute(y.Reshape(b, t, h*w, 2, c), 0, 1, 3, 2, 4)
	s.Free(y)
	return il.Reshape(b, 2*t, h, w, c)
}

// timeDown halves the frames: the first chunk is only cached; later ones
// run time_conv (kernel 3, stride 2) over the cached last frame and x.
func (r *resample) timeDown(s *tensor.Scope, f *featCache, x *tensor.Tensor) *tensor.Tensor {
	sl := f.next()
	t := x.Dim(1)
	last := f.s.Slice(x, 1, t-1, t)
	if sl.x == nil {
		f.set(sl, last)
		return x
	}
	in := s.Concat(1, s.To(sl.x), x)
	s.Free(x)
	y := r.timeConv.run(s, in, tensor.Padding{}, true)
	f.set(sl, last)
	return y
}
