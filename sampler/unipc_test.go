package sampler

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/framepack-go/framepack/backend/cpu"
	"github.com/framepack-go/framepack/tensor"
)

// funcModel is a velocity model given by a Go function on host values.
type funcModel struct {
	f     func(x []float32, timestep, guidance float32, negative bool) []float32
	calls []call
}

type call struct {
	timestep, guidance float32
	negative           bool
}

func (m *funcModel) Velocity(s *tensor.Scope, x *tensor.Tensor, timestep, guidance float32, negative bool) *tensor.Tensor {
	m.calls = append(m.calls, call{timestep, guidance, negative})
	v := m.f(tensor.Float32s(x), timestep, guidance, negative)
	return s.To(tensor.FromFloat32(v, x.Shape()...))
}

// refUniPC is §2.4 of the spec in float64 on plain vectors, written
// independently of the tensor implementation.
func refUniPC(d func(x []float64, sigma float64) []float64, x []float64, sigmas []float64) []float64 {
	n := len(sigmas) - 1
	K := min(3, n-1)
	var M [][]float64
	var T []float64
	for i := 0; i < n; i++ {
		t := sigmas[i]
		if i == 0 {
			M, T = [][]float64{d(x, t)}, []float64{t}
			continue
		}
		k := K
		if i < K {
			k = i
		}
		tp, mp := T[len(T)-1], M[len(M)-1]
		h := math.Log(tp / t)
		hh := -h
		var r []float64
		var D1 [][]float64
		for j := 1; j < k; j++ {
			tj, mj := T[len(T)-1-j], M[len(M)-1-j]
			rj := math.Log(tp/tj) / h
			r = append(r, rj)
			D1 = append(D1, axpby(1/rj, mj, -1/rj, mp))
		}
		r = append(r, 1)
		phi1 := math.Expm1(hh)
		bh := hh
		g := phi1/hh - 1
		fact := 1.0
		b := make([]float64, k)
		R := make([][]float64, k)
		for q := 1; q <= k; q++ {
			b[q-1] = g * fact / bh
			fact *= float64(q + 1)
			g = g/hh - 1/fact
			R[q-1] = make([]float64, k)
			for j := range r {
				R[q-1][j] = math.Pow(r[j], float64(q-1))
			}
		}
		var rhoP, rhoC []float64
		switch k {
		case 1:
			rhoC = []float64{0.5}
		case 2:
			rhoP = []float64{0.5}
			rhoC = cramer(R, b)
		case 3:
			rhoP = cramer([][]float64{R[0][:2], R[1][:2]}, b[:2])
			rhoC = cramer(R, b)
		}
		xt := axpby(t/tp, x, -phi1, mp)
		xp := append([]float64(nil), xt...)
		for j := range rhoP {
			xp = axpby(1, xp, -bh*rhoP[j], D1[j])
		}
		mt := d(xp, t)
		x = axpby(1, xt, -bh*rhoC[k-1], axpby(1, mt, -1, mp))
		for j := 0; j < k-1; j++ {
			x = axpby(1, x, -bh*rhoC[j], D1[j])
		}
		M, T = append(M, mt), append(T, t)
		if len(M) > K {
			M, T = M[len(M)-K:], T[len(T)-K:]
		}
	}
	return M[len(M)-1]
}

func axpby(a float64, x []float64, b float64, y []float64) []float64 {
	out := make([]float64, len(x))
	for i := range x {
		out[i] = a*x[i] + b*y[i]
	}
	return out
}

// cramer solves 2×2 and 3×3 systems by Cramer's rule.
func cramer(A [][]float64, b []float64) []float64 {
	det := func(m [][]float64) float64 {
		if len(m) == 2 {
			return m[0][0]*m[1][1] - m[0][1]*m[1][0]
		}
		return m[0][0]*(m[1][1]*m[2][2]-m[1][2]*m[2][1]) -
			m[0][1]*(m[1][0]*m[2][2]-m[1][2]*m[2][0]) +
			m[0][2]*(m[1][0]*m[2][1]-m[1][1]*m[2][0])
	}
	n := len(b)
	d := det(A)
	x := make([]float64, n)
	for c := 0; c < n; c++ {
		m := make([][]float64, n)
		for i := range m {
			m[i] = append([]float64(nil), A[i][:n]...)
			m[i][c] = b[i]
		}
		x[c] = det(m) / d
	}
	return x
}

