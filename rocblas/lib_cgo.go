//go:build cgo

package rocblas

/*
#include <stdint.h>
#include <stddef.h>

// Function tables, one per vendor (index 0 AMD, 1 NVIDIA), indexed by the
// enums below; the Go side names each entry (symbolTables) and fills them.
// Both begin with the handle calls, whose signatures the libraries share.
enum { H_CREATE, H_DESTROY, H_SET_STREAM, H_N };
enum { RB_GEMM = H_N, RB_STATUS_STRING, RB_VERSION_SIZE, RB_VERSION, RB_N };
enum { CB_SET_MATH = H_N, CB_GEMM, CB_GET_PROPERTY, CB_STATUS_STRING, CB_STATUS_NAME, CB_N };
#define FP_MAX 8
_Static_assert(RB_N <= FP_MAX && CB_N <= FP_MAX, "FP_MAX too small");

static void* fp[2][FP_MAX];
static void fp_set(int v, int i, uintptr_t p) { fp[v][i] = (void*)p; }

static int h_create(int v, uintptr_t* h) {
	void* p = 0;
	int s = ((int (*)(void**))fp[v][H_CREATE])(&p);
	*h = (uintptr_t)p;
	return s;
}
static int h_destroy(int v, uintptr_t h) { return ((int (*)(void*))fp[v][H_DESTROY])((void*)h); }
static int h_set_stream(int v, uintptr_t h, uintptr_t s) {
	return ((int (*)(void*, void*))fp[v][H_SET_STREAM])((void*)h, (void*)s);
}

// rocBLAS. Enums are int-sized; rocblas_int is int32, rocblas_stride int64.
typedef int (*rb_gemm_t)(void*, int, int, int32_t, int32_t, int32_t,
	const void*, const void*, int, int32_t, int64_t,
	const void*, int, int32_t, int64_t,
	const void*, const void*, int, int32_t, int64_t,
	void*, int, int32_t, int64_t,
	int32_t, int, int, int32_t, uint32_t);
typedef const char* (*rb_status_string_t)(int);
typedef int (*rb_version_size_t)(size_t*);
typedef int (*rb_version_t)(char*, size_t);

static int rb_gemm(uintptr_t h, int ta, int tb, int m, int n, int k, float alpha,
	uintptr_t a, int at, int lda, int64_t sa, uintptr_t b, int bt, int ldb, int64_t sb,
	float beta, uintptr_t c, int ct, int ldc, int64_t sc, int batch, int compute) {
	// C is also D: rocBLAS writes D, reads C when beta != 0.
	return ((rb_gemm_t)fp[0][RB_GEMM])((void*)h, ta, tb, m, n, k, &alpha,
		(const void*)a, at, lda, sa, (const void*)b, bt, ldb, sb,
		&beta, (const void*)c, ct, ldc, sc, (void*)c, ct, ldc, sc,
		batch, compute, 0, 0, 0);
}
static const char* rb_status_string(int s) {
	return ((rb_status_string_t)fp[0][RB_STATUS_STRING])(s);
}
static int rb_version(char* buf, size_t n) {
	if (!fp[0][RB_VERSION_SIZE] || !fp[0][RB_VERSION]) return -1;
	size_t need = 0;
	if (((rb_version_size_t)fp[0][RB_VERSION_SIZE])(&need) != 0 || need > n) return -1;
	return ((rb_version_t)fp[0][RB_VERSION])(buf, n);
}

// cuBLAS.
typedef int (*cb_set_math_t)(void*, int);
typedef int (*cb_gemm_t)(void*, int, int, int, int, int,
	const void*, const void*, int, int, long long,
	const void*, int, int, long long,
	const void*, void*, int, int, long long,
	int, int, int);
typedef int (*cb_get_property_t)(int, int*);
typedef const char* (*cb_status_string_t)(int);

static int cb_set_math(uintptr_t h, int mode) {
	return ((cb_set_math_t)fp[1][CB_SET_MATH])((void*)h, mode);
}
static int cb_gemm(uintptr_t h, int ta, int tb, int m, int n, int k, float alpha,
	uintptr_t a, int at, int lda, int64_t sa, uintptr_t b, int bt, int ldb, int64_t sb,
	float beta, uintptr_t c, int ct, int ldc, int64_t sc, int batch, int compute) {
	return ((cb_gemm_t)fp[1][CB_GEMM])((void*)h, ta, tb, m, n, k, &alpha,
		(const void*)a, at, lda, sa, (const void*)b, bt, ldb, sb,
		&beta, (void*)c, ct, ldc, sc, batch, compute, -1);
}
// cb_version is major*10000+minor*100+patch, or -1.
static int cb_version(void) {
	if (!fp[1][CB_GET_PROPERTY]) return -1;
	int v[3] = {0};
	for (int i = 0; i < 3; i++)
		if (((cb_get_property_t)fp[1][CB_GET_PROPERTY])(i, &v[i]) != 0) return -1;
	return v[0] * 10000 + v[1] * 100 + v[2];
}
static const char* cb_status(int s, int which) {
	void* f = fp[1][which ? CB_STATUS_NAME : CB_STATUS_STRING];
	return f ? ((cb_status_string_t)f)(s) : 0;
}
*/
import "C"

