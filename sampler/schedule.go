package sampler

import (
	"fmt"
	"math"

	"github.com/framepack-go/framepack/tensor"
)

// FluxMu is FramePack's calculate_flux_mu: the time-shift exponent on the
// line through (256 tokens, 0.5) and (4096 tokens, 1.15), capped at ln 7.
// seqLen is the token count of the noisy window, T·h·w/4 for 2×2 patches.
// Every 640 bucket is far past the cap, so the demo always runs at shift 7.
func FluxMu(seqLen int) float64 {
	const x1, y1, x2, y2 = 256.0, 0.5, 4096.0, 1.15
	k := (y2 - y1) / (x2 - x1)
	b := y1 - k*x1
	return math.Min(k*float64(seqLen)+b, math.Log(7.0))
}

// ShiftMu is the exponent for an explicit shift (FramePack's shift argument).
func ShiftMu(shift float64) float64 { return math.Log(shift) }

// Sigmas is the flow-matching noise schedule for steps steps: steps+1 values
// from 1 down to 0, σ = e^mu / (e^mu + 1/t − 1) over t = linspace(1, 0,
// steps+1), computed in float32 operation by operation as torch computes it
// (so σ_i and the bf16 timestep σ_i·1000 match the reference exactly).
func Sigmas(steps int, mu float64) ([]float32, error) {
	if steps < 1 {
		return nil, fmt.Errorf("sampler: steps must be at least 1, have %d", steps)
	}
	if math.IsNaN(mu) || math.IsInf(mu, 0) {
		return nil, fmt.Errorf("sampler: bad time-shift exponent mu=%v", mu)
	}
	e := float32(math.Exp(mu))
	t := Linspace32(1, 0, steps+1)
	out := make([]float32, len(t))
	for i, ti := range t {
		// torch evaluates e/(e + (1/t − 1)) as reciprocal(e + (reciprocal(t) − 1))·e.
		a := 1/ti - 1 // +Inf at t = 0, giving σ = 0
		out[i] = 1 / (e + a) * e
	}
	return out, nil
}

// Linspace32 is torch.linspace(start, end, n) in float32 on the CPU (its
// scalar path): the first half counts up from start, the second half back
// from end, so both ends are exact. (A torch build whose vector width is 8
// fills the first 16 values in vector chunks instead, which moves σ_13 of
// the 25-step schedule by one ulp; the spec's measured table is this one.)
func Linspace32(start, end float32, n int) []float32 {
	out := make([]float32, n)
	if n == 1 {
		out[0] = start
		return out
	}
	step := (end - start) / float32(n-1)
	half := n / 2
	for i := range out {
		if i < half {
			out[i] = start + float32(step*float32(i))
		} else {
			out[i] = end - float32(step*float32(n-i-1))
		}
	}
	return out
}

// Timestep is what the transformer sees for σ: σ·1000 in float32, rounded
// to bfloat16 when the compute dtype is bf16 (FramePack's fm_wrapper casts
// it to the transformer's dtype).
func Timestep(sigma float32, bf16 bool) float32 {
	t := float32(sigma * 1000)
	if bf16 {
		t = tensor.RoundBF16(t)
	}
	return t
}

// GuidanceValue is the distilled-guidance input for scale gs: gs·1000 as a
// float32 tensor, rounded to bf16 when the compute dtype is bf16 (gs = 10
// gives 9984).
func GuidanceValue(gs float64, bf16 bool) float32 {
	g := float32(gs * 1000)
	if bf16 {
		g = tensor.RoundBF16(g)
	}
	return g
}