func TestUniPCCoefficients(t *testing.T) {
	s, _ := Sigmas(25, math.Log(7))
	for i := 1; i < 25; i++ {
		k := min(i, 3)
		ts := s[i-k : i]
		c := unipcCoefficients(ts, s[i])
		tp, tt := float64(ts[k-1]), float64(s[i])
		h := math.Log(tp / tt)
		// The reference forms these in float32 as well: the φ recursion
		// divides by h once per order, so its rounding grows like ε/h^k,
		// and the float64 values are met only to within that.
		tol := 2e-5 + 8*0x1p-24/math.Pow(h, float64(k))
		close := func(name string, got float32, want float64) {
			t.Helper()
			if math.Abs(float64(got)-want) > tol*math.Max(1, math.Abs(want)) {
				t.Errorf("step %d (order %d): %s = %v, want %v", i, k, name, got, want)
			}
		}
		close("t/t_p", c.ratio, tt/tp)
		close("phi1", c.phi1, tt/tp-1)
		close("B_h", c.bh, -h)
		// b_q from the φ recursion in float64.
		g := math.Expm1(-h)/(-h) - 1
		fact := 1.0
		b := make([]float64, k)
		for q := 1; q <= k; q++ {
			b[q-1] = g * fact / (-h)
			fact *= float64(q + 1)
			g = g/(-h) - 1/fact
		}
		r := make([]float64, k)
		for j := 1; j < k; j++ {
			r[j-1] = math.Log(tp/float64(ts[k-1-j])) / h
			close("r", c.r[j-1], r[j-1])
		}
		r[k-1] = 1
		switch k {
		case 1:
			if len(c.rhoP) != 0 || len(c.rhoC) != 1 || c.rhoC[0] != 0.5 {
				t.Errorf("order 1: rhoP %v rhoC %v", c.rhoP, c.rhoC)
			}
		case 2:
			// Closed form of the 2×2 solve with R = [[1, 1], [r1, 1]].
			close("rhoP", c.rhoP[0], 0.5)
			close("rhoC0", c.rhoC[0], (b[0]-b[1])/(1-r[0]))
			close("rhoC1", c.rhoC[1], (b[1]-r[0]*b[0])/(1-r[0]))
		case 3:
			R := [][]float64{{1, 1, 1}, {r[0], r[1], 1}, {r[0] * r[0], r[1] * r[1], 1}}
			wantP := cramer([][]float64{R[0][:2], R[1][:2]}, b[:2])
			wantC := cramer(R, b)
			for j := range wantP {
				close("rhoP", c.rhoP[j], wantP[j])
			}
			for j := range wantC {
				close("rhoC", c.rhoC[j], wantC[j])
			}
		}
	}
	// As h → 0 the bh1 weight b_1 tends to 1/2, the order-1 corrector's ρ.
	c := unipcCoefficients([]float32{0.5}, 0.49999)
	if math.Abs(float64(c.bh)) > 1e-4 {
		t.Fatalf("h not small: %v", c.bh)
	}
}

// testDenoise is a smooth nonlinear x0 predictor for the tests.
func testDenoise(x []float64, sigma float64) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = 0.6*math.Tanh(v) + 0.3*sigma*math.Sin(float64(i)) - 0.1*sigma*v
	}
	return out
}

// testModel is the velocity whose x0 prediction is testDenoise:
// v = (x − x0)/σ with σ = timestep/1000.
func testModel() *funcModel {
	return &funcModel{f: func(x []float32, ts, _ float32, _ bool) []float32 {
		sigma := float64(ts) / 1000
		xd := make([]float64, len(x))
		for i, v := range x {
			xd[i] = float64(v)
		}
		x0 := testDenoise(xd, sigma)
		v := make([]float32, len(x))
		for i := range x {
			v[i] = float32((xd[i] - x0[i]) / sigma)
		}
		return v
	}}
}

