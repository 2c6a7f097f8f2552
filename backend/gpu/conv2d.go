package gpu

import (
	"errors"
	"fmt"
	"math"

	"github.com/framepack-go/framepack/convchain"
	"github.com/framepack-go/framepack/miopen"
	"github.com/framepack-go/framepack/tensor"
)

// conv2dTier is the chain's conv2d tier on the GPU: a kT×kH×kW convolution
// as kT 2-D convolutions of the vendor library (miopen.ConvDesc.TwoD: its
// 2-D API, never a 3-D solver or a 3-D find), one per temporal tap, each
// over the frames the tap reads, summed in the output: the first tap writes
// it, the others add to it with cuDNN's β = 1, or on AMD (MIOpen has no β)
// into scratch and one add.
//
// The frames are convolved frame-major, each frame a contiguous image in
// NHWC (NVIDIA's fast path) or NCHW (MIOpen's tuned path on AMD, whose NHWC
// solvers are few). A channels-first call is moved frame-major a chunk of
// output frames at a time (the pack kernel for NHWC, with the time padding
// and Conv3dPadded's padding; a strided copy for NCHW), convolved, and
// moved back with the bias. A channels-last call in NHWC (Wan's decoder)
// is already frame-major: the taps read and write its tensors in place.
// The taps' weights, (kT, Cout, …) with each tap's slice contiguous, are
// kept per weight like the optimized tier's packed copies.
type conv2dTier struct {
	opt    *optimized // the library handle, layout kernels, options
	layout miopen.Layout
}

// conv2dLastTier is conv2dTier in NHWC, which convolves channels-last calls
// as they are.
type conv2dLastTier struct{ *conv2dTier }

// newConv2dTier is the conv2d tier on be's library handle: in o.Layout when
// set, else NHWC on NVIDIA and NCHW on AMD.
func newConv2dTier(be *Backend, o *ConvOptions) (convchain.Tier, error) {
	opt, err := newOptimized(be, o)
	if err != nil {
		return nil, err
	}
	t := &conv2dTier{opt: opt, layout: conv2dLayout(o.Layout, opt.vendor)}
	if t.layout == miopen.NDHWC {
		return conv2dLastTier{t}, nil
	}
	return t, nil
}

// conv2dLayout is the tier's frame layout: the option's, else NHWC on
// NVIDIA and NCHW on AMD.
func conv2dLayout(l Layout, v miopen.Vendor) miopen.Layout {
	switch {
	case l == LayoutNDHWC:
		return miopen.NDHWC
	case l == LayoutNCDHW:
		return miopen.NCDHW
	case v == miopen.AMD:
		return miopen.NCDHW
	}
	return miopen.NDHWC
}

func (t *conv2dTier) Name() string { return convchain.Conv2dTierName }

func frameLayoutName(l miopen.Layout) string {
	if l == miopen.NDHWC {
		return "NHWC"
	}
	return "NCHW"
}

// desc2 is the 2-D convolution of n frames of g.
func (t *conv2dTier) desc2(g geom, dt miopen.DType, n int) miopen.ConvDesc {
	return miopen.ConvDesc{TwoD: true, N: n, C: g.Cin, H: g.H, W: g.W, K: g.Cout, KH: g.kH, KW: g.kW,
		Stride: [3]int{1, g.st[1], g.st[2]}, Pad: [3]int{0, g.pad[1], g.pad[2]}, DType: dt, Layout: t.layout}
}

// frameElems are the elements of one input and one output frame.
func (g geom) frameElems() (in, out int64) {
	return int64(g.Cin) * int64(g.H) * int64(g.W), int64(g.Cout) * int64(g.Ho) * int64(g.Wo)
}

// Plan asks the library for the 2-D convolution of a chunk's frames: a
// plan that is its naive solver skips the tier, as for the optimized one.
func (t *conv2dTier) Plan(k convchain.Key, _ *convchain.Plan) (*convchain.Plan, error) {
	g, err := geomOf(k)
	if err != nil {
		return nil, err
	}
	dt, err := libDType(k.DType)
	if err != nil {
		return nil, err
	}
	if k.Layout == "ndhwc" && t.layout != miopen.NDHWC {
		return nil, fmt.Errorf("gpu: conv2d tier in NCHW on a channels-last call: %w", tensor.ErrUnsupported)
	}
	n := min(g.To, t.frames(g, t.opt.o.chunkBytes(), k.Layout == "ndhwc"))
	release, err := t.opt.bind()
	if err != nil {
		return nil, err
	}
	p, err := t.opt.h.Plan(t.desc2(g, dt, n))
	release()
	if err != nil {
		return nil, err
	}
	return &convchain.Plan{Algorithm: fmt.Sprintf("%d × %s %s conv2d %s", g.kT, t.opt.h.Lib().Name(), frameLayoutName(t.layout), p),
		Naive: p.IsNaive, Workspace: p.WorkspaceBytes}, nil
}

