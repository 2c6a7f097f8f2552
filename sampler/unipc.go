package sampler

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/framepack-go/framepack/tensor"
)

// Step is reported after every sampler iteration. Its tensors belong to the
// sampler and are valid only during the callback.
type Step struct {
	Index, Steps int            // iteration i of Steps (0-based)
	Sigma        float32        // σ_i
	X            *tensor.Tensor // the sample after this iteration's update
	Denoised     *tensor.Tensor // the latest x0 prediction
}

// Callback receives every Step; an error it returns stops sampling and is
// returned by the sampler.
type Callback func(Step) error

// UniPC runs FramePack's flow-matching UniPC (variant bh1, order up to 3)
// from x at sigmas[0] down the schedule: len(sigmas)−1 iterations and as
// many denoiser calls. It returns the last x0 prediction (made at the last
// nonzero σ; σ_n = 0 is never evaluated and the final corrected x is
// discarded, as in the reference). The result is allocated in s; x is not
// modified. Cancelling ctx stops before the next denoiser call and returns
// ctx.Err().
func UniPC(ctx context.Context, s *tensor.Scope, d Denoiser, x *tensor.Tensor, sigmas []float32, cb Callback) (out *tensor.Tensor, err error) {
	n := len(sigmas) - 1
	if n < 1 {
		return nil, fmt.Errorf("sampler: need at least 1 step (2 sigmas), have %d sigmas", len(sigmas))
	}
	for i := 0; i < n; i++ {
		si := sigmas[i]
		if !(si > 0) || math.IsInf(float64(si), 0) || (i > 0 && !(si < sigmas[i-1])) {
			return nil, fmt.Errorf("sampler: sigmas must be finite, positive and decreasing before the last; have %v", sigmas)
		}
	}
	if x.DType() != tensor.F32 {
		return nil, fmt.Errorf("sampler: latents must be f32, have %s", x.DType())
	}
	order := min(3, n-1)

	ws := s.Child() // the running state: x and the x0 history
	defer ws.Close()
	var stop error
	opErr := tensor.Catch(func() {
		var ms []*tensor.Tensor // x0 predictions, oldest first
		var ts []float32        // their σ
		for i := 0; i < n; i++ {
			if stop = ctx.Err(); stop != nil {
				return
			}
			t := sigmas[i]
			st := ws.Child()
			var m *tensor.Tensor
			if i == 0 {
				m = d(st, x, t)
				checkPrediction(m, x)
				st.Keep(m)
			} else {
				xNew, mNew := unipcUpdate(st, d, x, ms, ts, t, min(i, order))
				st.Keep(xNew, mNew)
				ws.Free(x) // frees only what the sampler made
				x, m = xNew, mNew
			}
			st.Close()
			ms, ts = append(ms, m), append(ts, t)
			if order > 0 && len(ms) > order {
				ws.Free(ms[:len(ms)-order]...)
				ms, ts = ms[len(ms)-order:], ts[len(ts)-order:]
			}
			if cb != nil {
				if stop = cb(Step{Index: i, Steps: n, Sigma: t, X: x, Denoised: ms[len(ms)-1]}); stop != nil {
					return
				}
			}
		}
		out = ms[len(ms)-1]
		ws.Keep(out)
	})
	if opErr != nil {
		return nil, fmt.Errorf("sampler: %w", opErr)
	}
	if stop != nil {
		return nil, stop
	}
	return out, nil
}

// unipcUpdate is one UniPC step of order k from the history (ms, ts) to σ=t:
// a predictor, one denoiser call on it, and a corrector. It returns the
// corrected x and the new x0 prediction (made on the predicted x).
func unipcUpdate(s *tensor.Scope, d Denoiser, x *tensor.Tensor, ms []*tensor.Tensor, ts []float32, t float32, k int) (*tensor.Tensor, *tensor.Tensor) {
	c := unipcCoefficients(ts[len(ts)-k:], t)
	mp := ms[len(ms)-1]

	// D1_j = (m_j − m_p)/r_j for the k−1 older predictions.
	d1 := make([]*tensor.Tensor, k-1)
	for j := 1; j < k; j++ {
		d1[j-1] = s.Div(s.Sub(ms[len(ms)-1-j], mp), scalar(s, c.r[j-1]))
	}

	// The exact flow-matching DDIM step, x0 + (t/t_p)(x − x0).
	xt := s.Sub(s.Scale(x, c.ratio), s.Scale(mp, c.phi1))

	xPred := xt
	if len(c.rhoP) > 0 {
		xPred = s.Sub(xt, s.Scale(weighted(s, d1, c.rhoP), c.bh))
	}
	m := d(s, xPred, t)
	checkPrediction(m, x)

	corr := s.Scale(s.Sub(m, mp), c.rhoC[k-1])
	if k > 1 {
		corr = s.Add(weighted(s, d1, c.rhoC[:k-1]), corr)
	}
	return s.Sub(xt, s.Scale(corr, c.bh)), m
}

