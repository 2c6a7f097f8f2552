package section

import (
	"github.com/framepack-go/framepack/sampler"
	"github.com/framepack-go/framepack/tensor"
)

// SoftAppend is FramePack's soft_append_bcthw(a, b, overlap): the frames of
// a (B, C, Ta, H, W) followed by those of b (B, C, Tb, H, W), the last
// overlap frames of a cross-faded into the first overlap frames of b with
// weights linspace(1, 0, overlap) on a. The result has Ta + Tb − overlap
// frames in a's dtype; overlap 0 concatenates. In the demo a is the newly
// decoded section (earlier in time) and b the history.
func SoftAppend(s *tensor.Scope, a, b *tensor.Tensor, overlap int) *tensor.Tensor {
	if a.Rank() != 5 || b.Rank() != 5 {
		tensor.Fail("soft_append", "want (B, C, T, H, W) tensors, have %v and %v", a.Shape(), b.Shape())
	}
	for _, ax := range []int{0, 1, 3, 4} {
		if a.Dim(ax) != b.Dim(ax) {
			tensor.Fail("soft_append", "shapes %v and %v differ outside time", a.Shape(), b.Shape())
		}
	}
	b = s.Cast(b, a.DType())
	if overlap <= 0 {
		return s.Concat(2, a, b)
	}
	ta, tb := a.Dim(2), b.Dim(2)
	if ta < overlap || tb < overlap {
		tensor.Fail("soft_append", "overlap %d longer than %d or %d frames", overlap, ta, tb)
	}
	w := s.Cast(s.To(tensor.FromFloat32(sampler.Linspace32(1, 0, overlap), 1, 1, overlap, 1, 1)), a.DType())
	oneMinus := s.AddScalar(s.Neg(w), 1)
	blended := s.Add(s.Mul(w, s.Slice(a, 2, ta-overlap, ta)), s.Mul(oneMinus, s.Slice(b, 2, 0, overlap)))
	return s.Concat(2, s.Slice(a, 2, 0, ta-overlap), blended, s.Slice(b, 2, overlap, tb))
}