// gathers: a tap's frames are not one contiguous run of x (a stride in
// time, or several batch items), so they are copied together first.
func (g geom) gathers() bool { return g.st[0] > 1 }

// adds: the library cannot add to its output (MIOpen), so a tap after the
// first convolves into scratch and is added.
func (t *conv2dTier) adds() bool { return t.opt.vendor == miopen.AMD || t.opt.o.conv2dAdds }

// frames is the most output frames a piece of work may have: its scratch
// within limit (a chunk's packed input and output too unless last, a
// channels-last call that reads and writes its tensors in place) and every
// tensor the library sees indexed in 32 bits.
func (t *conv2dTier) frames(g geom, limit int64, last bool) int {
	fi, fo := g.frameElems()
	per := int64(0)
	if g.gathers() {
		per += fi
	}
	if t.adds() {
		per += fo
	}
	if !last {
		per += fo + fi*int64(g.st[0])
	}
	per *= int64(g.B) * int64(g.es)
	n := math.MaxInt32 / max(fi, fo)
	if per > 0 {
		n = min(n, limit/per)
	}
	return int(max(1, min(n, int64(g.To))))
}

func (t *conv2dTier) Run(plan *convchain.Plan, dst, x, w, bias *tensor.Tensor, p tensor.ConvParams) error {
	return t.run(dst, x, nil, w, bias, p)
}

// RunPadded reads x through the padding with the pack kernel in NHWC; in
// NCHW it convolves a padded copy.
func (t *conv2dTier) RunPadded(plan *convchain.Plan, dst, x, w, bias *tensor.Tensor, p tensor.ConvParams, pad tensor.Padding) error {
	if t.layout != miopen.NDHWC {
		alloc := dst.Backend()
		if alloc == nil {
			alloc = t.opt.be
		}
		px, err := pad.Materialize(alloc, x)
		if err != nil {
			return err
		}
		defer tensor.Release(px)
		return t.run(dst, px, nil, w, bias, p)
	}
	return t.run(dst, x, &pad, w, bias, p)
}

// run convolves channels-first x (padded by pad when set) into dst a chunk
// of output frames at a time; out of memory, the kept weights go first,
// then the chunk halves.
func (t *conv2dTier) run(dst, x *tensor.Tensor, pad *tensor.Padding, w, bias *tensor.Tensor, p tensor.ConvParams) error {
	k := convchain.KeyOf("", x, w, bias, p)
	if pad != nil {
		copy(k.X[:], pad.Shape(x.Shape()))
	}
	g, err := geomOf(k)
	if err != nil {
		return err
	}
	dt, err := libDType(k.DType)
	if err != nil {
		return err
	}
	alloc := dst.Backend()
	if alloc == nil {
		alloc = t.opt.be
	}
	keep := true
	for tc := t.frames(g, t.opt.chunkLimit(alloc), false); ; {
		err := t.runChunks(alloc, g, dt, tc, dst, x, pad, w, bias, keep)
		if err == nil || !errors.Is(err, tensor.ErrOutOfMemory) {
			return err
		}
		if keep {
			keep = false
			if t.opt.be.packs.Clear() > 0 {
				continue
			}
		}
		if tc == 1 {
			return err
		}
		tc = (tc + 1) / 2
	}
}

