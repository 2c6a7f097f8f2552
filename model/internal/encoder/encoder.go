// Package encoder is the pre-LayerNorm transformer encoder layer that CLIP's
// text model and SigLIP's vision tower share: x += attn(LN1(x)); x +=
// fc2(act(fc1(LN2(x)))), with biases everywhere.
package encoder

import (
	"fmt"

	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/weights"
)

// Layer is one encoder layer, with transformers' weight names.
type Layer struct {
	ln1W, ln1B, ln2W, ln2B *tensor.Tensor
	qW, qB, kW, kB, vW, vB *tensor.Tensor
	oW, oB                 *tensor.Tensor
	fc1W, fc1B, fc2W, fc2B *tensor.Tensor
}

// Act is the MLP's activation.
type Act int

const (
	QuickGELU Act = iota // x·σ(1.702x), CLIP's "quick_gelu"
	GELU                 // erf form, "gelu"
	GELUTanh             // "gelu_pytorch_tanh"
)

// ParseAct maps a config's hidden_act.
func ParseAct(name string) (Act, error) {
	switch name {
	case "quick_gelu":
		return QuickGELU, nil
	case "gelu":
		return GELU, nil
	case "gelu_pytorch_tanh":
		return GELUTanh, nil
	}
	return 0, fmt.Errorf("unsupported hidden_act %q", name)
}

// LoadLayers loads count layers named prefix+"N." for hidden size d and MLP
// size f.
func LoadLayers(l *weights.Builder, prefix string, count, d, f int) []Layer {
	out := make([]Layer, count)
	for i := range out {
		p := fmt.Sprintf("%s%d.", prefix, i)
		out[i] = Layer{
			ln1W: l.Get(p+"layer_norm1.weight", d), ln1B: l.Get(p+"layer_norm1.bias", d),
			ln2W: l.Get(p+"layer_norm2.weight", d), ln2B: l.Get(p+"layer_norm2.bias", d),
			qW: l.Get(p+"self_attn.q_proj.weight", d, d), qB: l.Get(p+"self_attn.q_proj.bias", d),
			kW: l.Get(p+"self_attn.k_proj.weight", d, d), kB: l.Get(p+"self_attn.k_proj.bias", d),
			vW: l.Get(p+"self_attn.v_proj.weight", d, d), vB: l.Get(p+"self_attn.v_proj.bias", d),
			oW: l.Get(p+"self_attn.out_proj.weight", d, d), oB: l.Get(p+"self_attn.out_proj.bias", d),
			fc1W: l.Get(p+"mlp.fc1.weight", f, d), fc1B: l.Get(p+"mlp.fc1.bias", f),
			fc2W: l.Get(p+"mlp.fc2.weight", d, f), fc2B: l.Get(p+"mlp.fc2.bias", d),
		}
	}
	return out
}

// Params are what a forward pass needs besides the weights.
type Params struct {
	Heads  int
	Eps    float32
	Act    Act
	Causal bool
}

// Forward runs the layer on x (B, L, D); intermediates are freed before it
// returns.
func (ly *Layer) Forward(s *tensor.Scope, x *tensor.Tensor, p Params) *tensor.Tensor {
	b, n, d := x.Dim(0), x.Dim(1), x.Dim(2)
	hd := d / p.Heads
	c := s.Child()
	defer c.Close()
	r := c.LayerNorm(x, ly.ln1W, ly.ln1B, p.Eps)
	q := c.Linear(r, ly.qW, ly.qB).Reshape(b, n, p.Heads, hd)
	k := c.Linear(r, ly.kW, ly.kB).Reshape(b, n, p.Heads, hd)
	v := c.Linear(r, ly.vW, ly.vB).Reshape(b, n, p.Heads, hd)
	a := c.Attention(q, k, v, tensor.AttnParams{Causal: p.Causal}).Reshape(b, n, d)
	x = c.Add(x, c.Linear(a, ly.oW, ly.oB))
	r = c.Linear(c.LayerNorm(x, ly.ln2W, ly.ln2B, p.Eps), ly.fc1W, ly.fc1B)
	switch p.Act {
	case QuickGELU:
		r = c.QuickGELU(r)
	case GELU:
		r = c.GELU(r)
	default:
		r = c.GELUTanh(r)
	}
	out := c.Add(x, c.Linear(r, ly.fc2W, ly.fc2B))
	c.Keep(out)
	return out
}
