package hunyuan

import (
	"strings"

	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/weights"
)

// linear is torch.nn.Linear: weight (out, in), bias (out). With FP8
// weights (Options.FP8) Weight is F8E4M3 and Scale its f32 per-row scales.
// With FP8Compute as well its input is quantized per token and the product
// runs in FP8 (Scope.LinearFP8Compute). A LoRA of an FP8 linear is added at
// run time (LoRA); the others are merged into the weights at load.
type linear struct {
	Weight, Scale, Bias *tensor.Tensor
	FP8Compute          bool
	LoRA                *lowRank
	key                 string // the checkpoint name of its (first) weight
}

// lowRank is a LoRA's update of one FP8 linear: y += (x·Aᵀ)·Bᵀ, A (r, in)
// and B (out, r) in the compute dtype (lora.Set.LowRank).
type lowRank struct{ A, B *tensor.Tensor }

// fp8 reports whether layer name loads as FP8: under an FP8 builder, every
// linear but the modulations (names with "norm"), which stay in the compute
// dtype as in the community's fp8 checkpoints.
func fp8(p *weights.Builder, name string) bool {
	return p.IsFP8() && !strings.Contains(name, "norm")
}

func (l *linear) load(p *weights.Builder, name string, out, in int) {
	if fp8(p, name) {
		l.Weight, l.Scale = p.GetFP8(name+".weight", out, in)
	} else {
		l.Weight = p.Get(name+".weight", out, in)
	}
	l.Bias = p.Get(name+".bias", out)
	l.key = p.Name(name + ".weight")
}

// loadCat loads the checkpoint's linears names (each outs[i] outputs of in
// inputs) as one layer, their outputs side by side, so that one GEMM
// computes them all (a block's q, k, v and the single blocks' MLP input).
func (l *linear) loadCat(p *weights.Builder, names []string, outs []int, in int) {
	w, b := make([]string, len(names)), make([]string, len(names))
	for i, n := range names {
		w[i], b[i] = n+".weight", n+".bias"
	}
	if fp8(p, names[0]) {
		l.Weight, l.Scale = p.CatFP8(w, outs, in)
	} else {
		l.Weight = p.Cat(w, outs, in)
	}
	l.Bias = p.Cat(b, outs)
	l.key = p.Name(w[0])
}

func (l *linear) forward(s *tensor.Scope, x *tensor.Tensor) *tensor.Tensor {
	return l.apply(s, x, l.Bias)
}

// apply is x·Weightᵀ + bias (bias nil: none).
func (l *linear) apply(s *tensor.Scope, x, bias *tensor.Tensor) *tensor.Tensor {
	if l.Scale != nil {
		var y *tensor.Tensor
		if l.FP8Compute {
			y = s.LinearFP8Compute(x, l.Weight, l.Scale, bias)
		} else {
			y = s.LinearFP8(x, l.Weight, l.Scale, bias)
		}
		if l.LoRA == nil {
			return y
		}
		down := s.Linear(x, l.LoRA.A, nil)
		up := s.Linear(down, l.LoRA.B, nil)
		out := s.Add(y, up)
		s.Free(down, up, y)
		return out
	}
	return s.Linear(x, l.Weight, bias)
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
