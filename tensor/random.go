package tensor

import "math/rand/v2"

// RandN is a host f32 tensor of shape holding standard normal values drawn
// from r, element after element: random inputs for tests and benchmarks.
func RandN(r *rand.Rand, shape ...int) *Tensor {
	v := make([]float32, Numel(shape))
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	return FromFloat32(v, shape...)
}
