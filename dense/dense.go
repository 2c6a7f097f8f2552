// Package dense hands framepack's results and tensors over as
// gorgonia.org/tensor *Dense arrays (the exchange type of the Go numeric
// ecosystem), sharing memory where the element type allows. It is its own
// package so that a program that imports framepack does not link gorgonia
// and what it pulls in (Arrow, protobuf) unless it asks for a *Dense.
package dense

import (
	"fmt"

	gt "gorgonia.org/tensor"

	"github.com/framepack-go/framepack"
	"github.com/framepack-go/framepack/tensor"
)

// Frames is r's frames as a uint8 array (T, H, W, 3) sharing their memory;
// nil for a nil Result or one without frames.
func Frames(r *framepack.Result) *gt.Dense {
	if r == nil || r.T <= 0 || r.H <= 0 || r.W <= 0 || len(r.Pix) != r.T*r.H*r.W*3 {
		return nil
	}
	return gt.New(gt.WithShape(r.T, r.H, r.W, 3), gt.WithBacking(r.Pix))
}

// FromTensor is t as a float32 array on the host: a host f32 tensor's
// storage is shared, other dtypes are widened into a new array.
func FromTensor(t *tensor.Tensor) *gt.Dense {
	h := tensor.ToHost(t)
	return gt.New(gt.WithShape(h.Shape()...), gt.WithBacking(h.ToFloat32()))
}

// ToTensor wraps a float32 or float64 array as a host tensor; float32
// storage is shared, float64 is converted.
func ToTensor(d *gt.Dense) (*tensor.Tensor, error) {
	shape := []int(d.Shape())
	switch data := d.Data().(type) {
	case []float32:
		return tensor.FromFloat32(data, shape...), nil
	case []float64:
		f := make([]float32, len(data))
		for i, v := range data {
			f[i] = float32(v)
		}
		return tensor.FromFloat32(f, shape...), nil
	case float32:
		return tensor.FromFloat32([]float32{data}), nil
	}
	return nil, fmt.Errorf("dense.ToTensor: unsupported dtype %v", d.Dtype())
}
