package hunyuan

import (
	"fmt"

	"github.com/framepack-go/framepack/tensor"
)

// param is one weight of the model as it is laid out for compute: the
// field that holds it, its shape, and the checkpoint tensors it is made of.
// Most are one checkpoint tensor; the fused projections (a block's q, k, v
// and, in the single blocks, the MLP input) concatenate several along their
// first axis, so that one GEMM computes them all.
type param struct {
	name  string // the checkpoint name, or the fused weight's descriptive name
	t     **tensor.Tensor
	shape []int
	// src lists the checkpoint tensors concatenated along axis 0 with
	// their rows; nil means the one tensor name with all the rows.
	src []source
	// f32: kept in float32 whatever the compute dtype, holding the value the
	// compute dtype rounds it to (FramePack casts proj_out up for its fp32
	// output after loading the model in bf16).
	f32 bool
}

// source is one checkpoint tensor of a param.
type source struct {
	name string
	rows int
}

// sources is the param's checkpoint tensors.
func (p param) sources() []source {
	if p.src == nil {
		return []source{{p.name, p.shape[0]}}
	}
	return p.src
}

// sourceShape is the checkpoint shape of source s of p.
func (p param) sourceShape(s source) []int {
	return append([]int{s.rows}, p.shape[1:]...)
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

// cat adds a weight made of the checkpoint tensors names (each rows[i]
// rows of shape[1:]) concatenated along axis 0.
func (p params) cat(name string, t **tensor.Tensor, names []string, rows []int, shape ...int) {
	src := make([]source, len(names))
	for i, n := range names {
		src[i] = source{p.prefix + n, rows[i]}
	}
	shape = append([]int{sum(rows)}, shape...)
	*p.list = append(*p.list, param{name: p.prefix + name, t: t, shape: shape, src: src})
}

func sum(v []int) int {
	n := 0
	for _, x := range v {
		n += x
	}
	return n
}

// linear is torch.nn.Linear: weight (out, in), bias (out).
type linear struct{ Weight, Bias *tensor.Tensor }

func (l *linear) params(p params, name string, out, in int) {
	p.add(name+".weight", &l.Weight, out, in)
	p.add(name+".bias", &l.Bias, out)
}

// catParams lists a linear layer that is the checkpoint's linears names
// (each outs[i] outputs of in inputs) stacked: their outputs side by side.
func (l *linear) catParams(p params, name string, names []string, outs []int, in int) {
	w, b := make([]string, len(names)), make([]string, len(names))
	for i, n := range names {
		w[i], b[i] = n+".weight", n+".bias"
	}
	p.cat(name+".weight", &l.Weight, w, outs, in)
	p.cat(name+".bias", &l.Bias, b, outs)
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

// checkConvertible reports a dtype pair convertInto cannot convert.
func checkConvertible(sd, dt tensor.DType) error {
	if (sd != tensor.F32 && sd != tensor.F16 && sd != tensor.BF16) || (dt != tensor.F32 && dt != tensor.F16 && dt != tensor.BF16) {
		return fmt.Errorf("is %s, cannot be used as %s", sd, dt)
	}
	return nil
}

// convertInto writes the values of the host tensor src into dst (bytes of
// dtype dt), rounding through `through` first (tensor.Invalid: no extra
// rounding).
func convertInto(dst []byte, dt tensor.DType, src *tensor.Tensor, through tensor.DType) error {
	sd := src.DType()
	if err := checkConvertible(sd, dt); err != nil {
		return err
	}
	if sd == dt && (through == tensor.Invalid || through == dt) {
		copy(dst, src.HostBytes())
		return nil
	}
	out, err := tensor.FromBytes(dt, dst[:src.Numel()*dt.Size()], src.Numel())
	if err != nil {
		return err
	}
	// A copy: the source may be a read-only file mapping.
	v := append([]float32(nil), src.ToFloat32()...)
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
	return nil
}

// convertHost copies a host tensor into a new host tensor of dtype dt,
// rounding through `through` first (tensor.Invalid: no extra rounding).
func convertHost(src *tensor.Tensor, dt, through tensor.DType) (*tensor.Tensor, error) {
	if err := checkConvertible(src.DType(), dt); err != nil {
		return nil, err
	}
	out := tensor.New(dt, src.Shape()...)
	if err := convertInto(out.HostBytes(), dt, src, through); err != nil {
		return nil, err
	}
	return out, nil
}
