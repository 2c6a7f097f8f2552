package hunyuan

import (
	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/weights"
)

// linear is torch.nn.Linear: weight (out, in), bias (out).
type linear struct{ Weight, Bias *tensor.Tensor }

func (l *linear) load(p *weights.Builder, name string, out, in int) {
	l.Weight = p.Get(name+".weight", out, in)
	l.Bias = p.Get(name+".bias", out)
}

// loadCat loads the checkpoint's linears names (each outs[i] outputs of in
// inputs) as one layer, their outputs side by side, so that one GEMM
// computes them all (a block's q, k, v and the single blocks' MLP input).
func (l *linear) loadCat(p *weights.Builder, names []string, outs []int, in int) {
	w, b := make([]string, len(names)), make([]string, len(names))
	for i, n := range names {
		w[i], b[i] = n+".weight", n+".bias"
	}
	l.Weight = p.Cat(w, outs, in)
	l.Bias = p.Cat(b, outs)
}

func (l *linear) forward(s *tensor.Scope, x *tensor.Tensor) *tensor.Tensor {
	return s.Linear(x, l.Weight, l.Bias)
}

// rmsNorm is diffusers' RMSNorm with a weight (the per-head q/k norms).
type rmsNorm struct{ Weight *tensor.Tensor }

func (n *rmsNorm) load(p *weights.Builder, name string, dim int) {
	n.Weight = p.Get(name+".weight", dim)
}

func (n *rmsNorm) forward(s *tensor.Scope, x *tensor.Tensor) *tensor.Tensor {
	return s.RMSNorm(x, n.Weight, 1e-6)
}

// layerNorm is an affine LayerNorm (the token refiner's norm1/norm2).
type layerNorm struct{ Weight, Bias *tensor.Tensor }

func (n *layerNorm) load(p *weights.Builder, name string, dim int) {
	n.Weight = p.Get(name+".weight", dim)
	n.Bias = p.Get(name+".bias", dim)
}

func (n *layerNorm) forward(s *tensor.Scope, x *tensor.Tensor) *tensor.Tensor {
	return s.LayerNorm(x, n.Weight, n.Bias, 1e-6)
}
