package rocblas

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/framepack-go/framepack/internal/testutil/gputest"
)

// openGPU gives a device (skipping without one) and a handle on its stream
// (skipping, with the reason, when the BLAS library is absent).
func openGPU(t testing.TB) (*gputest.Device, *Handle) {
	t.Helper()
	return gputest.OpenHandle(t, "BLAS", OpenVendor, func(dev *gputest.Device, lib *Lib) (*Handle, error) {
		return lib.NewHandle(dev.Stream)
	})
}

// tolerance is gputest.Tolerance with 1e-5 for exact f32 products.
func tolerance(out DType, fast bool) float64 { return gputest.Tolerance(out, fast, 1e-5) }

func TestGemmAgainstFloat64(t *testing.T) {
	dev, h := openGPU(t)
	rng := rand.New(rand.NewPCG(7, 8))
	type combo struct{ in, out DType }
	combos := []combo{{F32, F32}, {F16, F16}, {F16, F32}, {BF16, BF16}, {BF16, F32}}
	var worst = map[combo]float64{}
	for _, c := range combos {
		for _, m := range matmulCases() {
			m.In, m.Out = c.in, c.out
			name := fmt.Sprintf("%v→%v %dx%dx%d tA=%v tB=%v batch=%d", c.in, c.out, m.M, m.N, m.K, m.TransA, m.TransB, m.Batch)
			na, nb, nc := sizes(m)
			a, ab := gputest.Random(rng, c.in, na)
			b, bb := gputest.Random(rng, c.in, nb)
			cv, cb := gputest.Random(rng, c.out, nc)
			want := rowMajorRef(m, a, b, cv)
			m.A, m.B = dev.Upload(t, ab), dev.Upload(t, bb)
			m.C = dev.Upload(t, cb)
			if m.Beta == 0 {
				dev.Poison(t, m.C, int64(len(cb))) // every element must be written
			}
			if err := h.MatMul(m); err != nil {
				t.Errorf("%s: %v", name, err)
				continue
			}
			got := gputest.Decode(c.out, dev.Download(t, m.C, len(cb)))
			if m.LDC != 0 { // padding between rows is not part of the result
				got, want = rowsOnly(got, m), rowsOnly(want, m)
			}
			e := gputest.RelL2(got, want)
			worst[c] = max(worst[c], e)
			if e > tolerance(c.out, false) {
				t.Errorf("%s: rel L2 %.3g > %.3g", name, e, tolerance(c.out, false))
			}
		}
	}
	for _, c := range combos {
		t.Logf("%v→%v: worst rel L2 %.3g over %d shapes", c.in, c.out, worst[c], len(matmulCases()))
	}
}

func rowsOnly(v []float64, m MatMul) []float64 {
	var out []float64
	for i := 0; i < m.M; i++ {
		out = append(out, v[i*m.LDC:i*m.LDC+m.N]...)
	}
	return out
}

// Fast f32 (TF32 on NVIDIA) is opt-in and still close to f32.
func TestGemmFastF32(t *testing.T) {
	dev, h := openGPU(t)
	rng := rand.New(rand.NewPCG(9, 10))
	m := MatMul{M: 512, N: 512, K: 1024, TransB: true, Alpha: 1, In: F32, Out: F32}
	na, nb, nc := sizes(m)
	a, ab := gputest.Random(rng, gputest.F32, na)
	b, bb := gputest.Random(rng, gputest.F32, nb)
	want := rowMajorRef(m, a, b, make([]float64, nc))
	m.A, m.B, m.C = dev.Upload(t, ab), dev.Upload(t, bb), dev.Alloc(t, int64(nc*4))
	run := func(fast bool) float64 {
		h.SetFastF32(fast)
		defer h.SetFastF32(false)
		dev.Poison(t, m.C, int64(nc*4))
		if err := h.MatMul(m); err != nil {
			t.Fatal(err)
		}
		return gputest.RelL2(gputest.Decode(gputest.F32, dev.Download(t, m.C, nc*4)), want)
	}
	strict, fast := run(false), run(true)
	t.Logf("f32 512x512x1024: strict rel L2 %.3g, fast %.3g", strict, fast)
	if strict > tolerance(F32, false) {
		t.Errorf("strict f32 rel L2 %.3g > %.3g", strict, tolerance(F32, false))
	}
	if fast > tolerance(F32, true) {
		t.Errorf("fast f32 rel L2 %.3g > %.3g", fast, tolerance(F32, true))
	}
}

func BenchmarkGemm8192(b *testing.B) {
	dev, h := openGPU(b)
	const n = 8192
	// Random operands, allocated once for every case (f32 size covers all).
	a := dev.Upload(b, gputest.Tiled(gputest.F32, n*n))
	bm := dev.Upload(b, gputest.Tiled(gputest.F32, n*n))
	c := dev.Alloc(b, n*n*4)
	for _, cs := range []struct {
		in, out DType
		fast    bool
	}{{BF16, BF16, false}, {F16, F16, false}, {BF16, F32, false}, {F32, F32, false}, {F32, F32, true}} {
		name := fmt.Sprintf("%v-%v", cs.in, cs.out)
		if cs.fast {
			name += "-tf32"
		}
		b.Run(name, func(b *testing.B) {
			dev.Bind(b)
			m := MatMul{M: n, N: n, K: n, TransB: true, Alpha: 1, In: cs.in, Out: cs.out, A: a, B: bm, C: c}
			if cs.in != F32 { // bf16/f16 operands: the f32 buffers' bytes, rewritten once
				dev.Write(b, a, gputest.Tiled(cs.in, n*n))
				dev.Write(b, bm, gputest.Tiled(cs.in, n*n))
			}
			h.SetFastF32(cs.fast)
			defer h.SetFastF32(false)
			for range 3 { // warm up: workspace, kernel selection
				if err := h.MatMul(m); err != nil {
					b.Fatal(err)
				}
			}
			dev.Sync(b)
			b.ResetTimer()
			for range b.N {
				if err := h.MatMul(m); err != nil {
					b.Fatal(err)
				}
			}
			dev.Sync(b)
			b.StopTimer()
			b.ReportMetric(m.ColumnMajor().FLOPs()*float64(b.N)/b.Elapsed().Seconds()/1e12, "TFLOP/s")
		})
	}
}