func TestUniPCMatchesReference(t *testing.T) {
	be := cpu.New()
	for _, steps := range []int{1, 2, 3, 4, 5, 8, 25} {
		shape := []int{1, 16, 2, 3, 4}
		noise := NewTorchGenerator(uint64(steps)).Randn(shape...)
		m := testModel()
		s := tensor.NewScope(be)
		var seen []int
		out, err := Sample(context.Background(), s, m, tensor.FromFloat32(noise, shape...),
			Config{Steps: steps, Shift: 3, Guidance: Guidance{CFG: 1, Distilled: 6}},
			func(st Step) error {
				seen = append(seen, st.Index)
				if st.Steps != steps || st.X == nil || st.Denoised == nil {
					t.Errorf("bad step %+v", st)
				}
				return nil
			})
		if err != nil {
			t.Fatal(err)
		}
		if len(m.calls) != steps || len(seen) != steps {
			t.Errorf("steps %d: %d model calls, %d callbacks", steps, len(m.calls), len(seen))
		}
		sig, _ := Sigmas(steps, ShiftMu(3))
		sig64 := make([]float64, len(sig))
		for i, v := range sig {
			sig64[i] = float64(v)
		}
		x64 := make([]float64, len(noise))
		for i, v := range noise {
			x64[i] = float64(v)
		}
		want := refUniPC(testDenoise, x64, sig64)
		got := tensor.Float32s(out)
		if e := relL2(got, want); e > 2e-6 {
			t.Errorf("steps %d: rel L2 %g against the float64 reference", steps, e)
		}
		for i, c := range m.calls {
			if c.timestep != float32(sig[i]*1000) || c.guidance != 6000 || c.negative {
				t.Errorf("call %d: %+v", i, c)
			}
		}
		s.Close()
	}
}

func relL2(got []float32, want []float64) float64 {
	var num, den float64
	for i := range want {
		d := float64(got[i]) - want[i]
		num += d * d
		den += want[i] * want[i]
	}
	return math.Sqrt(num / den)
}

// With real CFG the model runs twice per step, and rescale pulls the std
// back towards the positive prediction.
func TestGuidanceCFGRescale(t *testing.T) {
	be := cpu.New()
	s := tensor.NewScope(be)
	defer s.Close()
	shape := []int{2, 3, 1, 2, 2}
	xv := NewTorchGenerator(1).Randn(shape...)
	pos := func(x []float32) []float64 {
		out := make([]float64, len(x))
		for i, v := range x {
			out[i] = 1.5*float64(v) + 0.2
		}
		return out
	}
	neg := func(x []float32) []float64 {
		out := make([]float64, len(x))
		for i, v := range x {
			out[i] = 0.5*float64(v) - 0.1*float64(i%3)
		}
		return out
	}
	m := &funcModel{f: func(x []float32, _, _ float32, negative bool) []float32 {
		v := pos(x)
		if negative {
			v = neg(x)
		}
		out := make([]float32, len(v))
		for i := range v {
			out[i] = float32(v[i])
		}
		return out
	}}
	const cfg, rs, sigma = 3.0, 0.3, float32(0.7)
	d, err := NewDenoiser(m, Guidance{CFG: cfg, Rescale: rs, Distilled: 1})
	if err != nil {
		t.Fatal(err)
	}
	got := tensor.Float32s(d(s, tensor.FromFloat32(xv, shape...), sigma))
	if len(m.calls) != 2 || m.calls[0].negative || !m.calls[1].negative {
		t.Fatalf("calls %+v", m.calls)
	}
	// float64 reference of fm_wrapper, batch by batch.
	p, q := pos(xv), neg(xv)
	n := len(xv) / 2
	want := make([]float64, len(xv))
	for b := 0; b < 2; b++ {
		lo, hi := b*n, (b+1)*n
		v := make([]float64, n)
		for i := lo; i < hi; i++ {
			v[i-lo] = q[i] + cfg*(p[i]-q[i])
		}
		ratio := std(p[lo:hi]) / std(v)
		for i := lo; i < hi; i++ {
			vi := rs*v[i-lo]*ratio + (1-rs)*v[i-lo]
			want[i] = float64(xv[i]) - vi*float64(sigma)
		}
	}
	if e := relL2(got, want); e > 1e-6 {
		t.Errorf("rel L2 %g", e)
	}
}

func std(v []float64) float64 {
	var m float64
	for _, x := range v {
		m += x
	}
	m /= float64(len(v))
	var ss float64
	for _, x := range v {
		ss += (x - m) * (x - m)
	}
	return math.Sqrt(ss / float64(len(v)-1))
}

