package convchain

import (
	"fmt"
	"slices"

	"github.com/framepack-go/framepack/tensor"
)

// The conv2d tier runs a kT×kH×kW convolution as kT 2-D convolutions, one
// per temporal tap, each over the frames that tap reads (a time-shifted
// view of the input, every stride-th frame) and summed over the taps in the
// output: the first tap writes it, the others add to it (a library's β = 1,
// or one add where it has none). No 3-D solver is asked, and so no 3-D
// search runs. On RDNA GPUs this is the fast path: their vendor library's
// 2-D convolutions are the tuned ones, its 3-D ones are not.

// Conv2dTierName is the tier's name in orders, logs, the cache and
// FRAMEPACK_FAULTS.
const Conv2dTierName = "conv2d"

// Tap is one temporal tap of a convolution run as 2-D convolutions: output
// frames [Lo, Hi) read input frames In0, In0+stride, … through the
// weight's temporal slice K.
type Tap struct {
	K, Lo, Hi, In0 int
}

// Frames is the number of output frames the tap computes.
func (t Tap) Frames() int { return t.Hi - t.Lo }

// Taps lists the taps of a convolution with kT temporal taps, stride s and
// zero padding pad in time, over T input frames into To output frames: each
// tap with the output frames whose input frame lies inside the input (the
// padding's zeros add nothing). A tap that reads no frame is left out. A
// tap covering every output frame comes first when there is one (full):
// it may write the output and the others add to it; otherwise the output
// must be zeroed before the taps add to it.
func Taps(T, To, kT, s, pad int) (taps []Tap, full bool) {
	s = max(s, 1)
	for k := 0; k < kT; k++ {
		lo := max(0, ceilDiv(pad-k, s))
		hi := min(To, floorDiv(T-1+pad-k, s)+1)
		if hi <= lo {
			continue
		}
		taps = append(taps, Tap{K: k, Lo: lo, Hi: hi, In0: lo*s + k - pad})
	}
	if i := slices.IndexFunc(taps, func(t Tap) bool { return t.Lo == 0 && t.Hi == To }); i >= 0 {
		full = true
		taps[0], taps[i] = taps[i], taps[0]
		if i > 1 { // keep the others in order
			slices.SortFunc(taps[1:], func(a, b Tap) int { return a.K - b.K })
		}
	}
	return taps, full
}

