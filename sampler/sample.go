package sampler

import (
	"context"
	"fmt"
	"math"

	"github.com/framepack-go/framepack/tensor"
)

// Config is one section's sampling: FramePack's sample_hunyuan with
// sampler='unipc'.
type Config struct {
	Steps int
	// Shift fixes the time shift (mu = ln shift); 0 derives mu from the
	// token count of the latents (FluxMu), as the demo does.
	Shift float64
	Guidance
}

// Sample denoises noise (B, C, T, H, W), f32, with the model and returns the
// final x0 prediction (allocated in s). The schedule comes from the token
// count T·H·W/4 unless c.Shift is set. cb, when not nil, sees every step.
func Sample(ctx context.Context, s *tensor.Scope, m Model, noise *tensor.Tensor, c Config, cb Callback) (*tensor.Tensor, error) {
	if noise == nil || noise.Rank() != 5 {
		return nil, fmt.Errorf("sampler: noise must be (B, C, T, H, W), have %v", noise)
	}
	if c.Steps < 1 {
		return nil, fmt.Errorf("sampler: steps must be at least 1, have %d", c.Steps)
	}
	if math.IsNaN(c.Shift) || c.Shift < 0 {
		return nil, fmt.Errorf("sampler: shift must be > 0 (or 0 for automatic), have %v", c.Shift)
	}
	sigmas, err := Sigmas(c.Steps, MuFor(noise.Shape(), c.Shift))
	if err != nil {
		return nil, err
	}
	d, err := NewDenoiser(m, c.Guidance)
	if err != nil {
		return nil, err
	}
	return UniPC(ctx, s, d, noise, sigmas, cb)
}

// MuFor is the time-shift exponent for latents of shape (B, C, T, H, W):
// from shift when it is set, else from the token count T·H·W/4.
func MuFor(shape []int, shift float64) float64 {
	if shift > 0 {
		return ShiftMu(shift)
	}
	return FluxMu(shape[2] * shape[3] * shape[4] / 4)
}
