package rocblas

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/framepack-go/framepack/internal/testutil/dynlibtest"
	"github.com/framepack-go/framepack/internal/testutil/errtest"
)

// colMajorGemm is the column-major contract of Gemm on host arrays
// (A, B, C indexed from 0), the function the vendor libraries compute.
func colMajorGemm(g Gemm, a, b, c []float64) {
	for bi := 0; bi < max(g.Batch, 1); bi++ {
		oa, ob, oc := int(g.StrideA)*bi, int(g.StrideB)*bi, int(g.StrideC)*bi
		product(g.M, g.N, g.K, func(i, k int) float64 {
			if g.TransA {
				return a[oa+k+i*g.LDA]
			}
			return a[oa+i+k*g.LDA]
		}, func(k, j int) float64 {
			if g.TransB {
				return b[ob+j+k*g.LDB]
			}
			return b[ob+k+j*g.LDB]
		}, func(i, j int, s float64) {
			p := oc + i + j*g.LDC
			c[p] = float64(g.Alpha)*s + float64(g.Beta)*c[p]
		})
	}
}

// product calls set(i, j, Σₖ a(i, k)·b(k, j)) for each i < m, j < n, in
// float64; the references give it their own indexing.
func product(m, n, k int, a, b func(row, col int) float64, set func(i, j int, s float64)) {
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s float64
			for l := 0; l < k; l++ {
				s += a(i, l) * b(l, j)
			}
			set(i, j, s)
		}
	}
}

// rowMajorRef computes MatMul m directly from its row-major definition.
func rowMajorRef(m MatMul, a, b, c []float64) []float64 {
	batch := max(m.Batch, 1)
	aCols, bCols := m.K, m.N
	aRows, bRows := m.M, m.K
	if m.TransA {
		aCols, aRows = m.M, m.K
	}
	if m.TransB {
		bCols, bRows = m.K, m.N
	}
	lda, ldb, ldc := orDefault(m.LDA, aCols), orDefault(m.LDB, bCols), orDefault(m.LDC, m.N)
	sa, sb, sc := m.StrideA, m.StrideB, m.StrideC
	if sa == 0 {
		sa = int64(aRows * lda)
	}
	if sb == 0 {
		sb = int64(bRows * ldb)
	}
	if sc == 0 {
		sc = int64(m.M * ldc)
	}
	if m.BroadcastA {
		sa = 0
	}
	if m.BroadcastB {
		sb = 0
	}
	out := append([]float64(nil), c...)
	for bi := 0; bi < batch; bi++ {
		oa, ob, oc := int(sa)*bi, int(sb)*bi, int(sc)*bi
		product(m.M, m.N, m.K, func(i, k int) float64 {
			if m.TransA {
				return a[oa+k*lda+i]
			}
			return a[oa+i*lda+k]
		}, func(k, j int) float64 {
			if m.TransB {
				return b[ob+j*ldb+k]
			}
			return b[ob+k*ldb+j]
		}, func(i, j int, s float64) {
			p := oc + i*ldc + j
			out[p] = float64(m.Alpha)*s + float64(m.Beta)*c[p]
		})
	}
	return out
}

// matmulCases are shared by the host mapping test and the device test.
func matmulCases() []MatMul {
	return []MatMul{
		{M: 64, N: 48, K: 32, Alpha: 1},
		{M: 37, N: 53, K: 29, TransB: true, Alpha: 1},
		{M: 17, N: 33, K: 65, TransA: true, Alpha: 1},
		{M: 5, N: 7, K: 3, TransA: true, TransB: true, Alpha: 1},
		{M: 31, N: 19, K: 23, Batch: 3, Alpha: 1},
		{M: 16, N: 24, K: 40, Batch: 4, BroadcastB: true, TransB: true, Alpha: 1},
		{M: 12, N: 20, K: 8, Batch: 2, BroadcastA: true, Alpha: 1},
		{M: 24, N: 16, K: 8, Alpha: 0.5, Beta: 2},
		{M: 9, N: 10, K: 11, LDA: 16, LDB: 13, LDC: 12, Alpha: 1},
		{M: 1, N: 1, K: 1, Alpha: 1},
		{M: 256, N: 384, K: 512, TransB: true, Alpha: 1},
	}
}

// sizes returns the element counts of A, B and C storage for m.
func sizes(m MatMul) (na, nb, nc int) {
	g := m.ColumnMajor()
	span := func(stride int64, one int, broadcast bool) int {
		if broadcast || g.Batch == 1 {
			return one
		}
		return int(stride)*(g.Batch-1) + one
	}
	aRows, bRows := m.M, m.K
	if m.TransA {
		aRows = m.K
	}
	if m.TransB {
		bRows = m.N
	}
	na = span(g.StrideB, aRows*g.LDB, m.BroadcastA)
	nb = span(g.StrideA, bRows*g.LDA, m.BroadcastB)
	nc = span(g.StrideC, m.M*g.LDC, false)
	return
}

// The row-major wrapper must compute the row-major product when handed to
// the column-major contract.
func TestMatMulColumnMajorMapping(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, m := range matmulCases() {
		if m.M*m.N*m.K > 1<<18 {
			continue
		}
		na, nb, nc := sizes(m)
		a, b, c := randVec(rng, na), randVec(rng, nb), randVec(rng, nc)
		want := rowMajorRef(m, a, b, c)
		g := m.ColumnMajor()
		g.A, g.B, g.C = 1, 1, 1 // non-nil for Validate
		g.In, g.Out = F32, F32
		if err := g.Validate(); err != nil {
			t.Fatalf("%+v: %v", m, err)
		}
		got := append([]float64(nil), c...)
		colMajorGemm(g, b, a, got) // the wrapper swaps A and B
		for i := range want {
			if math.Abs(got[i]-want[i]) > 1e-12 {
				t.Fatalf("%+v: element %d = %v, want %v", m, i, got[i], want[i])
			}
		}
	}
}

func randVec(rng *rand.Rand, n int) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = rng.Float64()*2 - 1
	}
	return v
}

func TestGemmValidate(t *testing.T) {
	ok := Gemm{M: 4, N: 5, K: 6, LDA: 4, LDB: 6, LDC: 4, A: 1, B: 1, C: 1, In: BF16, Out: F32}
	errtest.Rejects(t, ok, (*Gemm).Validate, []errtest.Edit[Gemm]{
		{Name: "lda", Edit: func(g *Gemm) { g.LDA = 3 }, Want: "lda=3"},
		{Name: "lda transposed", Edit: func(g *Gemm) { g.TransA = true }, Want: "lda=4 < 6"},
		{Name: "ldc", Edit: func(g *Gemm) { g.LDC = 2 }, Want: "ldc=2"},
		{Name: "output dtype", Edit: func(g *Gemm) { g.Out = F16 }, Want: "output dtype f16 with bf16"},
		{Name: "input dtype", Edit: func(g *Gemm) { g.In = 0 }, Want: "unsupported input dtype"},
		{Name: "negative size", Edit: func(g *Gemm) { g.M = -1 }, Want: "negative size"},
		{Name: "32-bit size", Edit: func(g *Gemm) { g.K = math.MaxInt32 + 1 }, Want: "32-bit"},
		{Name: "overlapping batches", Edit: func(g *Gemm) { g.Batch = 2; g.StrideC = 3 }, Want: "overlaps"},
		{Name: "nil C", Edit: func(g *Gemm) { g.C = 0 }, Want: "nil C"},
	})
}

// A missing library gives one error naming every file tried.
func TestOpenMissingLibrary(t *testing.T) { dynlibtest.CheckMissing(t, libs, AMD) }