func floorDiv(a, b int) int {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

func ceilDiv(a, b int) int { return -floorDiv(-a, b) }

// Conv2dBackend is a backend that convolves frames in 2-D, the one
// primitive Conv2dTier needs besides Copy, Fill and the views of its
// buffers.
type Conv2dBackend interface {
	tensor.Backend
	// Conv2d computes dst (N, Cout, Ho, Wo) = x (N, Cin, H, W) ⋆ w (Cout,
	// Cin, kH, kW) + bias (nil: none), zero padding and stride (H, W),
	// or adds it to what dst holds (accumulate).
	Conv2d(dst, x, w, bias *tensor.Tensor, stride, pad [2]int, accumulate bool) error
}

// Conv2dTier is the conv2d tier on a backend's own 2-D convolution (the
// CPU's, or a device posing as one): frames are gathered channels-first
// per tap, the taps summed in a frame-major copy of each batch item's
// output, which then moves into dst. The GPU backend has its own, on the
// vendor library's 2-D API (backend/gpu).
func Conv2dTier(be Conv2dBackend) Tier { return conv2dTier{be} }

type conv2dTier struct{ be Conv2dBackend }

func (conv2dTier) Name() string { return Conv2dTierName }

func (t conv2dTier) Plan(k Key, _ *Plan) (*Plan, error) {
	if k.Layout != "ncdhw" {
		return nil, fmt.Errorf("conv2d tier: layout %s: %w", k.Layout, tensor.ErrUnsupported)
	}
	return &Plan{Algorithm: fmt.Sprintf("%d 2-D convolutions (one a temporal tap) on %s", k.W[2], t.be.Name())}, nil
}

func (t conv2dTier) Run(_ *Plan, dst, x, w, bias *tensor.Tensor, p tensor.ConvParams) error {
	be := t.be
	if x.Rank() != 5 || w.Rank() != 5 || dst.Rank() != 5 {
		return fmt.Errorf("conv2d tier: want 5-D x, w, dst; have %v, %v, %v", x, w, dst)
	}
	xs, ws, ds := x.Shape(), w.Shape(), dst.Shape()
	B, Cin, T, H, W := xs[0], xs[1], xs[2], xs[3], xs[4]
	Cout, kT, kH, kW := ws[0], ws[2], ws[3], ws[4]
	To, Ho, Wo := ds[2], ds[3], ds[4]
	s := max(p.Stride[0], 1)
	if ws[1] != Cin || ds[0] != B || ds[1] != Cout || (T+2*p.Padding[0]-kT)/s+1 != To {
		return fmt.Errorf("conv2d tier: conv3d of %v by %v into %v, %+v", x, w, dst, p)
	}
	dt := dst.DType()
	HW, HoWo, kHW := H*W, Ho*Wo, kH*kW
	stride2, pad2 := [2]int{max(p.Stride[1], 1), max(p.Stride[2], 1)}, [2]int{p.Padding[1], p.Padding[2]}
	taps, full := Taps(T, To, kT, s, p.Padding[0])

	var temps []*tensor.Tensor
	defer func() {
		for _, tt := range temps {
			tensor.Release(tt)
		}
	}()
	alloc := func(shape ...int) (*tensor.Tensor, error) {
		tt, err := tensor.Alloc(be, dt, shape...)
		if err == nil {
			temps = append(temps, tt)
		}
		return tt, err
	}
	// The taps' weights, (Cout, Cin, kH, kW) each.
	wt := make([]*tensor.Tensor, kT)
	for _, tp := range taps {
		wk, err := alloc(Cout, Cin, kH, kW)
		if err != nil {
			return err
		}
		if err := be.Copy(wk, 0, []int{Cin * kHW, kHW, 1}, w, tp.K*kHW, []int{Cin * kT * kHW, kT * kHW, 1}, []int{Cout, Cin, kHW}); err != nil {
			return err
		}
		wt[tp.K] = wk
	}
	acc, err := alloc(To, Cout, Ho, Wo) // one batch item's output, frame-major
	if err != nil {
		return err
	}
	xt, err := alloc(To, Cin, H, W) // a tap's frames
	if err != nil {
		return err
	}
	es := int64(dt.Size())
	frames := func(tt *tensor.Tensor, lo, hi int) (*tensor.Tensor, error) {
		sh := tt.Shape()
		per := int64(tensor.Numel(sh[1:])) * es
		buf, ok := tensor.ViewOf(be, tt.Buffer(), int64(lo)*per, int64(hi-lo)*per)
		if !ok {
			return nil, fmt.Errorf("conv2d tier: %s makes no views of its buffers: %w", be.Name(), tensor.ErrUnsupported)
		}
		sh[0] = hi - lo
		return tensor.Wrap(be, buf, dt, sh...), nil
	}
	for b := 0; b < B; b++ {
		if !full {
			if err := be.Fill(acc, 0); err != nil {
				return err
			}
		}
		for i, tp := range taps {
			n := tp.Frames()
			xv, err := frames(xt, 0, n)
			if err != nil {
				return err
			}
			// Frames In0, In0+s, … of batch item b, channels-first.
			if err := be.Copy(xv, 0, []int{Cin * HW, HW, 1}, x, (b*Cin*T+tp.In0)*HW, []int{s * HW, T * HW, 1}, []int{n, Cin, HW}); err != nil {
				return err
			}
			yv, err := frames(acc, tp.Lo, tp.Hi)
			if err != nil {
				return err
			}
			var bs *tensor.Tensor
			if i == 0 {
				bs = bias
			}
			if err := be.Conv2d(yv, xv, wt[tp.K], bs, stride2, pad2, i > 0 || !full); err != nil {
				return err
			}
		}
		if len(taps) == 0 { // every tap reads padding: the bias alone
			if err := be.Fill(acc, 0); err != nil {
				return err
			}
		}
		// Frame-major (To, Cout, HoWo) into dst[b] (Cout, To, HoWo).
		if err := be.Copy(dst, b*Cout*To*HoWo, []int{HoWo, To * HoWo, 1}, acc, 0, []int{Cout * HoWo, HoWo, 1}, []int{To, Cout, HoWo}); err != nil {
			return err
		}
	}
	if len(taps) == 0 && bias != nil {
		y := dst.Reshape(B, Cout, To*HoWo)
		return be.Binary(tensor.OpAdd, y, y, []int{Cout * To * HoWo, To * HoWo, 1}, bias, []int{0, 1, 0})
	}
	return nil
}
