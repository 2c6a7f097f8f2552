package cpu

import (
	"fmt"
	"strings"
	"testing"

	"github.com/framepack-go/framepack/tensor"
)

// blasBackends are the GEMM libraries present here, by name.
func blasBackends(t testing.TB) map[string]*Backend {
	out := map[string]*Backend{}
	for _, name := range []string{"gonum", "openblas"} {
		be, err := NewWithOptions(Options{BLAS: name})
		if err != nil {
			t.Logf("%s: %v", name, err)
			continue
		}
		out[name] = be
	}
	return out
}

// TestBLASLibraries runs GEMMs through every library present, including
// leading dimensions larger than the matrix and k = 0.
func TestBLASLibraries(t *testing.T) {
	r := rng(50)
	for name, be := range blasBackends(t) {
		t.Logf("%s: %s", name, be.BLAS())
		for _, sz := range [][3]int{{1, 1, 1}, {3, 7, 17}, {65, 33, 129}, {200, 300, 100}, {4, 5, 0}} {
			m, n, k := sz[0], sz[1], sz[2]
			for _, tr := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
				ar, ac := m, k
				if tr[0] {
					ar, ac = k, m
				}
				br, bc := k, n
				if tr[1] {
					br, bc = n, k
				}
				lda, ldb, ldc := ac+2, bc+1, n+3
				a := randVals(r, tensor.F32, max(ar*lda, 1), -1, 1)
				b := randVals(r, tensor.F32, max(br*ldb, 1), -1, 1)
				c := randVals(r, tensor.F32, m*ldc, -1, 1)
				c0 := append([]float32(nil), c...)
				be.gemm(tr[0], tr[1], m, n, k, 0.75, a, lda, b, ldb, 0.5, c, ldc)
				// dense copies for the reference
				ad, bd := make([]float32, ar*ac), make([]float32, br*bc)
				for i := 0; i < ar; i++ {
					copy(ad[i*ac:(i+1)*ac], a[i*lda:])
				}
				for i := 0; i < br; i++ {
					copy(bd[i*bc:(i+1)*bc], b[i*ldb:])
				}
				want, scale := matRef(ad, bd, m, n, k, tr[0], tr[1], 0.75)
				got := make([]float32, 0, m*n)
				for i := 0; i < m; i++ {
					for j := 0; j < n; j++ {
						want[i*n+j] += 0.5 * float64(c0[i*ldc+j])
						scale[i*n+j] += 0.5 * abs64(float64(c0[i*ldc+j]))
					}
					got = append(got, c[i*ldc:i*ldc+n]...)
					for j := n; j < ldc; j++ { // the padding is untouched
						if c[i*ldc+j] != c0[i*ldc+j] {
							t.Fatalf("%s: gemm wrote outside its columns", name)
						}
					}
				}
				compare(t, name+fmt.Sprint(" gemm ", sz, tr), got, want, within(tensor.F32, scale))
			}
		}
	}
}

func abs64(x float64) float64 { return max(x, -x) }