import (
	"fmt"

	"github.com/framepack-go/framepack/internal/dynlib"
)

// symbolTables names the functions of each vendor's table, by the C
// enums: the single source of truth, which the loader resolves and the
// tests check against the libraries' export tables.
var symbolTables = [2][]dynlib.Symbol{
	(&[C.RB_N]dynlib.Symbol{
		C.H_CREATE:         {Name: "rocblas_create_handle"},
		C.H_DESTROY:        {Name: "rocblas_destroy_handle"},
		C.H_SET_STREAM:     {Name: "rocblas_set_stream"},
		C.RB_GEMM:          {Name: "rocblas_gemm_strided_batched_ex"},
		C.RB_STATUS_STRING: {Name: "rocblas_status_to_string"},
		C.RB_VERSION_SIZE:  {Name: "rocblas_get_version_string_size", Optional: true},
		C.RB_VERSION:       {Name: "rocblas_get_version_string", Optional: true},
	})[:],
	(&[C.CB_N]dynlib.Symbol{
		C.H_CREATE:         {Name: "cublasCreate_v2"},
		C.H_DESTROY:        {Name: "cublasDestroy_v2"},
		C.H_SET_STREAM:     {Name: "cublasSetStream_v2"},
		C.CB_SET_MATH:      {Name: "cublasSetMathMode"},
		C.CB_GEMM:          {Name: "cublasGemmStridedBatchedEx"},
		C.CB_GET_PROPERTY:  {Name: "cublasGetProperty", Optional: true},
		C.CB_STATUS_STRING: {Name: "cublasGetStatusString", Optional: true},
		C.CB_STATUS_NAME:   {Name: "cublasGetStatusName", Optional: true},
	})[:],
}

func init() { libs.Symbols, libs.Init = symbols, initLib }

// symbols is v's function table.
func symbols(v Vendor) []dynlib.Symbol { return symbolTables[v-1] }

// initLib hands a loaded library's addresses to the C shim and reads its
// version.
func initLib(v Vendor, t *dynlib.Table) (*Lib, error) {
	for i, p := range t.Addrs {
		C.fp_set(C.int(v-1), C.int(i), C.uintptr_t(p))
	}
	l := &Lib{vendor: v, path: t.Path}
	var buf [256]C.char
	switch v {
	case AMD:
		if C.rb_version(&buf[0], C.size_t(len(buf))) == 0 {
			l.version = "rocBLAS " + C.GoString(&buf[0])
		}
	case NVIDIA:
		if ver := int(C.cb_version()); ver >= 0 {
			l.version = fmt.Sprintf("cuBLAS %d.%d.%d", ver/10000, ver/100%100, ver%100)
		}
	}
	if l.version == "" {
		l.version = "(version unknown)"
	}
	return l, nil
}

// cv is the vendor's index in the C tables.
func (l *Lib) cv() C.int { return C.int(l.vendor - 1) }

// call checks status s of the vendor's function i, named by the table.
func (l *Lib) call(i, s C.int) error { return l.check(symbolTables[l.vendor-1][i].Name, s) }

func (l *Lib) check(fn string, s C.int) error {
	if s == 0 {
		return nil
	}
	return &Error{Lib: "rocblas", Func: fn, Status: int(s), Name: l.statusName(int(s))}
}

func (l *Lib) statusName(s int) string {
	if l.vendor == AMD {
		if p := C.rb_status_string(C.int(s)); p != nil {
			return C.GoString(p)
		}
		return "unknown rocBLAS status"
	}
	name, desc := C.cb_status(C.int(s), 1), C.cb_status(C.int(s), 0)
	switch {
	case name != nil && desc != nil:
		return C.GoString(name) + ": " + C.GoString(desc)
	case name != nil:
		return C.GoString(name)
	}
	return "unknown cuBLAS status"
}

