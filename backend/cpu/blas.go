package cpu

import (
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/ebitengine/purego"
	"github.com/framepack-go/framepack/internal/envconfig"
	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
)

// blasImpl is a single-precision row-major GEMM:
// c = alpha·op(a)·op(b) + beta·c with op(a) m×k and op(b) k×n. It is safe
// for concurrent use.
type blasImpl interface {
	name() string
	// threaded reports whether one call already uses every core; if not,
	// the backend splits large GEMMs over its goroutines.
	threaded() bool
	sgemm(tA, tB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int)
}

// chooseBLAS picks the GEMM library. want is Options.BLAS: "" or "auto"
// (OpenBLAS when it loads, else gonum; FRAMEPACK_BLAS=gonum forces gonum),
// "openblas" (an error when it does not load) or "gonum".
func chooseBLAS(want string) (blasImpl, error) {
	switch strings.ToLower(want) {
	case "gonum":
		return gonumBLAS{}, nil
	case "openblas":
		return loadOpenBLAS()
	case "", "auto":
		if envconfig.Read().GonumBLAS {
			return gonumBLAS{why: "FRAMEPACK_BLAS=gonum"}, nil
		}
		ob, err := loadOpenBLAS()
		if err != nil {
			return gonumBLAS{why: err.Error()}, nil
		}
		return ob, nil
	}
	return nil, fmt.Errorf("cpu: unknown BLAS %q (want auto, openblas or gonum)", want)
}

// gonumBLAS is the pure-Go fallback; why says why OpenBLAS is not in use.
type gonumBLAS struct{ why string }

func (g gonumBLAS) name() string {
	if g.why != "" {
		return "gonum (" + g.why + ")"
	}
	return "gonum"
}

// gonum parallelises large products itself, with goroutines.
func (gonumBLAS) threaded() bool { return true }

