package tiles

import "github.com/framepack-go/framepack/tensor"

// ToCompute puts x on s's backend in dt, freeing an intermediate upload.
func ToCompute(s *tensor.Scope, x *tensor.Tensor, dt tensor.DType) *tensor.Tensor {
	on := s.To(x)
	out := s.Cast(on, dt)
	if out != on && on != x {
		s.Free(on)
	}
	return out
}

// SliceBox copies x[:, :, t0:t1, h0:h1, w0:w1] (x itself when the box is
// everything), freeing the intermediate copies but never x.
func SliceBox(s *tensor.Scope, x *tensor.Tensor, t0, t1, h0, h1, w0, w1 int) *tensor.Tensor {
	orig := x
	for i, r := range [3][2]int{{t0, t1}, {h0, h1}, {w0, w1}} {
		ax := 2 + i
		if r[0] == 0 && r[1] == x.Dim(ax) {
			continue
		}
		y := s.Slice(x, ax, r[0], r[1])
		if x != orig {
			s.Free(x)
		}
		x = y
	}
	return x
}