func BenchmarkGEMM(b *testing.B) {
	for _, name := range []string{"openblas", "gonum"} {
		be, err := NewWithOptions(Options{BLAS: name})
		if err != nil {
			b.Logf("%s: %v", name, err)
			continue
		}
		for _, n := range []int{256, 1024} {
			b.Run(fmt.Sprintf("%s/%d", name, n), func(b *testing.B) {
				r := rng(1)
				x := randVals(r, tensor.F32, n*n, -1, 1)
				w := randVals(r, tensor.F32, n*n, -1, 1)
				c := make([]float32, n*n)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					be.gemm(false, true, n, n, n, 1, x, n, w, n, 0, c, n)
				}
				b.ReportMetric(2*float64(n)*float64(n)*float64(n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

func BenchmarkConv3d(b *testing.B) {
	// A VAE-decoder-like layer (128 channels, 3×3×3, 4 frames of 32×32),
	// and a small model's full-resolution ones: 16 channels in, 16 or 3
	// out, 13 frames of 64×96 (where the shifted GEMMs win with few
	// output channels).
	defer func() { convShift = true }()
	for _, sh := range []struct {
		name         string
		cin, cout    int
		frames, h, w int
		f32Only      bool
	}{
		{"128to128", 128, 128, 4, 32, 32, false},
		{"16to16", 16, 16, 13, 64, 96, true},
		{"16to3", 16, 3, 13, 64, 96, true},
	} {
		for _, mode := range []string{"im2col", "shifted", "im2col", "shifted"} {
			for _, dt := range []tensor.DType{tensor.F32, tensor.BF16} {
				if sh.f32Only && dt != tensor.F32 {
					continue
				}
				b.Run(sh.name+"/"+mode+"/"+dt.String(), func(b *testing.B) {
					convShift = mode == "shifted"
					be := New()
					s := tensor.NewScope(be)
					defer s.Close()
					r := rng(2)
					xs, ws := []int{1, sh.cin, sh.frames, sh.h, sh.w}, []int{sh.cout, sh.cin, 3, 3, 3}
					x := input(s, dt, randVals(r, dt, tensor.Numel(xs), -1, 1), xs...)
					w := input(s, dt, randVals(r, dt, tensor.Numel(ws), -1, 1), ws...)
					bias := input(s, dt, randVals(r, dt, sh.cout, -1, 1), sh.cout)
					y := s.Empty(dt, 1, sh.cout, sh.frames, sh.h, sh.w)
					p := tensor.ConvParams{Stride: [3]int{1, 1, 1}, Padding: [3]int{1, 1, 1}}
					b.ResetTimer()
					for i := 0; i < b.N; i++ {
						if err := be.Conv3d(y, x, w, bias, p); err != nil {
							b.Fatal(err)
						}
					}
					flops := 2.0 * float64(sh.cin*sh.cout*27*sh.frames*sh.h*sh.w)
					b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				})
			}
		}
	}
}

func BenchmarkAttention(b *testing.B) {
	// One transformer-like call: 24 heads of 128, 1024 tokens.
	for _, dt := range []tensor.DType{tensor.F32, tensor.BF16} {
		b.Run(dt.String(), func(b *testing.B) {
			be := New()
			s := tensor.NewScope(be)
			defer s.Close()
			r := rng(3)
			B, L, H, D := 1, 1024, 24, 128
			q := input(s, dt, randVals(r, dt, B*L*H*D, -1, 1), B, L, H, D)
			k := input(s, dt, randVals(r, dt, B*L*H*D, -1, 1), B, L, H, D)
			v := input(s, dt, randVals(r, dt, B*L*H*D, -1, 1), B, L, H, D)
			y := s.Empty(dt, B, L, H, D)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := be.Attention(y, q, k, v, tensor.AttnParams{Scale: 0.088}); err != nil {
					b.Fatal(err)
				}
			}
			flops := 4.0 * float64(B*H) * float64(L) * float64(L) * float64(D)
			b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

func BenchmarkBinaryBias(b *testing.B) {
	be := New()
	s := tensor.NewScope(be)
	defer s.Close()
	r := rng(4)
	x := input(s, tensor.F32, randVals(r, tensor.F32, 4096*3072, -1, 1), 4096, 3072)
	bias := input(s, tensor.F32, randVals(r, tensor.F32, 3072, -1, 1), 3072)
	y := s.Empty(tensor.F32, 4096, 3072)
	b.SetBytes(int64(3 * 4 * 4096 * 3072))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := be.Binary(tensor.OpAdd, y, x, []int{3072, 1}, bias, []int{0, 1}); err != nil {
			b.Fatal(err)
		}
	}
}

// TestBLASConcurrent: the libraries are called from many goroutines at once
// (attention's workers, split GEMMs); every result must still be right.
func TestBLASConcurrent(t *testing.T) {
	for name, be := range blasBackends(t) {
		const workers = 8
		errs := make(chan string, workers)
		for w := 0; w < workers; w++ {
			go func() {
				r := rng(uint64(70 + w))
				m, n, k := 40+w, 50+3*w, 60+5*w
				a, b := randVals(r, tensor.F32, m*k, -1, 1), randVals(r, tensor.F32, k*n, -1, 1)
				want, scale := matRef(a, b, m, n, k, false, false, 1)
				c := make([]float32, m*n)
				for rep := 0; rep < 20; rep++ {
					be.gemmSerial(false, false, m, n, k, 1, a, k, b, n, 0, c, n)
					for i := range c {
						if d := float64(c[i]) - want[i]; d > 1e-5*scale[i] || -d > 1e-5*scale[i] {
							errs <- fmt.Sprintf("%s: worker %d rep %d [%d] = %v, want %v", name, w, rep, i, c[i], want[i])
							return
						}
					}
				}
				errs <- ""
			}()
		}
		for w := 0; w < workers; w++ {
			if e := <-errs; e != "" {
				t.Error(e)
			}
		}
	}
}

// TestGEMMSplit: large products split into bands (rows or columns, either
// transposition) equal the reference.
func TestGEMMSplit(t *testing.T) {
	r := rng(80)
	for name, be := range blasBackends(t) {
		for _, sz := range [][3]int{{300, 40, 70}, {20, 500, 60}, {129, 131, 133}} {
			m, n, k := sz[0], sz[1], sz[2]
			for _, tr := range [][2]bool{{false, false}, {true, true}, {true, false}, {false, true}} {
				a, b := randVals(r, tensor.F32, m*k, -1, 1), randVals(r, tensor.F32, k*n, -1, 1)
				lda, ldb := k, n
				if tr[0] {
					lda = m
				}
				if tr[1] {
					ldb = k
				}
				c := make([]float32, m*n)
				be.gemm(tr[0], tr[1], m, n, k, 1, a, lda, b, ldb, 0, c, n)
				want, scale := matRef(a, b, m, n, k, tr[0], tr[1], 1)
				compare(t, fmt.Sprint(name, " split gemm ", sz, tr), c, want, within(tensor.F32, scale))
			}
		}
	}
}

func TestBLASChoice(t *testing.T) {
	if _, err := NewWithOptions(Options{BLAS: "mkl"}); err == nil {
		t.Error("unknown BLAS accepted")
	}
	saved := openBLASLibs
	defer func() { openBLASLibs = saved }()
	openBLASLibs = []string{"libframepack-no-such-blas.so"}
	if _, err := openOpenBLAS(); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("missing library: %v", err)
	}
	t.Setenv("FRAMEPACK_BLAS", "gonum")
	if be := New(); !strings.HasPrefix(be.BLAS(), "gonum") {
		t.Errorf("FRAMEPACK_BLAS=gonum gave %s", be.BLAS())
	}
}

func BenchmarkNormSiLU(b *testing.B) {
	r := rng(4)
	xs := randVals(r, tensor.F32, 1<<16, -4, 4)
	ys := make([]float32, len(xs))
	b.SetBytes(int64(4 * len(xs)))
	for i := 0; i < b.N; i++ {
		normSiLU(ys, xs, 0.1, 1.2, 0.3)
	}
}
