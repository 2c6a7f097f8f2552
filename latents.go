package framepack

import (
	"fmt"

	"github.com/framepack-go/framepack/tensor"
)

// latents are (1, C, T, H, W) f32 values on the host, FramePack's
// history_latents and the pieces cut from it.
type latents struct {
	c, t, h, w int
	data       []float32 // (C, T, H, W)
}

func zeroLatents(c, t, h, w int) *latents {
	return &latents{c: c, t: t, h: h, w: w, data: make([]float32, c*t*h*w)}
}

// latentsOf takes a host f32 (1, C, T, H, W) tensor's values (no copy).
func latentsOf(x *tensor.Tensor) *latents {
	if x.Rank() != 5 || x.Dim(0) != 1 {
		panic(fmt.Sprintf("framepack: latents %v, want (1, C, T, H, W)", x.Shape()))
	}
	return &latents{c: x.Dim(1), t: x.Dim(2), h: x.Dim(3), w: x.Dim(4), data: tensor.Float32s(x)}
}

// tensor wraps the values as a host tensor (no copy).
func (l *latents) tensor() *tensor.Tensor {
	return tensor.FromFloat32(l.data, 1, l.c, l.t, l.h, l.w)
}

// slice copies frames [t0, t1).
func (l *latents) slice(t0, t1 int) *latents {
	out := zeroLatents(l.c, t1-t0, l.h, l.w)
	plane := l.h * l.w
	for c := 0; c < l.c; c++ {
		copy(out.data[c*out.t*plane:(c+1)*out.t*plane], l.data[(c*l.t+t0)*plane:(c*l.t+t1)*plane])
	}
	return out
}

// catTime concatenates a and b along time.
func catTime(a, b *latents) *latents {
	if a.c != b.c || a.h != b.h || a.w != b.w {
		panic(fmt.Sprintf("framepack: concatenating latents %d×%d×%d and %d×%d×%d", a.c, a.h, a.w, b.c, b.h, b.w))
	}
	out := zeroLatents(a.c, a.t+b.t, a.h, a.w)
	plane := a.h * a.w
	for c := 0; c < a.c; c++ {
		dst := out.data[c*out.t*plane:]
		n := copy(dst, a.data[c*a.t*plane:(c+1)*a.t*plane])
		copy(dst[n:], b.data[c*b.t*plane:(c+1)*b.t*plane])
	}
	return out
}