func (gonumBLAS) sgemm(tA, tB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	gonum.Implementation{}.Sgemm(trans(tA), trans(tB), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

func trans(t bool) blas.Transpose {
	if t {
		return blas.Trans
	}
	return blas.NoTrans
}

// openBLAS calls cblas_sgemm of a libopenblas found at run time (no cgo).
// Its own threads are turned off (they spin after each call and fight the
// Go scheduler); the backend runs single-threaded GEMMs on its goroutines,
// concurrently, which OpenBLAS's threaded builds allow.
type openBLAS struct {
	desc string
	f32  func(order, ta, tb, m, n, k int32, alpha float32, a *float32, lda int32, b *float32, ldb int32, beta float32, c *float32, ldc int32)
	f64  func(order, ta, tb int32, m, n, k int64, alpha float32, a *float32, lda int64, b *float32, ldb int64, beta float32, c *float32, ldc int64)
}

var openBLASLibs = []string{"libopenblas.so.0", "libopenblas.so", "libopenblasp.so.0", "libopenblas.dylib"}

var (
	openBLASOnce sync.Once
	openBLASLib  *openBLAS
	openBLASErr  error
)

// loadOpenBLAS opens the library once per process.
func loadOpenBLAS() (blasImpl, error) {
	openBLASOnce.Do(func() { openBLASLib, openBLASErr = openOpenBLAS() })
	if openBLASErr != nil {
		return nil, openBLASErr
	}
	return openBLASLib, nil
}

func openOpenBLAS() (ob *openBLAS, err error) {
	defer func() { // purego panics on a symbol it cannot bind
		if r := recover(); r != nil {
			ob, err = nil, fmt.Errorf("cpu: openblas: %v", r)
		}
	}()
	// OpenBLAS starts its threads as it loads, and they spin for a while
	// before they sleep: ask for none, since they would never get work.
	if _, set := os.LookupEnv("OPENBLAS_NUM_THREADS"); !set {
		os.Setenv("OPENBLAS_NUM_THREADS", "1")
	}
	var lib uintptr
	var path string
	var errs []string
	for _, p := range openBLASLibs {
		h, e := purego.Dlopen(p, purego.RTLD_NOW|purego.RTLD_LOCAL)
		if e == nil {
			lib, path = h, p
			break
		}
		errs = append(errs, e.Error())
	}
	if lib == 0 {
		return nil, fmt.Errorf("openblas not found: %s", strings.Join(errs, "; "))
	}
	if _, e := purego.Dlsym(lib, "cblas_sgemm"); e != nil {
		return nil, fmt.Errorf("cpu: %s has no cblas_sgemm: %v", path, e)
	}
	ob = &openBLAS{desc: "openblas (" + path + ")"}
	config := ""
	if _, e := purego.Dlsym(lib, "openblas_get_config"); e == nil {
		var getConfig func() string
		purego.RegisterLibFunc(&getConfig, lib, "openblas_get_config")
		config = getConfig()
		if f := strings.Fields(config); len(f) >= 2 && f[0] == "OpenBLAS" {
			ob.desc = "openblas " + f[1] + " (" + path + ")"
		}
	}
	if strings.Contains(config, "USE64BITINT") {
		purego.RegisterLibFunc(&ob.f64, lib, "cblas_sgemm")
	} else {
		purego.RegisterLibFunc(&ob.f32, lib, "cblas_sgemm")
	}
	if _, e := purego.Dlsym(lib, "openblas_set_num_threads"); e != nil {
		return nil, fmt.Errorf("cpu: %s has no openblas_set_num_threads: %v", path, e)
	}
	var setThreads func(n int32)
	purego.RegisterLibFunc(&setThreads, lib, "openblas_set_num_threads")
	setThreads(1)
	return ob, nil
}

func (o *openBLAS) name() string { return o.desc }

func (o *openBLAS) threaded() bool { return false }

const (
	cblasRowMajor = 101
	cblasNoTrans  = 111
	cblasTrans    = 112
)

func (o *openBLAS) sgemm(tA, tB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	ta, tb := int32(cblasNoTrans), int32(cblasNoTrans)
	if tA {
		ta = cblasTrans
	}
	if tB {
		tb = cblasTrans
	}
	var pa, pb *float32
	if k > 0 { // a and b are empty when k is 0; c is still scaled by beta
		pa, pb = &a[0], &b[0]
	}
	if o.f64 != nil {
		o.f64(cblasRowMajor, ta, tb, int64(m), int64(n), int64(k), alpha, pa, int64(lda), pb, int64(ldb), beta, &c[0], int64(ldc))
	} else {
		o.f32(cblasRowMajor, ta, tb, int32(m), int32(n), int32(k), alpha, pa, int32(lda), pb, int32(ldb), beta, &c[0], int32(ldc))
	}
}

// gemmGrain is the work (multiply-adds) below which a GEMM is not split.
const gemmGrain = 1 << 18

// gemm runs a GEMM on every core: through the library when it is threaded
// itself, otherwise split into row (or column) bands, one per goroutine.
func (be *Backend) gemm(tA, tB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	parts := min(be.threads, m*n*k/gemmGrain)
	if be.blas.threaded() || parts <= 1 {
		be.gemmSerial(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	if m >= n || m >= 64*parts { // bands of rows of c
		parts = min(parts, m)
		be.parallelParts(m, parts, func(i0, i1 int) {
			var as []float32
			if tA {
				as = a[i0:]
			} else {
				as = a[i0*lda:]
			}
			be.gemmSerial(tA, tB, i1-i0, n, k, alpha, as, lda, b, ldb, beta, c[i0*ldc:], ldc)
		})
		return
	}
	parts = min(parts, n)
	be.parallelParts(n, parts, func(j0, j1 int) { // bands of columns of c
		var bs []float32
		if tB {
			bs = b[j0*ldb:]
		} else {
			bs = b[j0:]
		}
		be.gemmSerial(tA, tB, m, j1-j0, k, alpha, a, lda, bs, ldb, beta, c[j0:], ldc)
	})
}

// gemmSerial checks the operands' extents (a foreign library must never
// read or write outside a slice) and runs one library call on the calling
// goroutine; it is what parallel kernels call from their workers.
func (be *Backend) gemmSerial(tA, tB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	ar, ac := m, k
	if tA {
		ar, ac = k, m
	}
	br, bc := k, n
	if tB {
		br, bc = n, k
	}
	need := func(name string, s []float32, rows, cols, ld int) {
		if cols > ld || (rows > 0 && cols > 0 && len(s) < (rows-1)*ld+cols) {
			panic(fmt.Sprintf("cpu: gemm operand %s of %d×%d (ld %d) in %d values", name, rows, cols, ld, len(s)))
		}
	}
	need("a", a, ar, ac, max(lda, 1))
	need("b", b, br, bc, max(ldb, 1))
	need("c", c, m, n, ldc)
	if k == 0 { // c = beta·c, without asking a library about empty operands
		for i := 0; i < m; i++ {
			row := c[i*ldc : i*ldc+n]
			for j := range row {
				if beta == 0 {
					row[j] = 0
				} else {
					row[j] *= beta
				}
			}
		}
		return
	}
	be.blas.sgemm(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}
