package sampler

import (
	"fmt"
	"math"
	"slices"

	"github.com/framepack-go/framepack/tensor"
)

// Model predicts the flow-matching velocity of the transformer.
//
// Velocity runs one forward pass on x (B, C, T, H, W), f32, at the given
// timestep (σ·1000 as the transformer sees it) and distilled guidance
// (gs·1000), with the positive conditioning or, when negative is set, the
// negative one. It returns a new f32 tensor of x's shape allocated in s.
// Errors panic with *tensor.OpError, as every op inside a scope does.
type Model interface {
	Velocity(s *tensor.Scope, x *tensor.Tensor, timestep, guidance float32, negative bool) *tensor.Tensor
}

// Guidance configures the model wrapper (FramePack's fm_wrapper).
type Guidance struct {
	// CFG is the real classifier-free guidance scale; 1 skips the negative
	// pass.
	CFG float64
	// Rescale is the CFG rescale factor in [0, 1]; 0 disables it.
	Rescale float64
	// Distilled is the distilled-guidance scale gs (the model sees gs·1000).
	Distilled float64
	// BF16 rounds the model input x, the timestep and the guidance to
	// bfloat16 where FramePack does when the transformer runs in bf16; the
	// x0 prediction then uses the rounded x.
	BF16 bool
}

func (g Guidance) validate() error {
	switch {
	case math.IsNaN(g.CFG) || g.CFG < 0:
		return fmt.Errorf("sampler: CFG scale must be ≥ 0, have %v", g.CFG)
	case math.IsNaN(g.Rescale) || g.Rescale < 0 || g.Rescale > 1:
		return fmt.Errorf("sampler: CFG rescale must be in [0, 1], have %v", g.Rescale)
	case math.IsNaN(g.Distilled) || g.Distilled < 0:
		return fmt.Errorf("sampler: distilled guidance must be ≥ 0, have %v", g.Distilled)
	}
	return nil
}

// Denoiser predicts the clean sample x0 from x at noise level σ. The result
// is a new f32 tensor of x's shape allocated in s.
type Denoiser func(s *tensor.Scope, x *tensor.Tensor, sigma float32) *tensor.Tensor

// NewDenoiser wraps a velocity model as FramePack's fm_wrapper does:
//
//	x_in = x (bf16-rounded when g.BF16), t = σ·1000, v = v_pos
//	v = v_neg + cfg·(v_pos − v_neg)                          when cfg ≠ 1
//	v = rs·v·std(v_pos)/std(v) + (1 − rs)·v                    when rs ≠ 0
//	x0 = x_in − v·σ
//
// std is torch.std (unbiased) over every axis but the batch.
func NewDenoiser(m Model, g Guidance) (Denoiser, error) {
	if m == nil {
		return nil, fmt.Errorf("sampler: no model")
	}
	if err := g.validate(); err != nil {
		return nil, err
	}
	guidance := GuidanceValue(g.Distilled, g.BF16)
	return func(s *tensor.Scope, x *tensor.Tensor, sigma float32) *tensor.Tensor {
		if x.DType() != tensor.F32 {
			tensor.Fail("sampler", "latents must be f32, have %s", x.DType())
		}
		xin := x
		if g.BF16 {
			xin = s.Cast(s.Cast(x, tensor.BF16), tensor.F32)
		}
		t := Timestep(sigma, g.BF16)
		v := velocity(s, m, xin, t, guidance, false)
		if g.CFG != 1 {
			vNeg := velocity(s, m, xin, t, guidance, true)
			vPos := v
			v = s.Add(vNeg, s.Scale(s.Sub(vPos, vNeg), float32(g.CFG)))
			if g.Rescale != 0 {
				v = rescaleCFG(s, v, vPos, g.Rescale)
			}
		}
		return s.Sub(xin, s.Mul(v, scalar(s, sigma)))
	}, nil
}

// velocity runs the model and checks what it returns.
func velocity(s *tensor.Scope, m Model, x *tensor.Tensor, t, g float32, negative bool) *tensor.Tensor {
	v := m.Velocity(s, x, t, g, negative)
	if v == nil || !slices.Equal(v.Shape(), x.Shape()) {
		var have []int
		if v != nil {
			have = v.Shape()
		}
		tensor.Fail("sampler", "model returned velocity %v for latents %v", have, x.Shape())
	}
	return s.Cast(v, tensor.F32)
}

// rescaleCFG is diffusers' rescale_noise_cfg: it pulls the guided
// prediction's per-sample std back towards the positive prediction's.
func rescaleCFG(s *tensor.Scope, cfg, pos *tensor.Tensor, rs float64) *tensor.Tensor {
	b := cfg.Dim(0)
	n := cfg.Numel() / b
	stdPos := s.Std(pos.Reshape(b, n))
	stdCfg := s.Std(cfg.Reshape(b, n))
	ratio := s.Div(stdPos, stdCfg).Reshape(b, 1)
	rescaled := s.Mul(cfg.Reshape(b, n), ratio)
	out := s.Add(s.Scale(rescaled, float32(rs)), s.Scale(cfg.Reshape(b, n), float32(1-rs)))
	return out.Reshape(cfg.Shape()...)
}

// scalar is a one-element f32 tensor for broadcasting ops, so a division or
// product by a scalar rounds exactly as torch's does.
func scalar(s *tensor.Scope, v float32) *tensor.Tensor {
	return s.Full(tensor.F32, float64(v), 1)
}