func (t *conv2dTier) runChunks(alloc tensor.Backend, g geom, dt miopen.DType, tc int, dst, x *tensor.Tensor, pad *tensor.Padding, w, bias *tensor.Tensor, keep bool) error {
	tdt := dst.DType()
	wt, done, err := t.tapWeights(alloc, g, tdt, w, false, keep)
	if err != nil {
		return err
	}
	defer done()
	fi, fo := g.frameElems()
	xc, err := scratch(alloc, tdt, int64(g.B)*int64(g.inFrames(tc))*fi)
	if err != nil {
		return err
	}
	defer tensor.Release(xc)
	yc, err := scratch(alloc, tdt, int64(g.B)*int64(tc)*fo)
	if err != nil {
		return err
	}
	defer tensor.Release(yc)
	pr := t.opt.o.Profile
	S, So := g.H*g.W, g.Ho*g.Wo
	nchw := t.layout == miopen.NCDHW
	for to0 := 0; to0 < g.To; to0 += tc {
		n := min(tc, g.To-to0)
		ti0 := to0*g.st[0] - g.pad[0]
		in := g.inFrames(n)
		if err := pr.time("conv3d.pack", t.opt.be, 0, func() error {
			switch {
			case pad != nil:
				us := pad.Shape(x.Shape())
				pg := padGeom{N: g.B, C: g.Cin, T: x.Dim(2), H: x.Dim(3), W: x.Dim(4),
					Tu: us[2] - pad.Before[0] - pad.After[0], Hu: us[3] - pad.Before[1] - pad.After[1], Wu: us[4] - pad.Before[2] - pad.After[2],
					up: pad.Upsample, causal: pad.CausalFirst, Tp: g.T, Hp: g.H, Wp: g.W,
					before: pad.Before, zt: g.pad[0], replicate: pad.Mode == tensor.PadReplicate}
				return t.opt.lk.packpad(tdt, Ptr(xc), Ptr(x), pg, ti0+g.pad[0], in)
			case nchw:
				return t.frameMajorNCHW(xc, x, g, ti0, in)
			}
			return t.opt.lk.pack(tdt, Ptr(xc), Ptr(x), g.B, g.Cin, g.T, S, ti0, in)
		}); err != nil {
			return err
		}
		// Every frame a tap reads is in xc (zeros for the padding): each tap
		// covers the chunk.
		if _, err := t.taps(alloc, g, dt, xc, in, 0, yc, n, wt, nil, false); err != nil {
			return err
		}
		if err := pr.time("conv3d.unpack", t.opt.be, 0, func() error {
			if nchw { // (B, n, K, So) into dst (B, K, To, So) at frame to0
				shape := []int{g.B, n, g.Cout, So}
				return t.opt.be.Copy(dst, to0*So, []int{g.Cout * g.To * So, So, g.To * So, 1}, yc, 0, tensor.ContiguousStrides(shape), shape)
			}
			return t.opt.lk.unpack(tdt, Ptr(dst), Ptr(yc), Ptr(bias), g.B, g.Cout, g.To, So, to0, n)
		}); err != nil {
			return err
		}
	}
	if !nchw || bias == nil {
		return nil
	}
	return pr.time("conv3d.bias", t.opt.be, 0, func() error {
		P := g.To * So
		y := dst.Reshape(g.B, g.Cout, P)
		return t.opt.be.Binary(tensor.OpAdd, y, y, []int{g.Cout * P, P, 1}, bias, []int{0, 1, 0})
	})
}

// frameMajorNCHW copies frames ti0 … ti0+in−1 of x (B, C, T, S) into xc
// (B, in, C, S), zeros for those outside [0, T).
func (t *conv2dTier) frameMajorNCHW(xc, x *tensor.Tensor, g geom, ti0, in int) error {
	be := t.opt.be
	lo, hi := max(ti0, 0), min(ti0+in, g.T)
	if lo > ti0 || hi < ti0+in || hi <= lo {
		if err := be.Fill(xc, 0); err != nil {
			return err
		}
	}
	if hi <= lo {
		return nil
	}
	S := g.H * g.W
	CS := g.Cin * S
	return be.Copy(xc, (lo-ti0)*CS, []int{in * CS, CS, S, 1}, x, lo*S, []int{g.Cin * g.T * S, S, g.T * S, 1}, []int{g.B, hi - lo, g.Cin, S})
}

