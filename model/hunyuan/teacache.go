package hunyuan

import (
	"strconv"

	"github.com/framepack-go/framepack/tensor"
)

// teaCache is FramePack's TeaCache: a call whose first-block modulated input
// moved little since the last computed call (by a rescaled relative L1
// distance, accumulated) reuses the last residual of the blocks instead of
// running them. The first and last call of each num_steps cycle always
// compute.
type teaCache struct {
	enabled bool
	steps   int
	thresh  float64
	cnt     int
	acc     float64

	prevMod, prevResidual *tensor.Tensor // owned by Model.state

	computed, skipped int
}

// InitTeaCache resets TeaCache (FramePack's initialize_teacache): enable it
// or not, for a sampler of steps calls, with the given threshold (0.15 in
// FramePack; 0.1 skips less). Call it before each section's sampling. It
// disables MagCache, whose place it takes.
func (m *Model) InitTeaCache(enable bool, steps int, relL1Thresh float32) {
	m.tc.free(m.state)
	m.mc.free(m.state)
	m.mc = magCache{}
	m.calls, m.skips = 0, nil
	m.tc = teaCache{
		enabled: enable,
		steps:   steps,
		// The threshold as the decimal the caller wrote (0.15, not
		// float32(0.15)), as the reference compares with a Python float.
		thresh: decimal64(relL1Thresh),
	}
}

// TeaCacheStats counts the calls since InitTeaCache that ran the blocks and
// those that reused the residual.
func (m *Model) TeaCacheStats() (computed, skipped int) { return m.tc.computed, m.tc.skipped }

// CacheCalls is the number of calls since the last InitTeaCache or
// InitMagCache, and the 0-based indices of those that reused the cached
// residual (TeaCache's or MagCache's) instead of running the blocks.
func (m *Model) CacheCalls() (calls int, skipped []int) {
	return m.calls, append([]int(nil), m.skips...)
}

// teaCachePoly is the reference's rescale polynomial (numpy poly1d,
// evaluated by Horner's rule in float64 without fused multiply-adds).
func teaCachePoly(x float64) float64 {
	c := [...]float64{7.33226126e+02, -4.01131952e+02, 6.75869174e+01, -3.14987800e+00, 9.61237896e-02}
	y := c[0]
	for _, k := range c[1:] {
		y = float64(y*x) + k
	}
	return y
}

// step decides whether this call runs the blocks. rel is the relative L1
// distance of the modulated input to the previous call's; it is asked for
// only when needed.
func (tc *teaCache) step(rel func() float64) bool {
	var calc bool
	if tc.cnt == 0 || tc.cnt == tc.steps-1 {
		calc = true
		tc.acc = 0
	} else {
		tc.acc += teaCachePoly(rel())
		calc = tc.acc >= tc.thresh
		if calc {
			tc.acc = 0
		}
	}
	tc.cnt++
	if tc.cnt == tc.steps {
		tc.cnt = 0
	}
	return calc
}

// keep replaces *slot by a copy of t owned by the state scope.
func (tc *teaCache) keep(state *tensor.Scope, slot **tensor.Tensor, t *tensor.Tensor) {
	if *slot != nil {
		state.Free(*slot)
	}
	*slot = state.Clone(t)
}

func (tc *teaCache) free(state *tensor.Scope) {
	if state == nil {
		return
	}
	state.Free(tc.prevMod, tc.prevResidual)
	tc.prevMod, tc.prevResidual = nil, nil
}

// relL1 is mean|mod − prev| / mean|prev| as the reference computes it: the
// difference in the compute dtype, each mean rounded to the compute dtype
// (accumulated in f32 or better), and the quotient rounded too.
func relL1(s *tensor.Scope, mod, prev *tensor.Tensor, dt tensor.DType, sh *shards) float64 {
	num := absMean(s, s.Sub(mod, prev), dt, sh)
	den := absMean(s, prev, dt, sh)
	return float64(tensor.Rounder(dt)(num / den))
}

// absMean is mean|x| over every element, rounded to dt; x (B, L, D) is this
// rank's shard of the tokens when sh is set, and the mean is the whole's.
func absMean(s *tensor.Scope, x *tensor.Tensor, dt tensor.DType, sh *shards) float32 {
	cols := x.Dim(x.Rank() - 1)
	rows := x.Numel() / cols
	means := tensor.Float32s(s.ReduceLast(tensor.ReduceAbsMean, s.Cast(x, tensor.F32).Reshape(rows, cols)))
	if sh != nil {
		means = sh.rowMeans(s, means, x.Dim(0))
		rows = len(means)
	}
	var sum float64
	for _, v := range means {
		sum += float64(v)
	}
	return tensor.Rounder(dt)(float32(sum / float64(rows)))
}

// decimal64 is the float64 of the shortest decimal that reads back as f.
func decimal64(f float32) float64 {
	v, _ := strconv.ParseFloat(strconv.FormatFloat(float64(f), 'g', -1, 32), 64)
	return v
}