// In bf16 mode the model sees bf16-rounded x, timestep and guidance, and x0
// is formed from the rounded x.
func TestGuidanceBF16(t *testing.T) {
	s := tensor.NewScope(cpu.New())
	defer s.Close()
	var seen []float32
	m := &funcModel{f: func(x []float32, _, _ float32, _ bool) []float32 {
		seen = append([]float32(nil), x...)
		return make([]float32, len(x)) // v = 0, so x0 = x_in
	}}
	d, err := NewDenoiser(m, Guidance{CFG: 1, Distilled: 10, BF16: true})
	if err != nil {
		t.Fatal(err)
	}
	x := []float32{1.00390625 + 1e-4, -3.14159, 0.1}
	out := tensor.Float32s(d(s, tensor.FromFloat32(x, 1, 3), 0.9940827))
	for i := range x {
		r := tensor.RoundBF16(x[i])
		if seen[i] != r || out[i] != r {
			t.Errorf("x[%d]: model saw %v, x0 %v, want %v", i, seen[i], out[i], r)
		}
	}
	if c := m.calls[0]; c.timestep != 996 || c.guidance != 9984 {
		t.Errorf("timestep %v guidance %v, want 996 and 9984", c.timestep, c.guidance)
	}
}

func TestSampleErrors(t *testing.T) {
	be := cpu.New()
	s := tensor.NewScope(be)
	defer s.Close()
	shape := []int{1, 4, 1, 2, 2}
	x := tensor.FromFloat32(make([]float32, 16), shape...)
	ok := testModel()
	bad := []struct {
		name string
		m    Model
		c    Config
		x    *tensor.Tensor
		want string
	}{
		{"steps", ok, Config{Steps: 0, Guidance: Guidance{CFG: 1}}, x, "steps"},
		{"cfg", ok, Config{Steps: 2, Guidance: Guidance{CFG: -1}}, x, "CFG scale"},
		{"rescale", ok, Config{Steps: 2, Guidance: Guidance{CFG: 2, Rescale: 1.5}}, x, "rescale"},
		{"gs", ok, Config{Steps: 2, Guidance: Guidance{CFG: 1, Distilled: -2}}, x, "distilled"},
		{"shift", ok, Config{Steps: 2, Shift: -1, Guidance: Guidance{CFG: 1}}, x, "shift"},
		{"rank", ok, Config{Steps: 2, Guidance: Guidance{CFG: 1}}, x.Reshape(4, 4), "noise must be"},
		{"nil model", nil, Config{Steps: 2, Guidance: Guidance{CFG: 1}}, x, "no model"},
		{"shape", shapeModel{}, Config{Steps: 2, Guidance: Guidance{CFG: 1}}, x, "model returned velocity"},
	}
	for _, b := range bad {
		_, err := Sample(context.Background(), s, b.m, b.x, b.c, nil)
		if err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%s: error %v, want one mentioning %q", b.name, err, b.want)
		}
	}
}

// shapeModel returns a velocity of the wrong shape.
type shapeModel struct{}

func (shapeModel) Velocity(s *tensor.Scope, x *tensor.Tensor, _, _ float32, _ bool) *tensor.Tensor {
	return s.Zeros(tensor.F32, x.Numel()/2)
}

func TestSampleCancel(t *testing.T) {
	s := tensor.NewScope(cpu.New())
	defer s.Close()
	shape := []int{1, 4, 1, 2, 2}
	x := tensor.FromFloat32(NewTorchGenerator(3).Randn(shape...), shape...)
	ctx, cancel := context.WithCancel(context.Background())
	m := testModel()
	_, err := Sample(ctx, s, m, x, Config{Steps: 6, Guidance: Guidance{CFG: 1}}, func(st Step) error {
		if st.Index == 2 {
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) || len(m.calls) != 3 {
		t.Errorf("err %v after %d calls, want context.Canceled after 3", err, len(m.calls))
	}
	stop := errors.New("user stop")
	_, err = Sample(context.Background(), s, testModel(), x, Config{Steps: 6, Guidance: Guidance{CFG: 1}},
		func(Step) error { return stop })
	if !errors.Is(err, stop) {
		t.Errorf("callback error not returned: %v", err)
	}
	if held := s.HeldBytes(); held != 0 {
		t.Errorf("scope holds %d bytes after failed runs", held)
	}
}