// RunLast convolves channels-last x (B, T, H, W, Cin) into dst (B, To, Ho,
// Wo, Cout) in place: the library's time padding is the taps' ranges, the
// bias the first tap's epilogue where cuDNN fuses it, else one add.
func (t conv2dLastTier) RunLast(plan *convchain.Plan, dst, x, w, bias *tensor.Tensor, p tensor.ConvParams) error {
	k := convchain.KeyOfLast("", x, w, bias, p)
	g, err := geomOf(k)
	if err != nil {
		return err
	}
	dt, err := libDType(k.DType)
	if err != nil {
		return err
	}
	alloc := dst.Backend()
	if alloc == nil {
		alloc = t.opt.be
	}
	var added bool
	for keep := true; ; keep = false {
		var wt *tensor.Tensor
		var done func()
		wt, done, err = t.tapWeights(alloc, g, dst.DType(), w, p.WeightLast, keep)
		if err == nil {
			added, err = t.taps(alloc, g, dt, x, g.T, g.pad[0], dst, g.To, wt, bias, p.Accumulate)
			done()
		}
		if err == nil || !errors.Is(err, tensor.ErrOutOfMemory) || !keep || t.opt.be.packs.Clear() == 0 {
			break
		}
	}
	if err != nil {
		if p.Accumulate {
			err = fmt.Errorf("%w (%w)", err, convchain.ErrPartSum)
		}
		return err
	}
	if bias == nil || added {
		return nil
	}
	rows := g.B * g.To * g.Ho * g.Wo
	err = t.opt.o.Profile.time("conv3d.bias", t.opt.be, 0, func() error {
		y := dst.Reshape(rows, g.Cout)
		return t.opt.be.Binary(tensor.OpAdd, y, y, []int{g.Cout, 1}, bias, []int{0, 1})
	})
	if err != nil && p.Accumulate {
		err = fmt.Errorf("conv3d bias after the sum: %w (%w)", err, convchain.ErrPartSum)
	}
	return err
}

// taps convolves frame-major x (B, Tx, frame) into frame-major y (B, Ty,
// frame) tap by tap, with the taps' weights wt (kT, Cout, …): output frame o
// reads input frame o·stride + k − pt through tap k. The first tap that
// covers every output frame writes y (unless accumulate) with the bias as
// cuDNN's epilogue where an engine fuses it (added); the others add to it.
// Output frames go in pieces whose scratch fits the chunk bound.
func (t *conv2dTier) taps(alloc tensor.Backend, g geom, dt miopen.DType, x *tensor.Tensor, Tx, pt int, y *tensor.Tensor, Ty int, wt, bias *tensor.Tensor, accumulate bool) (added bool, err error) {
	be := t.opt.be
	tdt := y.DType()
	es := int64(tdt.Size())
	fi, fo := g.frameElems()
	wTap := int64(g.Cout) * int64(g.Cin) * int64(g.kH) * int64(g.kW) * es
	taps, full := convchain.Taps(Tx, Ty, g.kT, g.st[0], pt)
	if !accumulate && !full {
		// No tap covers every frame: the sum starts from zeros.
		if err := be.Fill(y, 0); err != nil {
			return false, err
		}
		accumulate = true
	}
	if len(taps) == 0 {
		return false, nil
	}
	piece := t.frames(g, t.opt.chunkLimit(alloc), true)
	var xg, ys *tensor.Tensor // a piece's gathered frames, an added tap's output
	if g.gathers() {
		if xg, err = scratch(alloc, tdt, int64(piece)*fi); err != nil {
			return false, err
		}
		defer tensor.Release(xg)
	}
	if t.adds() {
		if ys, err = scratch(alloc, tdt, int64(piece)*fo); err != nil {
			return false, err
		}
		defer tensor.Release(ys)
	}
	// The bias rides on the first tap's epilogue on NVIDIA where an engine
	// takes it; a piece whose engine does not gets it added after.
	fusing := bias != nil && !accumulate && !t.adds()
	pr := t.opt.o.Profile
	for b := 0; b < g.B; b++ {
		for o0 := 0; o0 < Ty; o0 += piece {
			o1 := min(o0+piece, Ty)
			pieceAdded := false
			for i, tp := range taps {
				lo, hi := max(tp.Lo, o0), min(tp.Hi, o1)
				if hi <= lo {
					continue
				}
				n := hi - lo
				f0 := tp.In0 + (lo-tp.Lo)*g.st[0] // its first input frame
				xp := Ptr(x) + uintptr((int64(b)*int64(Tx)+int64(f0))*fi*es)
				if g.gathers() {
					// Frames f0, f0+s, … together.
					if err := be.Copy(xg, 0, []int{int(fi), 1}, x, int((int64(b)*int64(Tx)+int64(f0))*fi), []int{g.st[0] * int(fi), 1}, []int{n, int(fi)}); err != nil {
						return false, err
					}
					xp = Ptr(xg)
				}
				yp := Ptr(y) + uintptr((int64(b)*int64(Ty)+int64(lo))*fo*es)
				wp := Ptr(wt) + uintptr(int64(tp.K)*wTap)
				d := t.desc2(g, dt, n)
				write := i == 0 && !accumulate
				var bp uintptr
				if write && fusing {
					d.Bias, bp = true, Ptr(bias)
				}
				lv := &live{}
				if write || !t.adds() {
					d.Accumulate = !write
					if err := pr.time("conv3d.library", be, g.flops(n)/float64(g.kT*g.B), func() error {
						a, err := t.opt.forwardBias(alloc, d, lv, xp, wp, bp, yp)
						pieceAdded = pieceAdded || (d.Bias && a)
						return err
					}); err != nil {
						return false, err
					}
					continue
				}
				// MIOpen: into scratch, then one add.
				if err := pr.time("conv3d.library", be, g.flops(n)/float64(g.kT*g.B), func() error {
					return t.opt.forward(alloc, d, lv, xp, wp, Ptr(ys))
				}); err != nil {
					return false, err
				}
				yv, err := frameView(be, y, int64(b)*int64(Ty)+int64(lo), int64(n), fo)
				if err != nil {
					return false, err
				}
				sv, err := frameView(be, ys, 0, int64(n), fo)
				if err != nil {
					return false, err
				}
				if err := be.Binary(tensor.OpAdd, yv, yv, []int{1}, sv, []int{1}); err != nil {
					return false, err
				}
			}
			if fusing && !pieceAdded {
				// This piece's engine took no bias: added here.
				yv, err := frameView(be, y, int64(b)*int64(Ty)+int64(o0), int64(o1-o0), fo)
				if err != nil {
					return false, err
				}
				rows := yv.Reshape((o1-o0)*g.Ho*g.Wo, g.Cout)
				if err := be.Binary(tensor.OpAdd, rows, rows, []int{g.Cout, 1}, bias, []int{0, 1}); err != nil {
					return false, err
				}
			}
		}
	}
	return fusing, nil
}

