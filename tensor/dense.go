package tensor

import (
	"fmt"

	gt "gorgonia.org/tensor"
)

// ToDense exposes a host f32 tensor as a gorgonia *Dense sharing its storage
// (the exchange type of framepack's public API). Other dtypes are widened
// into a new float32 array.
func ToDense(t *Tensor) *gt.Dense {
	h := ToHost(t)
	data := h.ToFloat32()
	return gt.New(gt.WithShape(h.Shape()...), gt.WithBacking(data))
}

// FromDense wraps a float32 or float64 *Dense as a host tensor; float32
// storage is shared, float64 is converted.
func FromDense(d *gt.Dense) (*Tensor, error) {
	shape := []int(d.Shape())
	switch data := d.Data().(type) {
	case []float32:
		return FromFloat32(data, shape...), nil
	case []float64:
		f := make([]float32, len(data))
		for i, v := range data {
			f[i] = float32(v)
		}
		return FromFloat32(f, shape...), nil
	case float32:
		return FromFloat32([]float32{data}), nil
	}
	return nil, fmt.Errorf("tensor.FromDense: unsupported dtype %v", d.Dtype())
}
