package hunyuan

import (
	"fmt"
	"math"

	"github.com/framepack-go/framepack/tensor"
)

// MagCache (Ma et al. 2025, "MagCache: Fast Video Generation with
// Magnitude-Aware Cache"), as MagCache4FramePack runs it on FramePack: the
// ratio of the blocks' residual norms between consecutive steps follows a
// curve that is the same for every input, calibrated once per model
// (mag_ratios). A call may reuse the last computed residual while the
// accumulated error that the curve predicts, Σ|1 − Π ratio|, stays within
// the threshold, for at most K calls in a row, never in the first
// retention·steps calls, and never where the step's own ratio is more than
// 0.06 from 1. The decision depends on the call's index alone, not on the
// data.

// MagCache4FramePack's calibrated magnitude ratios for 25 steps
// (magcache_demo_gradio.py and magcache_demo_gradio_f1.py,
// initialize_magcache): index i is the ratio at the i-th call of a
// section's cycle.
var (
	MagRatiosFramePack = []float64{1.0, 1.26562, 1.23438, 1.03125, 1.02344, 1.03906, 1.01562, 1.03906, 1.05469,
		1.02344, 1.03906, 0.99609, 1.03125, 1.02344, 1.01562, 1.02344, 1.00781, 1.04688, 0.98828, 1.0, 1.00781,
		0.98828, 0.94141, 0.94141, 0.78906}
	MagRatiosF1 = []float64{1.0, 1.25781, 1.08594, 1.02344, 1.00781, 1.02344, 1.00781, 1.02344, 1.05469,
		0.99609, 1.03906, 1.00781, 1.01562, 1.00781, 1.02344, 1.01562, 0.98047, 1.05469, 0.98047, 0.96875,
		1.03125, 0.97266, 0.9375, 0.96484, 0.78516}
)

// MagCache4FramePack's defaults (its demo's sliders).
const (
	MagCacheThreshold = 0.1 // accumulated error allowed
	MagCacheK         = 3   // calls in a row that may reuse the residual
	MagCacheRetention = 0.2 // share of the first calls that always compute
)

// MagCacheMaxSkipRatio is how far from 1 a step's own ratio may be for the
// step to reuse the residual (a constant of the reference).
const MagCacheMaxSkipRatio = 0.06

// MagRatios is the calibrated curve for a sampler of steps calls:
// MagCache4FramePack's nearest_interp, which maps call i to the curve's
// point round(i·(len−1)/(steps−1)) (NumPy rounds halves to even), and the
// curve's last point for a single step.
func MagRatios(curve []float64, steps int) []float64 {
	if steps <= 0 || len(curve) == 0 {
		return nil
	}
	if len(curve) == steps {
		return append([]float64(nil), curve...)
	}
	if steps == 1 {
		return []float64{curve[len(curve)-1]}
	}
	scale := float64(len(curve)-1) / float64(steps-1)
	out := make([]float64, steps)
	for i := range out {
		out[i] = curve[int(math.RoundToEven(float64(i)*scale))]
	}
	return out
}

// MagCacheSettings are MagCache's knobs for one section.
type MagCacheSettings struct {
	Ratios    []float64 // one per call of the cycle (MagRatios)
	Threshold float64   // accumulated error allowed (> 0)
	K         int       // calls in a row that may reuse the residual (≥ 1)
	Retention float64   // share of the first calls that always compute (0–1)
}

type magCache struct {
	enabled bool
	MagCacheSettings
	cnt int
	// The error accumulated since the last computed call.
	accRatio, accErr float64
	accSteps         int

	prevResidual *tensor.Tensor // owned by Model.state
}

func (mc *magCache) free(state *tensor.Scope) {
	if state != nil && mc.prevResidual != nil {
		state.Free(mc.prevResidual)
	}
	mc.prevResidual = nil
}

// InitMagCache resets MagCache (MagCache4FramePack's initialize_magcache)
// and enables it with set, or disables it with nil; it also disables
// TeaCache, whose place it takes. Call it before each section's sampling;
// the cycle is len(set.Ratios) calls.
func (m *Model) InitMagCache(set *MagCacheSettings) error {
	m.InitTeaCache(false, 0, 0)
	if set == nil {
		return nil
	}
	switch {
	case len(set.Ratios) == 0:
		return fmt.Errorf("magcache: no magnitude ratios")
	case !(set.Threshold > 0) || math.IsInf(set.Threshold, 0):
		return fmt.Errorf("magcache: threshold must be positive and finite, have %v", set.Threshold)
	case set.K < 1:
		return fmt.Errorf("magcache: K must be at least 1, have %d", set.K)
	case !(set.Retention >= 0 && set.Retention <= 1):
		return fmt.Errorf("magcache: retention ratio must be in 0–1, have %v", set.Retention)
	}
	m.mc = magCache{enabled: true, MagCacheSettings: *set}
	m.mc.Ratios = append([]float64(nil), set.Ratios...)
	m.mc.accRatio = 1
	return nil
}

// step decides whether this call runs the blocks (in float64, as the
// reference's NumPy and Python floats).
func (mc *magCache) step() bool {
	steps := len(mc.Ratios)
	if mc.cnt == 0 {
		mc.accRatio, mc.accSteps, mc.accErr = 1, 0, 0
	}
	skip := false
	if mc.cnt >= int(mc.Retention*float64(steps)) && mc.cnt >= 1 {
		r := mc.Ratios[mc.cnt]
		mc.accRatio = float64(mc.accRatio * r)
		mc.accErr = float64(mc.accErr + math.Abs(1-mc.accRatio))
		mc.accSteps++
		if mc.accErr <= mc.Threshold && mc.accSteps <= mc.K && math.Abs(1-r) <= MagCacheMaxSkipRatio {
			skip = true
		} else {
			mc.accRatio, mc.accSteps, mc.accErr = 1, 0, 0
		}
	}
	mc.cnt++
	if mc.cnt == steps {
		mc.cnt = 0
	}
	return !skip
}

// MagCacheSkips is which of steps calls MagCache with set would skip
// (0-based), from a fresh start: the schedule, which depends on nothing
// else.
func MagCacheSkips(set MagCacheSettings, calls int) []int {
	mc := magCache{enabled: true, MagCacheSettings: set}
	var out []int
	for i := range calls {
		if !mc.step() {
			out = append(out, i)
		}
	}
	return out
}