// weighted is Σ_j w_j·ts_j.
func weighted(s *tensor.Scope, ts []*tensor.Tensor, w []float32) *tensor.Tensor {
	acc := s.Scale(ts[0], w[0])
	for j := 1; j < len(ts); j++ {
		acc = s.Add(acc, s.Scale(ts[j], w[j]))
	}
	return acc
}

func checkPrediction(m, x *tensor.Tensor) {
	if m == nil || !slices.Equal(m.Shape(), x.Shape()) || m.DType() != tensor.F32 {
		tensor.Fail("sampler", "denoiser returned %v for latents %v", m, x)
	}
}

// unipcCoef are the scalars of one bh1 update.
type unipcCoef struct {
	ratio float32   // t / t_p
	phi1  float32   // expm1(−h) = t/t_p − 1
	bh    float32   // B_h = −h (bh1)
	r     []float32 // r_j = (λ(t_j) − λ(t_p))/h for the k−1 older times
	rhoP  []float32 // predictor weights (k−1; none for k = 1)
	rhoC  []float32 // corrector weights (k)
}

// unipcCoefficients computes the update from the history times ts (oldest
// first; the last is t_p) to t at order k = len(ts), in float32 as the
// reference does, with λ(t) = −ln t and h = λ(t) − λ(t_p).
func unipcCoefficients(ts []float32, t float32) unipcCoef {
	k := len(ts)
	tp := ts[k-1]
	lp := -log32(tp)
	h := -log32(t) - lp
	c := unipcCoef{ratio: t / tp}

	rks := make([]float32, k)
	for j := 1; j < k; j++ {
		rks[j-1] = (-log32(ts[k-1-j]) - lp) / h
	}
	rks[k-1] = 1
	c.r = rks[:k-1]

	hh := -h
	c.phi1 = float32(math.Expm1(float64(hh)))
	c.bh = hh
	g := c.phi1/hh - 1 // h·φ_k(h) recursion
	fact := 1
	R := make([][]float32, k)
	b := make([]float32, k)
	for q := 1; q <= k; q++ {
		R[q-1] = make([]float32, k)
		for j, rj := range rks {
			R[q-1][j] = pow32(rj, q-1)
		}
		b[q-1] = g * float32(fact) / c.bh
		fact *= q + 1
		g = g/hh - float32(1/float64(fact))
	}

	switch k {
	case 1:
		c.rhoC = []float32{0.5}
	case 2:
		c.rhoP = []float32{0.5}
		c.rhoC = solve32(R, b)
	case 3:
		c.rhoP = solve32([][]float32{R[0][:2], R[1][:2]}, b[:2])
		c.rhoC = solve32(R, b)
	default:
		panic("sampler: UniPC order above 3")
	}
	return c
}

func log32(x float32) float32 { return float32(math.Log(float64(x))) }

// pow32 is r^e for the small integer exponents of the R matrix.
func pow32(r float32, e int) float32 {
	p := float32(1)
	for range e {
		p *= r
	}
	return p
}

// solve32 solves A·x = b by Gaussian elimination with partial pivoting in
// float32 (LAPACK's sgesv does the same for these 2×2 and 3×3 systems).
func solve32(A [][]float32, b []float32) []float32 {
	n := len(b)
	a := make([][]float32, n)
	for i := range a {
		a[i] = append(append([]float32(nil), A[i][:n]...), b[i])
	}
	for col := 0; col < n; col++ {
		p := col
		for r := col + 1; r < n; r++ {
			if abs32(a[r][col]) > abs32(a[p][col]) {
				p = r
			}
		}
		a[col], a[p] = a[p], a[col]
		if a[col][col] == 0 {
			panic(&tensor.OpError{Op: "sampler", Err: errors.New("singular UniPC system (repeated sigmas?)")})
		}
		for r := col + 1; r < n; r++ {
			f := a[r][col] / a[col][col]
			for j := col; j <= n; j++ {
				a[r][j] -= float32(f * a[col][j])
			}
		}
	}
	x := make([]float32, n)
	for i := n - 1; i >= 0; i-- {
		v := a[i][n]
		for j := i + 1; j < n; j++ {
			v -= float32(a[i][j] * x[j])
		}
		x[i] = v / a[i][i]
	}
	return x
}

func abs32(x float32) float32 { return float32(math.Abs(float64(x))) }
