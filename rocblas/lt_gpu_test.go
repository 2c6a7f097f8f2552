package rocblas

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/framepack-go/framepack/internal/testutil/gputest"
	"github.com/framepack-go/framepack/tensor"
)

// openLt gives a device and an Lt handle on its stream with a workspace,
// skipping without a GPU or without the Lt library.
func openLt(t *testing.T) (*gputest.Device, *LtHandle) {
	t.Helper()
	return gputest.OpenHandle(t, "Lt", OpenLt, func(dev *gputest.Device, lib *LtLib) (*LtHandle, error) {
		return lib.NewHandle(dev.Stream, dev.Alloc(t, LtWorkspace), LtWorkspace)
	})
}

func geluTanh(x float64) float64 {
	return 0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x)))
}

// linearRef is epilogue(x·wᵀ·scale + bias) in float64; x (m, k), w (n, k).
func linearRef(x, w, bias []float64, m, n, k int, scale float64, ep Epilogue) []float64 {
	out := make([]float64, m*n)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s float64
			for p := 0; p < k; p++ {
				s += x[i*k+p] * w[j*k+p]
			}
			s *= scale
			if ep == EpilogueBias || ep == EpilogueGELUBias {
				s += bias[j]
			}
			if ep == EpilogueGELU || ep == EpilogueGELUBias {
				s = geluTanh(s)
			}
			out[i*n+j] = s
		}
	}
	return out
}

var epilogues = []Epilogue{EpilogueNone, EpilogueBias, EpilogueGELU, EpilogueGELUBias}

// ltRun runs g into a poisoned bf16 output of its own, with the bias bb
// where its epilogue adds one, and gives the output or the library's error.
func ltRun(t *testing.T, dev *gputest.Device, h *LtHandle, g LtLinear, bb []byte) ([]float64, error) {
	t.Helper()
	size := int64(2 * g.M * g.N)
	g.D = dev.Alloc(t, size)
	if g.Epilogue == EpilogueBias || g.Epilogue == EpilogueGELUBias {
		g.Bias = dev.Upload(t, bb)
	}
	dev.Poison(t, g.D, size)
	if err := h.Linear(g); err != nil {
		return nil, err
	}
	return gputest.Decode(BF16, dev.Download(t, g.D, int(size))), nil
}

// within1pct fails the test when got is further than 1e-2 (relative L2)
// from want, and logs the distance otherwise.
func within1pct(t *testing.T, name string, got, want []float64) {
	t.Helper()
	if e := gputest.RelL2(got, want); e > 1e-2 {
		t.Errorf("%s: rel L2 %.3g > 1e-2", name, e)
	} else {
		t.Logf("%s: rel L2 %.3g", name, e)
	}
}

// fp8Codes is n random E4M3 codes of values in ±amp, and their values.
func fp8Codes(rng *rand.Rand, n int, amp float64) ([]float64, []byte) {
	v, b := make([]float64, n), make([]byte, n)
	for i := range b {
		b[i] = tensor.F8E4M3FromF32(float32((rng.Float64()*2 - 1) * amp))
		v[i] = float64(tensor.F32FromF8E4M3(b[i]))
	}
	return v, b
}

// TestLtLinearBF16 runs bf16 Linears with every epilogue against float64.
func TestLtLinearBF16(t *testing.T) {
	dev, h := openLt(t)
	rng := rand.New(rand.NewPCG(5, 6))
	for _, sz := range [][3]int{{1, 64, 32}, {37, 96, 80}, {256, 512, 384}} {
		m, n, k := sz[0], sz[1], sz[2]
		x, xb := gputest.Random(rng, BF16, m*k)
		w, wb := gputest.Random(rng, BF16, n*k)
		bias, bb := gputest.Random(rng, BF16, n)
		for _, ep := range epilogues {
			g := LtLinear{M: m, N: n, K: k, X: dev.Upload(t, xb), W: dev.Upload(t, wb),
				XType: LtBF16, WType: LtBF16, DType: LtBF16, Epilogue: ep}
			name := fmt.Sprintf("bf16 %dx%dx%d epilogue %d", m, n, k, ep)
			got, err := ltRun(t, dev, h, g, bb)
			if err != nil {
				t.Errorf("%s: %v", name, err)
				continue
			}
			within1pct(t, name, got, linearRef(x, w, bias, m, n, k, 1, ep))
		}
	}
}

