package hunyuan

import (
	"fmt"

	"github.com/framepack-go/framepack/tensor"
)

// param is one weight of the model: its checkpoint name, the field that
// holds it, and the shape the model needs.
type param struct {
	name  string
	t     **tensor.Tensor
	shape []int
	// f32: kept in float32 whatever the compute dtype, holding the value the
	// compute dtype rounds it to (FramePack casts proj_out up for its fp32
	// output after loading the model in bf16).
	f32 bool
}

// params collects weights under a name prefix.
type params struct {
	prefix string
	list   *[]param
}

func newParams(list *[]param) params { return params{list: list} }

func (p params) sub(name string) params { return params{prefix: p.prefix + name + ".", list: p.list} }

func (p params) add(name string, t **tensor.Tensor, shape ...int) {
	*p.list = append(*p.list, param{name: p.prefix + name, t: t, shape: shape})
}

// linear is torch.nn.Linear: weight (out, in), bias (out).
type linear struct{ Weight, Bias *tensor.Tensor }

func (l *linear) params(p params, name string, out, in int) {
	p.add(name+".weight", &l.Weight, out, in)
	p.add(name+".bias", &l.Bias, out)
}

func (l *linear) forward(s *tensor.Scope, x *tensor.Tensor) *tensor.Tensor {
	return s.Linear(x, l.Weight, l.Bias)
}

// rmsNorm is diffusers' RMSNorm with a weight (the per-head q/k norms).
type rmsNorm struct{ Weight *tensor.Tensor }

func (n *rmsNorm) params(p params, name string, dim int) { p.add(name+".weight", &n.Weight, dim) }

func (n *rmsNorm) forward(s *tensor.Scope, x *tensor.Tensor) *tensor.Tensor {
	return s.RMSNorm(x, n.Weight, 1e-6)
}

// layerNorm is an affine LayerNorm (the token refiner's norm1/norm2).
type layerNorm struct{ Weight, Bias *tensor.Tensor }

func (n *layerNorm) params(p params, name string, dim int) {
	p.add(name+".weight", &n.Weight, dim)
	p.add(name+".bias", &n.Bias, dim)
}

func (n *layerNorm) forward(s *tensor.Scope, x *tensor.Tensor) *tensor.Tensor {
	return s.LayerNorm(x, n.Weight, n.Bias, 1e-6)
}

// resident points the fields of ps at weights usable on s's backend:
// themselves when they already are, otherwise copies owned by s (uploaded
// now, freed when s closes). Callers pass the params of a copy of the
// owning struct, so the host weights stay where they are.
func resident(s *tensor.Scope, ps []param) {
	for _, p := range ps {
		if *p.t != nil {
			*p.t = s.To(*p.t)
		}
	}
}

// convertHost copies a host tensor into a new host tensor of dtype dt,
// rounding through `through` first (tensor.Invalid: no extra rounding).
func convertHost(src *tensor.Tensor, dt, through tensor.DType) (*tensor.Tensor, error) {
	sd := src.DType()
	if (sd != tensor.F32 && sd != tensor.F16 && sd != tensor.BF16) || (dt != tensor.F32 && dt != tensor.F16 && dt != tensor.BF16) {
		return nil, fmt.Errorf("is %s, cannot be used as %s", sd, dt)
	}
	// A copy: the source may be a read-only file mapping.
	v := append([]float32(nil), src.ToFloat32()...)
	out := tensor.New(dt, src.Shape()...)
	switch through {
	case tensor.BF16:
		for i, x := range v {
			v[i] = tensor.RoundBF16(x)
		}
	case tensor.F16:
		for i, x := range v {
			v[i] = tensor.RoundF16(x)
		}
	}
	switch dt {
	case tensor.F32:
		copy(out.Float32s(), v)
	case tensor.BF16:
		tensor.NarrowBF16(out.Uint16s(), v)
	case tensor.F16:
		tensor.NarrowF16(out.Uint16s(), v)
	}
	return out, nil
}