// NewHandle creates a handle on the current device, bound to stream
// (0 is the default stream).
func (l *Lib) NewHandle(stream uintptr) (*Handle, error) {
	var h C.uintptr_t
	if err := l.call(C.H_CREATE, C.h_create(l.cv(), &h)); err != nil {
		return nil, err
	}
	hd := &Handle{lib: l, h: uintptr(h)}
	if l.vendor == NVIDIA {
		// Default math: no TF32 unless a call asks for it by compute type.
		if err := l.check("cublasSetMathMode", C.cb_set_math(h, 0)); err != nil {
			hd.Close()
			return nil, err
		}
	}
	if err := hd.SetStream(stream); err != nil {
		hd.Close()
		return nil, err
	}
	return hd, nil
}

// SetStream binds the handle to a stream; later calls are ordered on it.
func (h *Handle) SetStream(stream uintptr) error {
	if h.closed {
		return errClosed
	}
	return h.lib.call(C.H_SET_STREAM, C.h_set_stream(h.lib.cv(), C.uintptr_t(h.h), C.uintptr_t(stream)))
}

// Close destroys the handle. Work already queued completes.
func (h *Handle) Close() error {
	if h.closed {
		return nil
	}
	h.closed = true
	return h.lib.call(C.H_DESTROY, C.h_destroy(h.lib.cv(), C.uintptr_t(h.h)))
}

// Vendor enums.
const (
	rbNone, rbTrans      = 111, 112
	rbF16, rbF32, rbBF16 = 150, 151, 168

	cbN, cbT                   = 0, 1
	cudaF32, cudaF16, cudaBF16 = 0, 2, 14
	cbCompute32F               = 68
	cbCompute32FFastTF32       = 77
	cbCompute32FPedantic       = 69
	// pedanticMaxDim: GEMMs with an output dimension this small run with
	// CUBLAS_COMPUTE_32F_PEDANTIC.
	pedanticMaxDim = 8
)

func vendorType(d DType, v Vendor) C.int {
	if v == AMD {
		switch d {
		case F16:
			return rbF16
		case BF16:
			return rbBF16
		}
		return rbF32
	}
	switch d {
	case F16:
		return cudaF16
	case BF16:
		return cudaBF16
	}
	return cudaF32
}

func op(v Vendor, trans bool) C.int {
	if v == AMD {
		if trans {
			return rbTrans
		}
		return rbNone
	}
	if trans {
		return cbT
	}
	return cbN
}

// GemmStridedBatched queues g on the handle's stream.
func (h *Handle) GemmStridedBatched(g Gemm) error {
	if h.closed {
		return errClosed
	}
	if g.Batch == 0 {
		g.Batch = 1
	}
	if err := g.Validate(); err != nil {
		return err
	}
	if g.M == 0 || g.N == 0 || g.Batch == 0 {
		return nil
	}
	v := h.lib.vendor
	at, ct := vendorType(g.In, v), vendorType(g.Out, v)
	hh, ta, tb := C.uintptr_t(h.h), op(v, g.TransA), op(v, g.TransB)
	m, n, k, batch := C.int(g.M), C.int(g.N), C.int(g.K), C.int(g.Batch)
	a, lda, sa := C.uintptr_t(g.A), C.int(g.LDA), C.int64_t(g.StrideA)
	b, ldb, sb := C.uintptr_t(g.B), C.int(g.LDB), C.int64_t(g.StrideB)
	c, ldc, sc := C.uintptr_t(g.C), C.int(g.LDC), C.int64_t(g.StrideC)
	alpha, beta := C.float(g.Alpha), C.float(g.Beta)
	if v == AMD {
		return h.lib.check("rocblas_gemm_strided_batched_ex",
			C.rb_gemm(hh, ta, tb, m, n, k, alpha, a, at, lda, sa, b, at, ldb, sb, beta, c, ct, ldc, sc, batch, rbF32))
	}
	compute := C.int(cbCompute32F)
	if g.In == F32 && h.fast {
		compute = cbCompute32FFastTF32
	}
	if g.In != F32 && min(g.M, g.N) <= pedanticMaxDim {
		// cuBLAS's default kernels for these GEMV-like products lose
		// precision in bf16/f16 (FramePack's transformer modulation, M = 1:
		// 0.0101 → 0.0096 relative error of the whole bf16 forward vs f32).
		// They are memory-bound, so the pedantic path costs no time.
		compute = cbCompute32FPedantic
	}
	return h.lib.check("cublasGemmStridedBatchedEx",
		C.cb_gemm(hh, ta, tb, m, n, k, alpha, a, at, lda, sa, b, at, ldb, sb, beta, c, ct, ldc, sc, batch, compute))
}

// MatMul queues a row-major product (see MatMul).
func (h *Handle) MatMul(m MatMul) error {
	return h.GemmStridedBatched(m.ColumnMajor())
}