// TestLtLinearFP8 runs FP8 E4M3 Linears (per-tensor scales on x and w,
// bf16 output) against float64 math on the same codes and scales.
func TestLtLinearFP8(t *testing.T) {
	dev, h := openLt(t)
	rng := rand.New(rand.NewPCG(7, 8))
	scalar := func(f float32) uintptr {
		var b [4]byte
		binary.LittleEndian.PutUint32(b[:], math.Float32bits(f))
		return dev.Upload(t, b[:])
	}
	for _, sz := range [][3]int{{16, 64, 32}, {40, 128, 256}, {256, 512, 1024}} {
		m, n, k := sz[0], sz[1], sz[2]
		x, xb := fp8Codes(rng, m*k, 448)
		w, wb := fp8Codes(rng, n*k, 448)
		bias, bb := gputest.Random(rng, BF16, n)
		const xs, ws = 1.0 / 512, 1.0 / 1024
		for _, ep := range epilogues {
			g := LtLinear{M: m, N: n, K: k, X: dev.Upload(t, xb), W: dev.Upload(t, wb),
				XType: LtF8E4M3, WType: LtF8E4M3, DType: LtBF16, XScale: scalar(xs), WScale: scalar(ws), Epilogue: ep}
			name := fmt.Sprintf("fp8 %dx%dx%d epilogue %d", m, n, k, ep)
			got, err := ltRun(t, dev, h, g, bb)
			if err != nil {
				var le *Error
				if errors.As(err, &le) && ep != EpilogueNone {
					// Not every library version fuses every epilogue with FP8.
					t.Logf("%s: %v (skipped)", name, err)
					continue
				}
				t.Fatalf("%s: %v (an FP8 GPU is needed: NVIDIA sm_89+, AMD with OCP FP8)", name, err)
			}
			within1pct(t, name, got, linearRef(x, w, bias, m, n, k, xs*ws, ep))
		}
	}
}

// TestLtLinearFP8RowScales runs FP8 Linears with one scale per row of x
// (a token) and per row of w (an output channel), bf16 output, against
// float64 math on the same codes and scales.
func TestLtLinearFP8RowScales(t *testing.T) {
	dev, h := openLt(t)
	rng := rand.New(rand.NewPCG(9, 10))
	scales := func(n int) ([]float64, uintptr) {
		v, b := make([]float64, n), make([]byte, 4*n)
		for i := range v {
			f := float32(math.Ldexp(0.5+rng.Float64(), -8-rng.IntN(6))) // spread over 2⁻¹³…2⁻⁷
			v[i] = float64(f)
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
		}
		return v, dev.Upload(t, b)
	}
	for _, sz := range [][3]int{{16, 64, 32}, {37, 128, 256}, {300, 512, 1024}} {
		m, n, k := sz[0], sz[1], sz[2]
		x, xb := fp8Codes(rng, m*k, 448)
		w, wb := fp8Codes(rng, n*k, 448)
		xs, xsp := scales(m)
		ws, wsp := scales(n)
		// The reference folds the scales into the operands: (xs[i]·x[i,:])·(ws[j]·w[j,:]).
		xr, wr := make([]float64, m*k), make([]float64, n*k)
		for i := range xr {
			xr[i] = x[i] * xs[i/k]
		}
		for i := range wr {
			wr[i] = w[i] * ws[i/k]
		}
		bias, bb := gputest.Random(rng, BF16, n)
		for _, ep := range []Epilogue{EpilogueNone, EpilogueBias} {
			g := LtLinear{M: m, N: n, K: k, X: dev.Upload(t, xb), W: dev.Upload(t, wb),
				XType: LtF8E4M3, WType: LtF8E4M3, DType: LtBF16, XScale: xsp, WScale: wsp, RowScales: true, Epilogue: ep}
			name := fmt.Sprintf("fp8 row scales %dx%dx%d epilogue %d", m, n, k, ep)
			got, err := ltRun(t, dev, h, g, bb)
			if err != nil {
				t.Fatalf("%s: %v (needs an FP8 GPU and cuBLASLt 12.9+ or hipBLASLt of ROCm 7)", name, err)
			}
			within1pct(t, name, got, linearRef(xr, wr, bias, m, n, k, 1, ep))
		}
	}
}

func TestLtLinearValidate(t *testing.T) {
	ok := LtLinear{M: 2, N: 16, K: 16, X: 1, W: 1, D: 1, XType: LtF8E4M3, WType: LtF8E4M3, DType: LtBF16}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []LtLinear{
		{M: 2, N: 15, K: 16, X: 1, W: 1, D: 1, XType: LtF8E4M3, WType: LtF8E4M3, DType: LtBF16},
		{M: 2, N: 16, K: 16, X: 1, W: 1, D: 1, XType: LtF8E4M3, WType: LtBF16, DType: LtBF16},
		{M: 2, N: 16, K: 16, X: 1, W: 1, D: 1, XType: LtBF16, WType: LtBF16, DType: LtBF16, XScale: 1},
		{M: 2, N: 16, K: 16, X: 1, W: 1, D: 1, XType: LtBF16, WType: LtBF16, DType: LtBF16, Epilogue: EpilogueBias},
		{M: 2, N: 16, K: 16, X: 1, W: 1, D: 1, XType: LtBF16, WType: LtBF16, DType: LtF16},
		{M: 2, N: 16, K: 16, W: 1, D: 1, XType: LtBF16, WType: LtBF16, DType: LtBF16},
		{M: 2, N: 16, K: 16, X: 1, W: 1, D: 1, XType: LtF8E4M3, WType: LtF8E4M3, DType: LtBF16, XScale: 1, RowScales: true},
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
}