// frameView is frames [f0, f0+n) of t, each fe elements, as a flat view.
func frameView(be *Backend, t *tensor.Tensor, f0, n, fe int64) (*tensor.Tensor, error) {
	es := int64(t.DType().Size())
	buf, err := be.View(t.Buffer(), f0*fe*es, n*fe*es)
	if err != nil {
		return nil, err
	}
	return tensor.Wrap(be, buf, t.DType(), int(n*fe)), nil
}

// tapWeights is w — (K, C, kT, kH, kW), or packed (K, kT, kH, kW, C) when
// weightLast — as the taps' weights (kT, K, …) in the tier's layout, each
// tap's slice contiguous: the kept copy when there is one, and done, which
// ends this use of it (as packedWeight).
func (t *conv2dTier) tapWeights(alloc tensor.Backend, g geom, tdt tensor.DType, w *tensor.Tensor, weightLast, keep bool) (*tensor.Tensor, func(), error) {
	kHW := g.kH * g.kW
	K, C, kT := g.Cout, g.Cin, g.kT
	var form packForm
	var shape, src []int
	switch {
	case t.layout == miopen.NDHWC && !weightLast:
		form, shape, src = tapsNHWC, []int{kT, K, kHW, C}, []int{kHW, C * kT * kHW, 1, kT * kHW}
	case t.layout == miopen.NDHWC:
		form, shape, src = tapsNHWCLast, []int{kT, K, kHW, C}, []int{kHW * C, kT * kHW * C, C, 1}
	case !weightLast:
		form, shape, src = tapsNCHW, []int{kT, K, C, kHW}, []int{kHW, C * kT * kHW, kT * kHW, 1}
	default:
		form, shape, src = tapsNCHWLast, []int{kT, K, C, kHW}, []int{kHW * C, kT * kHW * C, 1, C}
	}
	if kT == 1 && (form == tapsNCHW || form == tapsNHWCLast) {
		return w, func() {}, nil // one tap, in the layout already
	}
	n := int64(tensor.Numel(shape))
	var key packKey
	var live func() bool
	if keep {
		key, live, keep = packKeyOf(w, g, tdt)
		key.form = form
	}
	be := t.opt.be
	if keep {
		if wt, done, hit := be.packs.Get(key); hit {
			return wt, done, nil
		}
		bytes := n * int64(tdt.Size())
		keep = be.packs.Room(key, bytes) && t.opt.roomToKeep(alloc, bytes)
	}
	wt, err := scratch(alloc, tdt, n)
	if err != nil {
		return nil, nil, err
	}
	if err := t.opt.o.Profile.time("conv3d.pack", be, 0, func() error {
		return be.Copy(wt, 0, tensor.ContiguousStrides(shape), w, 0, src, shape)
	}); err != nil {
		tensor.Release(wt)
		return nil, nil, err
	}
	if keep {
		if done, ok := be.packs.Add(key, wt, wt.Bytes(), live); ok {
			return wt, done, nil
		}
	}
	return wt, func() { tensor.Release(wt) }, nil
}
