package tensor

import "fmt"

// Padding is how a convolution's input is made from x on its last three
// axes (T, H, W): x repeated (nearest) by Upsample — with CausalFirst the
// first frame only spatially, every later frame Upsample[0] times
// (HunyuanVideo's causal upsampler) — then padded as Backend.Pad
// pads.
type Padding struct {
	Before, After [3]int
	Mode          PadMode
	// Upsample factors (0 or 1: none) and the causal first-frame rule.
	Upsample    [3]int
	CausalFirst bool
}

// upsampled is the size of x's axis i after the upsample.
func (p *Padding) upsampled(i, n int) int {
	f := max(p.Upsample[i], 1)
	if i == 0 && p.CausalFirst && n > 0 {
		return 1 + (n-1)*f
	}
	return n * f
}

// Shape is the convolution's input shape for x of shape xs (B, C, T, H, W).
func (p *Padding) Shape(xs []int) []int {
	out := append([]int(nil), xs...)
	for i := 0; i < 3; i++ {
		out[2+i] = p.upsampled(i, xs[2+i]) + p.Before[i] + p.After[i]
	}
	return out
}

func (p *Padding) upsamples() bool {
	return max(p.Upsample[0], 1) > 1 || max(p.Upsample[1], 1) > 1 || max(p.Upsample[2], 1) > 1
}

// Materialize makes the convolution's input from x on be (the caller
// releases it).
func (p *Padding) Materialize(be Backend, x *Tensor) (*Tensor, error) {
	src := x
	if p.upsamples() {
		up, err := p.upsample(be, x)
		if err != nil {
			return nil, err
		}
		defer Release(up)
		src = up
	}
	pd, err := Alloc(be, x.DType(), p.Shape(x.Shape())...)
	if err != nil {
		return nil, fmt.Errorf("the padded input: %w", err)
	}
	if err := be.Pad(pd, src, p.Before[:], p.Mode); err != nil {
		Release(pd)
		return nil, fmt.Errorf("padding the input: %w", err)
	}
	return pd, nil
}

// upsample repeats x (nearest); with CausalFirst, spatially first, then
// every frame after the first copied Upsample[0] times.
func (p *Padding) upsample(be Backend, x *Tensor) (*Tensor, error) {
	b, c, t, h, w := x.Dim(0), x.Dim(1), x.Dim(2), x.Dim(3), x.Dim(4)
	ft, fh, fw := max(p.Upsample[0], 1), max(p.Upsample[1], 1), max(p.Upsample[2], 1)
	if !p.CausalFirst || ft == 1 || t == 1 {
		up, err := Alloc(be, x.DType(), b, c, p.upsampled(0, t), h*fh, w*fw)
		if err != nil {
			return nil, fmt.Errorf("the upsampled input: %w", err)
		}
		scale := [3]int{ft, fh, fw}
		if p.CausalFirst {
			scale[0] = 1
		}
		if err := be.UpsampleNearest(up, x, scale); err != nil {
			Release(up)
			return nil, err
		}
		return up, nil
	}
	sp, err := Alloc(be, x.DType(), b, c, t, h*fh, w*fw)
	if err != nil {
		return nil, fmt.Errorf("the upsampled input: %w", err)
	}
	defer Release(sp)
	if err := be.UpsampleNearest(sp, x, [3]int{1, fh, fw}); err != nil {
		return nil, err
	}
	tu := p.upsampled(0, t)
	up, err := Alloc(be, x.DType(), b, c, tu, h*fh, w*fw)
	if err != nil {
		return nil, fmt.Errorf("the upsampled input: %w", err)
	}
	f := h * fh * w * fw
	// Frame 0 as it is; frame i ≥ 1 to frames 1+(i−1)·ft … i·ft.
	err = be.Copy(up, 0, []int{tu * f, 1}, sp, 0, []int{t * f, 1}, []int{b * c, f})
	if err == nil {
		err = be.Copy(up, f, []int{tu * f, ft * f, f, 1}, sp, f, []int{t * f, f, 0, 1}, []int{b * c, t - 1, ft, f})
	}
	if err != nil {
		Release(up)
		return nil, err
	}
	return up, nil
}
