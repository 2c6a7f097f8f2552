//go:build cgo

package miopen

/*
#include <stdint.h>
#include <stddef.h>

// Function tables, one per vendor (index 0 AMD, 1 NVIDIA), indexed by the
// enums below; the Go side names each entry (symbolTables) and fills them.
// Both begin with the calls whose signatures MIOpen and cuDNN share.
enum { DNN_DESTROY, DNN_SET_STREAM, DNN_ERR, DNN_CREATE_T, DNN_SET_T, DNN_DESTROY_T,
       DNN_CREATE_C, DNN_DESTROY_C, DNN_N };
enum { MI_CREATE = DNN_N, MI_VERSION, MI_INIT_C,
       MI_OUTDIM, MI_SOL_COUNT, MI_SOL, MI_SOL_WS, MI_COMPILE, MI_IMMEDIATE,
       MI_WS, MI_FIND, MI_FIND_MODE, MI_N };
enum { CD_CREATE = DNN_N, CD_VERSION, CD_CREATE_F, CD_SET_F, CD_DESTROY_F,
       CD_SET_C, CD_SET_MATH, CD_OUTDIM,
       CD_GET_ALGO, CD_WS, CD_FWD, CD_FIND,
       CD_BE_CREATE, CD_BE_DESTROY, CD_BE_SET, CD_BE_GET, CD_BE_FINALIZE, CD_BE_EXECUTE, CD_LAST_ERR, CD_N };
#define FP_MAX 32
_Static_assert(MI_N <= FP_MAX && CD_N <= FP_MAX, "FP_MAX too small");

static void* fp[2][FP_MAX];
static void fp_set(int v, int i, uintptr_t p) { fp[v][i] = (void*)p; }

#define FN(v, i, T) ((T)fp[v][i])
#define MI(i, T) FN(0, i, T)
#define CD(i, T) FN(1, i, T)
typedef void* P;

// ---- both ----
static int dnn_destroy(int v, uintptr_t h) { return FN(v, DNN_DESTROY, int (*)(P))((P)h); }
static int dnn_set_stream(int v, uintptr_t h, uintptr_t s) { return FN(v, DNN_SET_STREAM, int (*)(P, P))((P)h, (P)s); }
static const char* dnn_err(int v, int s) { return FN(v, DNN_ERR, const char* (*)(int))(s); }
// dnn_destroy_desc frees a descriptor with the vendor's destroy call i.
static int dnn_destroy_desc(int v, int i, uintptr_t d) { return FN(v, i, int (*)(P))((P)d); }
// dnn_new makes a descriptor with create call i (*r its status).
static P dnn_new(int v, int i, int* r) { P p = 0; *r = FN(v, i, int (*)(P*))(&p); return p; }
// dnn_made hands out p, whose setter returned r, or frees it with destroy
// call i when r is an error.
static int dnn_made(int v, int i, P p, int r, uintptr_t* out) {
	if (r) { dnn_destroy_desc(v, i, (uintptr_t)p); return r; }
	*out = (uintptr_t)p;
	return 0;
}
static int dnn_tensor(int v, uintptr_t* d, int dt, int nd, const int* dims, const int* strides) {
	int r;
	P p = dnn_new(v, DNN_CREATE_T, &r);
	if (r) return r;
	r = FN(v, DNN_SET_T, int (*)(P, int, int, const int*, const int*))(p, dt, nd, dims, strides);
	return dnn_made(v, DNN_DESTROY_T, p, r, d);
}
// dnn_conv makes a convolution descriptor of ns spatial dimensions.
static int dnn_conv(int v, uintptr_t* c, int ns, const int* pad, const int* stride, const int* dil) {
	int r;
	P p = dnn_new(v, DNN_CREATE_C, &r);
	if (r) return r;
	if (v == 0)
		r = MI(MI_INIT_C, int (*)(P, int, const int*, const int*, const int*, int))(p, ns, pad, stride, dil, 0);
	else // CROSS_CORRELATION (1), f32 compute (CUDNN_DATA_FLOAT 0) for every dtype.
		r = CD(CD_SET_C, int (*)(P, int, const int*, const int*, const int*, int, int))(p, ns, pad, stride, dil, 1, 0);
	return dnn_made(v, DNN_DESTROY_C, p, r, c);
}

// ---- MIOpen ----
typedef struct { float time; size_t workspace_size; uint64_t solution_id; int algorithm; } mi_sol;
typedef struct { int algo; float time; size_t memory; } mi_perf;

static int mi_create(uintptr_t* h, uintptr_t s) { P p = 0; int r = MI(MI_CREATE, int (*)(P*, P))(&p, (P)s); *h = (uintptr_t)p; return r; }
static int mi_version(size_t* a, size_t* b, size_t* c) { return MI(MI_VERSION, int (*)(size_t*, size_t*, size_t*))(a, b, c); }
// mi_set_find_mode returns -1 when this MIOpen lacks the call.
static int mi_set_find_mode(uintptr_t c, int mode) {
	if (!fp[0][MI_FIND_MODE]) return -1;
	return MI(MI_FIND_MODE, int (*)(P, int))((P)c, mode);
}
static int mi_outdim(uintptr_t c, uintptr_t x, uintptr_t w, int* n, int* out) {
	return MI(MI_OUTDIM, int (*)(P, P, P, int*, int*))((P)c, (P)x, (P)w, n, out);
}
static int mi_solutions(uintptr_t h, uintptr_t w, uintptr_t x, uintptr_t c, uintptr_t y, mi_sol* out, size_t max, size_t* n) {
	return MI(MI_SOL, int (*)(P, P, P, P, P, size_t, size_t*, mi_sol*))((P)h, (P)w, (P)x, (P)c, (P)y, max, n, out);
}
static int mi_solution_count(uintptr_t h, uintptr_t w, uintptr_t x, uintptr_t c, uintptr_t y, size_t* n) {
	return MI(MI_SOL_COUNT, int (*)(P, P, P, P, P, size_t*))((P)h, (P)w, (P)x, (P)c, (P)y, n);
}
static int mi_sol_ws(uintptr_t h, uintptr_t w, uintptr_t x, uintptr_t c, uintptr_t y, uint64_t id, size_t* n) {
	return MI(MI_SOL_WS, int (*)(P, P, P, P, P, uint64_t, size_t*))((P)h, (P)w, (P)x, (P)c, (P)y, id, n);
}
static int mi_compile(uintptr_t h, uintptr_t w, uintptr_t x, uintptr_t c, uintptr_t y, uint64_t id) {
	return MI(MI_COMPILE, int (*)(P, P, P, P, P, uint64_t))((P)h, (P)w, (P)x, (P)c, (P)y, id);
}
static int mi_forward(uintptr_t h, uintptr_t w, uintptr_t wp, uintptr_t x, uintptr_t xp, uintptr_t c,
	uintptr_t y, uintptr_t yp, uintptr_t ws, size_t wsn, uint64_t id) {
	return MI(MI_IMMEDIATE, int (*)(P, P, const void*, P, const void*, P, P, void*, void*, size_t, uint64_t))(
		(P)h, (P)w, (const void*)wp, (P)x, (const void*)xp, (P)c, (P)y, (void*)yp, (void*)ws, wsn, id);
}
static int mi_ws(uintptr_t h, uintptr_t w, uintptr_t x, uintptr_t c, uintptr_t y, size_t* n) {
	return MI(MI_WS, int (*)(P, P, P, P, P, size_t*))((P)h, (P)w, (P)x, (P)c, (P)y, n);
}
static int mi_find(uintptr_t h, uintptr_t x, uintptr_t xp, uintptr_t w, uintptr_t wp, uintptr_t c,
	uintptr_t y, uintptr_t yp, int req, int* ret, mi_perf* perf, uintptr_t ws, size_t wsn) {
	return MI(MI_FIND, int (*)(P, P, const void*, P, const void*, P, P, void*, int, int*, mi_perf*, void*, size_t, _Bool))(
		(P)h, (P)x, (const void*)xp, (P)w, (const void*)wp, (P)c, (P)y, (void*)yp, req, ret, perf, (void*)ws, wsn, 0);
}

// ---- cuDNN 9, legacy API ----
typedef struct { int algo; int status; float time; size_t memory; int determinism; int mathType; int reserved[3]; } cd_perf;

static int cd_create(uintptr_t* h) { P p = 0; int r = CD(CD_CREATE, int (*)(P*))(&p); *h = (uintptr_t)p; return r; }
static size_t cd_version(void) { return CD(CD_VERSION, size_t (*)(void))(); }
static int cd_filter(uintptr_t* d, int dt, int format, int nd, const int* dims) {
	int r;
	P p = dnn_new(1, CD_CREATE_F, &r);
	if (r) return r;
	r = CD(CD_SET_F, int (*)(P, int, int, int, const int*))(p, dt, format, nd, dims);
	return dnn_made(1, CD_DESTROY_F, p, r, d);
}
static int cd_set_math(uintptr_t c, int m) { return CD(CD_SET_MATH, int (*)(P, int))((P)c, m); }
static int cd_outdim(uintptr_t c, uintptr_t x, uintptr_t w, int n, int* out) {
	return CD(CD_OUTDIM, int (*)(P, P, P, int, int*))((P)c, (P)x, (P)w, n, out);
}
static int cd_algos(uintptr_t h, uintptr_t x, uintptr_t w, uintptr_t c, uintptr_t y, int req, int* ret, cd_perf* perf) {
	return CD(CD_GET_ALGO, int (*)(P, P, P, P, P, int, int*, cd_perf*))((P)h, (P)x, (P)w, (P)c, (P)y, req, ret, perf);
}
static int cd_ws(uintptr_t h, uintptr_t x, uintptr_t w, uintptr_t c, uintptr_t y, int algo, size_t* n) {
	return CD(CD_WS, int (*)(P, P, P, P, P, int, size_t*))((P)h, (P)x, (P)w, (P)c, (P)y, algo, n);
}
static int cd_forward(uintptr_t h, uintptr_t x, uintptr_t xp, uintptr_t w, uintptr_t wp, uintptr_t c, int algo,
	uintptr_t ws, size_t wsn, uintptr_t y, uintptr_t yp, float beta) {
	float alpha = 1;
	return CD(CD_FWD, int (*)(P, const void*, P, const void*, P, const void*, P, int, void*, size_t, const void*, P, void*))(
		(P)h, &alpha, (P)x, (const void*)xp, (P)w, (const void*)wp, (P)c, algo, (void*)ws, wsn, &beta, (P)y, (void*)yp);
}
static int cd_find(uintptr_t h, uintptr_t x, uintptr_t xp, uintptr_t w, uintptr_t wp, uintptr_t c,
	uintptr_t y, uintptr_t yp, int req, int* ret, cd_perf* perf, uintptr_t ws, size_t wsn) {
	return CD(CD_FIND, int (*)(P, P, const void*, P, const void*, P, P, void*, int, int*, cd_perf*, void*, size_t))(
		(P)h, (P)x, (const void*)xp, (P)w, (const void*)wp, (P)c, (P)y, (void*)yp, req, ret, perf, (void*)ws, wsn);
}
*/
import "C"

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"unsafe"

	"github.com/framepack-go/framepack/internal/dynlib"
)

// symbolTables names the functions of each vendor's table, by the C
// enums: the single source of truth, which the loader resolves and the
// tests check against the libraries' export tables.
var symbolTables = [2][]dynlib.Symbol{
	(&[C.MI_N]dynlib.Symbol{
		C.DNN_DESTROY:    {Name: "miopenDestroy"},
		C.DNN_SET_STREAM: {Name: "miopenSetStream"},
		C.DNN_ERR:        {Name: "miopenGetErrorString"},
		C.DNN_CREATE_T:   {Name: "miopenCreateTensorDescriptor"},
		C.DNN_SET_T:      {Name: "miopenSetTensorDescriptor"},
		C.DNN_DESTROY_T:  {Name: "miopenDestroyTensorDescriptor"},
		C.DNN_CREATE_C:   {Name: "miopenCreateConvolutionDescriptor"},
		C.DNN_DESTROY_C:  {Name: "miopenDestroyConvolutionDescriptor"},
		C.MI_CREATE:      {Name: "miopenCreateWithStream"},
		C.MI_VERSION:     {Name: "miopenGetVersion"},
		C.MI_INIT_C:      {Name: "miopenInitConvolutionNdDescriptor"},
		C.MI_OUTDIM:      {Name: "miopenGetConvolutionNdForwardOutputDim"},
		C.MI_SOL_COUNT:   {Name: "miopenConvolutionForwardGetSolutionCount"},
		C.MI_SOL:         {Name: "miopenConvolutionForwardGetSolution"},
		C.MI_SOL_WS:      {Name: "miopenConvolutionForwardGetSolutionWorkspaceSize"},
		C.MI_COMPILE:     {Name: "miopenConvolutionForwardCompileSolution"},
		C.MI_IMMEDIATE:   {Name: "miopenConvolutionForwardImmediate"},
		C.MI_WS:          {Name: "miopenConvolutionForwardGetWorkSpaceSize"},
		C.MI_FIND:        {Name: "miopenFindConvolutionForwardAlgorithm"},
		// Exported since ROCm 4.1 but declared only in miopen_internal.h.
		C.MI_FIND_MODE: {Name: "miopenSetConvolutionFindMode", Optional: true},
	})[:],
	(&[C.CD_N]dynlib.Symbol{
		C.DNN_DESTROY:    {Name: "cudnnDestroy"},
		C.DNN_SET_STREAM: {Name: "cudnnSetStream"},
		C.DNN_ERR:        {Name: "cudnnGetErrorString"},
		C.DNN_CREATE_T:   {Name: "cudnnCreateTensorDescriptor"},
		C.DNN_SET_T:      {Name: "cudnnSetTensorNdDescriptor"},
		C.DNN_DESTROY_T:  {Name: "cudnnDestroyTensorDescriptor"},
		C.DNN_CREATE_C:   {Name: "cudnnCreateConvolutionDescriptor"},
		C.DNN_DESTROY_C:  {Name: "cudnnDestroyConvolutionDescriptor"},
		C.CD_CREATE:      {Name: "cudnnCreate"},
		C.CD_VERSION:     {Name: "cudnnGetVersion"},
		C.CD_CREATE_F:    {Name: "cudnnCreateFilterDescriptor"},
		C.CD_SET_F:       {Name: "cudnnSetFilterNdDescriptor"},
		C.CD_DESTROY_F:   {Name: "cudnnDestroyFilterDescriptor"},
		C.CD_SET_C:       {Name: "cudnnSetConvolutionNdDescriptor"},
		C.CD_SET_MATH:    {Name: "cudnnSetConvolutionMathType"},
		C.CD_OUTDIM:      {Name: "cudnnGetConvolutionNdForwardOutputDim"},
		C.CD_GET_ALGO:    {Name: "cudnnGetConvolutionForwardAlgorithm_v7"},
		C.CD_WS:          {Name: "cudnnGetConvolutionForwardWorkspaceSize"},
		C.CD_FWD:         {Name: "cudnnConvolutionForward"},
		C.CD_FIND:        {Name: "cudnnFindConvolutionForwardAlgorithmEx"},
		// The graph (backend) API, for fused attention (attention_cgo.go).
		C.CD_BE_CREATE:   {Name: "cudnnBackendCreateDescriptor", Optional: true},
		C.CD_BE_DESTROY:  {Name: "cudnnBackendDestroyDescriptor", Optional: true},
		C.CD_BE_SET:      {Name: "cudnnBackendSetAttribute", Optional: true},
		C.CD_BE_GET:      {Name: "cudnnBackendGetAttribute", Optional: true},
		C.CD_BE_FINALIZE: {Name: "cudnnBackendFinalize", Optional: true},
		C.CD_BE_EXECUTE:  {Name: "cudnnBackendExecute", Optional: true},
		C.CD_LAST_ERR:    {Name: "cudnnGetLastErrorString", Optional: true},
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
	if v == AMD {
		var a, b, c C.size_t
		if C.mi_version(&a, &b, &c) == 0 {
			l.version = fmt.Sprintf("MIOpen %d.%d.%d", a, b, c)
		}
	} else {
		ver := int(C.cd_version())
		if ver < 90000 {
			return nil, fmt.Errorf("cuDNN version %d is older than 9", ver)
		}
		l.version = fmt.Sprintf("cuDNN %d.%d.%d", ver/10000, ver/100%100, ver%100)
		l.cudnnVersion = ver
		a := t.Addrs
		l.graph = initGraph(a[C.CD_BE_CREATE], a[C.CD_BE_DESTROY], a[C.CD_BE_SET], a[C.CD_BE_GET],
			a[C.CD_BE_FINALIZE], a[C.CD_BE_EXECUTE], a[C.CD_LAST_ERR])
	}
	if l.version == "" {
		l.version = "(version unknown)"
	}
	return l, nil
}

// cv is the vendor's index in the C tables.
func (l *Lib) cv() C.int { return C.int(l.vendor - 1) }

// fn is the name of the vendor's function i.
func (l *Lib) fn(i C.int) string { return symbolTables[l.vendor-1][i].Name }

func (l *Lib) check(fn string, s C.int) error {
	if s == 0 {
		return nil
	}
	return &Error{Lib: "miopen", Func: fn, Status: int(s), Name: C.GoString(C.dnn_err(l.cv(), s))}
}

// Vendor enums.
const (
	miHalf, miFloat, miBF16  = 0, 1, 5
	miFindNormal, miFindFast = 1, 2

	cdFloat, cdHalf, cdBF16                     = 0, 2, 9
	cdFormatNCHW, cdFormatNHWC                  = 0, 1
	cdMathTensorOp, cdMathConversion, cdMathFMA = 1, 2, 3
	cdAlgoCount                                 = 8
)

func vendorType(d DType, v Vendor) C.int {
	switch {
	case v == AMD && d == F16:
		return miHalf
	case v == AMD && d == BF16:
		return miBF16
	case v == AMD:
		return miFloat
	case d == F16:
		return cdHalf
	case d == BF16:
		return cdBF16
	}
	return cdFloat
}

// NewHandle creates a handle on the current device, bound to stream (0 is
// the default stream).
func (l *Lib) NewHandle(stream uintptr) (*Handle, error) {
	var h C.uintptr_t
	if l.vendor == AMD {
		if err := l.check("miopenCreateWithStream", C.mi_create(&h, C.uintptr_t(stream))); err != nil {
			return nil, err
		}
		return &Handle{lib: l, h: uintptr(h), plans: map[ConvDesc]*entry{}}, nil
	}
	if err := l.check("cudnnCreate", C.cd_create(&h)); err != nil {
		return nil, err
	}
	hd := &Handle{lib: l, h: uintptr(h), plans: map[ConvDesc]*entry{}}
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
	l := h.lib
	return l.check(l.fn(C.DNN_SET_STREAM), C.dnn_set_stream(l.cv(), C.uintptr_t(h.h), C.uintptr_t(stream)))
}

// Close frees the cached plans and the handle. Work already queued
// completes.
func (h *Handle) Close() error {
	if h.closed {
		return nil
	}
	h.forget()
	h.forgetAttention()
	h.closed = true
	l := h.lib
	return l.check(l.fn(C.DNN_DESTROY), C.dnn_destroy(l.cv(), C.uintptr_t(h.h)))
}

func (h *Handle) forget() {
	for k, e := range h.plans {
		h.release(e)
		delete(h.plans, k)
	}
}

func (h *Handle) release(e *entry) {
	h.releaseGraph(e)
	// MIOpen's weight is a tensor descriptor, cuDNN's a filter descriptor.
	wDestroy := C.int(C.DNN_DESTROY_T)
	if h.lib.vendor == NVIDIA {
		wDestroy = C.CD_DESTROY_F
	}
	for _, d := range []struct {
		p       uintptr
		destroy C.int
	}{{e.xd, C.DNN_DESTROY_T}, {e.wd, wDestroy}, {e.yd, C.DNN_DESTROY_T}, {e.cd, C.DNN_DESTROY_C}} {
		if d.p != 0 {
			C.dnn_destroy_desc(h.lib.cv(), d.destroy, C.uintptr_t(d.p))
		}
	}
}

func cints(v []int32) *C.int { return (*C.int)(unsafe.Pointer(&v[0])) }

func cintsOf(v []int) []C.int {
	out := make([]C.int, len(v))
	for i, x := range v {
		out[i] = C.int(x)
	}
	return out
}

// describe makes the library descriptors for d (normalised and valid) and
// checks that the library agrees on the output size.
func (h *Handle) describe(d ConvDesc) (*entry, error) {
	l := h.lib
	v := l.vendor
	dt := vendorType(d.DType, v)
	do, ho, wo := d.OutDims()
	xDims, xStr := d.tensorDims(d.N, d.C, d.D, d.H, d.W)
	wDims, wStr := d.tensorDims(d.K, d.C, d.KD, d.KH, d.KW)
	yDims, yStr := d.tensorDims(d.N, d.K, do, ho, wo)
	pad, stride, dil := cintsOf(d.spatial(d.Pad)), cintsOf(d.spatial(d.Stride)), cintsOf(d.spatial(d.Dilation))
	nd, ns := C.int(d.nd()), C.int(len(pad))
	e := &entry{}
	// The library writes each new descriptor straight into the entry.
	xd, wd := (*C.uintptr_t)(unsafe.Pointer(&e.xd)), (*C.uintptr_t)(unsafe.Pointer(&e.wd))
	yd, cd := (*C.uintptr_t)(unsafe.Pointer(&e.yd)), (*C.uintptr_t)(unsafe.Pointer(&e.cd))
	cv, setT := l.cv(), l.fn(C.DNN_SET_T)
	var wErr, convErr error
	if v == AMD {
		// MIOpen has no filter type: the weight is a tensor whose strides
		// give its layout, like the data tensors.
		wErr = l.check(setT+"(w)", C.dnn_tensor(cv, wd, dt, nd, cints(wDims), cints(wStr)))
		convErr = l.check(l.fn(C.MI_INIT_C), C.dnn_conv(cv, cd, ns, &pad[0], &stride[0], &dil[0]))
	} else {
		format := C.int(cdFormatNCHW)
		if d.Layout == NDHWC {
			format = cdFormatNHWC
		}
		wErr = l.check(l.fn(C.CD_SET_F), C.cd_filter(wd, dt, format, nd, cints(wDims)))
		convErr = l.check(l.fn(C.CD_SET_C), C.dnn_conv(cv, cd, ns, &pad[0], &stride[0], &dil[0]))
	}
	err := firstErr(
		l.check(setT+"(x)", C.dnn_tensor(cv, xd, dt, nd, cints(xDims), cints(xStr))),
		wErr,
		l.check(setT+"(y)", C.dnn_tensor(cv, yd, dt, nd, cints(yDims), cints(yStr))),
		convErr)
	switch {
	case err != nil:
	case v == AMD:
		// FAST: a Find on this descriptor reads the find-db or takes the
		// heuristic, never benchmarks (Search opts in).
		if s := C.mi_set_find_mode(*cd, miFindFast); s > 0 {
			err = l.check("miopenSetConvolutionFindMode", s)
		}
	default:
		err = l.check("cudnnSetConvolutionMathType", C.cd_set_math(*cd, h.mathFor(d)))
	}
	if err != nil {
		h.release(e)
		return nil, fmt.Errorf("%v: %w", d, err)
	}
	var out [5]C.int
	n := nd
	if v == AMD {
		err = l.check("miopenGetConvolutionNdForwardOutputDim", C.mi_outdim(*cd, *xd, *wd, &n, &out[0]))
	} else {
		err = l.check("cudnnGetConvolutionNdForwardOutputDim", C.cd_outdim(*cd, *xd, *wd, nd, &out[0]))
	}
	if err == nil {
		got := make([]int32, n)
		for i := range got {
			got[i] = int32(out[i])
		}
		if want, _ := d.tensorDims(d.N, d.K, do, ho, wo); !slices.Equal(got, want) {
			err = fmt.Errorf("library output shape %v, want %v", got, want)
		}
	}
	if err != nil {
		h.release(e)
		return nil, fmt.Errorf("%v: %w", d, err)
	}
	return e, nil
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// mathFor is the cuDNN math type asked for: tensor cores for f16/bf16, and
// for f32 plain FMA unless fast mode allows TF32.
func (h *Handle) mathFor(d ConvDesc) C.int {
	if d.DType == F32 && !h.fast {
		return cdMathFMA
	}
	return cdMathTensorOp
}

// Plan returns the algorithm for d, choosing it on first use (heuristics,
// no benchmarking; on AMD this compiles the solution's kernels) and caching
// it in the handle.
func (h *Handle) Plan(d ConvDesc) (Plan, error) {
	e, err := h.lookup(d)
	if err != nil {
		return Plan{}, err
	}
	return e.plan, nil
}

func (h *Handle) lookup(d ConvDesc) (*entry, error) {
	if h.closed {
		return nil, errClosed
	}
	if err := d.Validate(); err != nil {
		return nil, err
	}
	d = d.norm()
	if e := h.plans[d]; e != nil {
		return e, nil
	}
	return h.make(d, func(e *entry) (Plan, error) {
		if h.lib.vendor == AMD {
			return h.chooseMIOpen(d, e, "immediate")
		}
		return h.chooseConv(d, e)
	})
}

// make builds descriptors, lets choose pick the plan, and caches the entry.
func (h *Handle) make(d ConvDesc, choose func(*entry) (Plan, error)) (*entry, error) {
	if d.Accumulate && h.lib.vendor == AMD {
		return nil, fmt.Errorf("miopen: %v: MIOpen's immediate mode cannot add to y", d)
	}
	e, err := h.describe(d)
	if err != nil {
		return nil, err
	}
	p, err := choose(e)
	if err != nil {
		h.release(e)
		return nil, err
	}
	p.Desc = d
	e.plan = p
	if old := h.plans[d]; old != nil {
		h.release(old)
	}
	h.plans[d] = e
	return e, nil
}

func (h *Handle) chooseCUDNN(d ConvDesc, e *entry) (Plan, error) {
	return h.chooseCUDNNWithin(d, e, -1)
}

// chooseCUDNNWithin is chooseCUDNN's plan among the algorithms needing at
// most maxWS bytes of workspace (any when maxWS < 0).
func (h *Handle) chooseCUDNNWithin(d ConvDesc, e *entry, maxWS int64) (Plan, error) {
	l := h.lib
	var perf [cdAlgoCount]C.cd_perf
	var n C.int
	hh, xd, wd, cd, yd := C.uintptr_t(h.h), C.uintptr_t(e.xd), C.uintptr_t(e.wd), C.uintptr_t(e.cd), C.uintptr_t(e.yd)
	if err := l.check("cudnnGetConvolutionForwardAlgorithm_v7", C.cd_algos(hh, xd, wd, cd, yd, cdAlgoCount, &n, &perf[0])); err != nil {
		return Plan{}, fmt.Errorf("%v: %w", d, err)
	}
	var skipped []string
	for _, p := range perf[:n] {
		algo, math := int(p.algo), int(p.mathType)
		if p.status != 0 {
			continue // not applicable to this problem
		}
		p, ok := h.tryCUDNN(d, e, algo, math, "heuristic", &skipped)
		if ok && maxWS >= 0 && p.WorkspaceBytes > maxWS {
			skipped = append(skipped, fmt.Sprintf("%s: workspace %d B over the %d B given", p.Name, p.WorkspaceBytes, maxWS))
			continue
		}
		if ok {
			p.TimeMs = -1 // _v7 ranks by heuristic, it does not time
			return p, nil
		}
	}
	return Plan{}, fmt.Errorf("miopen: %v: cuDNN offers no usable algorithm (%s)", d, orNone(skipped))
}

// tryCUDNN checks that algo (with math type math) may run d within the
// handle's rules and returns its plan.
func (h *Handle) tryCUDNN(d ConvDesc, e *entry, algo, math int, source string, skipped *[]string) (Plan, bool) {
	l := h.lib
	name := cudnnAlgoName(algo)
	// Strict f32 runs only FMA kernels: cuDNN's default math type permits
	// TF32 on Ampere and later.
	if d.DType == F32 && !h.fast && math != cdMathFMA {
		*skipped = append(*skipped, fmt.Sprintf("%s: math type %d may use TF32 (fast f32 is off)", name, math))
		return Plan{}, false
	}
	cd := C.uintptr_t(e.cd)
	if err := l.check("cudnnSetConvolutionMathType", C.cd_set_math(cd, C.int(math))); err != nil {
		*skipped = append(*skipped, name+": "+err.Error())
		return Plan{}, false
	}
	var ws C.size_t
	if err := l.check("cudnnGetConvolutionForwardWorkspaceSize", C.cd_ws(C.uintptr_t(h.h), C.uintptr_t(e.xd), C.uintptr_t(e.wd), cd, C.uintptr_t(e.yd), C.int(algo), &ws)); err != nil {
		*skipped = append(*skipped, name+": "+err.Error())
		return Plan{}, false
	}
	if h.wsLimit > 0 && int64(ws) > h.wsLimit {
		*skipped = append(*skipped, fmt.Sprintf("%s: workspace %d B over the limit %d B", name, ws, h.wsLimit))
		return Plan{}, false
	}
	return Plan{Algo: algo, Name: name, WorkspaceBytes: int64(ws), Source: source, mathType: math}, true
}

// chooseMIOpen takes MIOpen's immediate-mode list (its find-db record, else
// its fallback heuristic), best first, moves the naive solver last, and
// returns the first solution that fits the workspace limit and compiles.
func (h *Handle) chooseMIOpen(d ConvDesc, e *entry, source string) (Plan, error) {
	sols, err := h.solutions(d, e)
	if err != nil {
		return Plan{}, err
	}
	if len(sols) == 0 {
		return Plan{}, fmt.Errorf("miopen: %v: MIOpen offers no solution (its \"No suitable algorithm\" case)", d)
	}
	var skipped []string
	for _, s := range sols {
		if p, ok := h.tryMIOpen(d, e, uint64(s.solution_id), int(s.algorithm), source, &skipped); ok {
			p.TimeMs = float32(s.time)
			return p, nil
		}
	}
	return Plan{}, fmt.Errorf("miopen: %v: no MIOpen solution usable (%s)", d, orNone(skipped))
}

func (h *Handle) solutions(d ConvDesc, e *entry) ([]C.mi_sol, error) {
	l := h.lib
	hh, xd, wd, cd, yd := C.uintptr_t(h.h), C.uintptr_t(e.xd), C.uintptr_t(e.wd), C.uintptr_t(e.cd), C.uintptr_t(e.yd)
	var count C.size_t
	if err := l.check("miopenConvolutionForwardGetSolutionCount", C.mi_solution_count(hh, wd, xd, cd, yd, &count)); err != nil {
		return nil, fmt.Errorf("%v: %w", d, err)
	}
	if count == 0 {
		return nil, nil
	}
	sols := make([]C.mi_sol, count)
	var n C.size_t
	if err := l.check("miopenConvolutionForwardGetSolution", C.mi_solutions(hh, wd, xd, cd, yd, &sols[0], count, &n)); err != nil {
		return nil, fmt.Errorf("%v: %w", d, err)
	}
	sols = sols[:n]
	// Stable: MIOpen's order otherwise (best first).
	slices.SortStableFunc(sols, func(a, b C.mi_sol) int {
		na, nb := uint64(a.solution_id) == SolverNaiveFwd, uint64(b.solution_id) == SolverNaiveFwd
		switch {
		case na && !nb:
			return 1
		case nb && !na:
			return -1
		}
		return 0
	})
	return sols, nil
}

func (h *Handle) tryMIOpen(d ConvDesc, e *entry, id uint64, algo int, source string, skipped *[]string) (Plan, bool) {
	l := h.lib
	hh, xd, wd, cd, yd := C.uintptr_t(h.h), C.uintptr_t(e.xd), C.uintptr_t(e.wd), C.uintptr_t(e.cd), C.uintptr_t(e.yd)
	name := solverName(id)
	var ws C.size_t
	if err := l.check("miopenConvolutionForwardGetSolutionWorkspaceSize", C.mi_sol_ws(hh, wd, xd, cd, yd, C.uint64_t(id), &ws)); err != nil {
		*skipped = append(*skipped, name+": "+err.Error())
		return Plan{}, false
	}
	if h.wsLimit > 0 && int64(ws) > h.wsLimit {
		*skipped = append(*skipped, fmt.Sprintf("%s: workspace %d B over the limit %d B", name, ws, h.wsLimit))
		return Plan{}, false
	}
	if err := l.check("miopenConvolutionForwardCompileSolution", C.mi_compile(hh, wd, xd, cd, yd, C.uint64_t(id))); err != nil {
		*skipped = append(*skipped, name+": "+err.Error())
		return Plan{}, false
	}
	return Plan{Algo: algo, SolutionID: id, Name: name, WorkspaceBytes: int64(ws),
		IsNaive: id == SolverNaiveFwd, Source: source}, true
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none applicable"
	}
	return strings.Join(s, "; ")
}

// PlanWith makes and caches the plan for d with a given algorithm: a cuDNN
// cudnnConvolutionFwdAlgo_t or graph-API plan (a Plan's Algo), or a MIOpen
// solution id — a choice remembered from an earlier run or made by a Search
// in a child process.
func (h *Handle) PlanWith(d ConvDesc, id uint64) (Plan, error) {
	if h.closed {
		return Plan{}, errClosed
	}
	if err := d.Validate(); err != nil {
		return Plan{}, err
	}
	d = d.norm()
	e, err := h.make(d, func(e *entry) (Plan, error) {
		var skipped []string
		if h.lib.vendor == AMD {
			if p, ok := h.tryMIOpen(d, e, id, 0, "given", &skipped); ok {
				return p, nil
			}
		} else if id < cdAlgoCount {
			if p, ok := h.tryCUDNN(d, e, int(id), int(h.mathFor(d)), "given", &skipped); ok {
				return p, nil
			}
		} else if id >= graphAlgoBase && id < graphAlgoBase+searchEngines {
			p, err := h.chooseGraphAt(d, e, int(id-graphAlgoBase))
			if err == nil {
				p.Source = "given"
				return p, nil
			}
			skipped = append(skipped, err.Error())
		} else {
			skipped = append(skipped, fmt.Sprintf("cuDNN has no forward algorithm %d", id))
		}
		return Plan{}, fmt.Errorf("miopen: %v: algorithm %d unusable: %s", d, id, orNone(skipped))
	})
	if err != nil {
		return Plan{}, err
	}
	return e.plan, nil
}

// beta is cuDNN's β for d: 1 adds the convolution to y.
func beta(d ConvDesc) C.float {
	if d.Accumulate {
		return 1
	}
	return 0
}

// Conv3dForward queues y = conv3d(x, w) (y += conv3d(x, w) when
// d.Accumulate) for d on the handle's stream, with the plan for d (made now
// if this is the first call for d). workspace must hold the plan's
// WorkspaceBytes (it may be 0 when that is 0). A graph-API plan runs x, w
// and y at 16-byte aligned addresses; others run with a legacy algorithm
// that fits the same workspace. d.Bias needs Conv3dForwardBias.
func (h *Handle) Conv3dForward(d ConvDesc, x, w, y, workspace uintptr) error {
	if d.Bias {
		return fmt.Errorf("miopen: %v: a bias needs Conv3dForwardBias", d)
	}
	_, err := h.Conv3dForwardBias(d, x, w, 0, y, workspace)
	return err
}

// Conv3dForwardBias is Conv3dForward with the bias (K values, or 0 when
// d.Bias is not set) added as the plan's epilogue where it can; added says
// whether it was, else the caller adds it.
func (h *Handle) Conv3dForwardBias(d ConvDesc, x, w, bias, y, workspace uintptr) (added bool, err error) {
	e, err := h.lookup(d)
	if err != nil {
		return false, err
	}
	p := e.plan
	if x == 0 || w == 0 || y == 0 || (d.Bias && bias == 0) {
		return false, fmt.Errorf("miopen: %v: nil tensor", d)
	}
	if p.WorkspaceBytes > 0 && workspace == 0 {
		return false, fmt.Errorf("miopen: %v: %s needs a workspace of %d bytes", d, p.Name, p.WorkspaceBytes)
	}
	if e.exec != 0 {
		if graphAligned(x, w, y, bias) {
			return p.AddsBias, h.runGraph(d, e, x, w, bias, y, workspace)
		}
		// The graph promised cuDNN 16-byte aligned tensors: others run
		// the legacy API, which takes the pointers as they come.
		if p, err = h.legacyFor(d, e); err != nil {
			return false, err
		}
	}
	l := h.lib
	hh, xd, wd, cd, yd := C.uintptr_t(h.h), C.uintptr_t(e.xd), C.uintptr_t(e.wd), C.uintptr_t(e.cd), C.uintptr_t(e.yd)
	xp, wp, yp, ws := C.uintptr_t(x), C.uintptr_t(w), C.uintptr_t(y), C.uintptr_t(workspace)
	if l.vendor == AMD {
		err = l.check("miopenConvolutionForwardImmediate",
			C.mi_forward(hh, wd, wp, xd, xp, cd, yd, yp, ws, C.size_t(p.WorkspaceBytes), C.uint64_t(p.SolutionID)))
	} else {
		err = l.check("cudnnConvolutionForward",
			C.cd_forward(hh, xd, xp, wd, wp, cd, C.int(p.Algo), ws, C.size_t(p.WorkspaceBytes), yd, yp, beta(d)))
	}
	if err != nil {
		return false, fmt.Errorf("%v with %s: %w", d, p.Name, err)
	}
	return false, nil
}

// Search benchmarks the library's algorithms for d on real buffers (x and w
// are read, y is overwritten, workspace holds wsBytes) and returns the
// usable ones, fastest first; the fastest (not naive, where there is a
// choice) becomes d's cached plan. It can take long and, on AMD, has been
// seen to hang: run it in a child process under a deadline (see the
// package comment), never on the engine's own GPU thread.
func (h *Handle) Search(d ConvDesc, x, w, y, workspace uintptr, wsBytes int64) ([]Plan, error) {
	if h.closed {
		return nil, errClosed
	}
	if err := d.Validate(); err != nil {
		return nil, err
	}
	d = d.norm()
	var plans []Plan
	_, err := h.make(d, func(e *entry) (Plan, error) {
		var err error
		if h.lib.vendor == AMD {
			plans, err = h.searchMIOpen(d, e, x, w, y, workspace, wsBytes)
		} else {
			plans, err = h.searchCUDNN(d, e, x, w, y, workspace, wsBytes)
		}
		if err != nil {
			return Plan{}, err
		}
		if len(plans) == 0 {
			return Plan{}, fmt.Errorf("miopen: %v: search found no usable algorithm", d)
		}
		best := plans[0]
		if r := graphRank(best.Algo); h.lib.vendor == NVIDIA && r >= 0 {
			p, err := h.chooseGraphAt(d, e, r)
			if err != nil {
				return Plan{}, err
			}
			p.Source, p.TimeMs = best.Source, best.TimeMs
			return p, nil
		}
		if h.lib.vendor == NVIDIA {
			if err := h.lib.check("cudnnSetConvolutionMathType", C.cd_set_math(C.uintptr_t(e.cd), C.int(best.mathType))); err != nil {
				return Plan{}, err
			}
		}
		return best, nil
	})
	for i := range plans {
		plans[i].Desc = d
	}
	return plans, err
}

func (h *Handle) searchCUDNN(d ConvDesc, e *entry, x, w, y, workspace uintptr, wsBytes int64) ([]Plan, error) {
	l := h.lib
	var perf [cdAlgoCount]C.cd_perf
	var n C.int
	if err := l.check("cudnnFindConvolutionForwardAlgorithmEx", C.cd_find(C.uintptr_t(h.h),
		C.uintptr_t(e.xd), C.uintptr_t(x), C.uintptr_t(e.wd), C.uintptr_t(w), C.uintptr_t(e.cd),
		C.uintptr_t(e.yd), C.uintptr_t(y), cdAlgoCount, &n, &perf[0], C.uintptr_t(workspace), C.size_t(wsBytes))); err != nil {
		return nil, fmt.Errorf("%v: %w", d, err)
	}
	var plans []Plan
	var skipped []string
	for _, p := range perf[:n] {
		if p.status != 0 {
			continue
		}
		if pl, ok := h.tryCUDNN(d, e, int(p.algo), int(p.mathType), "search", &skipped); ok {
			pl.TimeMs = float32(p.time)
			plans = append(plans, pl)
		}
	}
	graph, err := h.searchGraph(d, x, w, y, workspace, wsBytes)
	if err != nil {
		return nil, err
	}
	plans = append(plans, graph...)
	slices.SortStableFunc(plans, func(a, b Plan) int { return cmp.Compare(a.TimeMs, b.TimeMs) })
	return plans, nil
}

func (h *Handle) searchMIOpen(d ConvDesc, e *entry, x, w, y, workspace uintptr, wsBytes int64) ([]Plan, error) {
	l := h.lib
	cd := C.uintptr_t(e.cd)
	if s := C.mi_set_find_mode(cd, miFindNormal); s > 0 {
		return nil, l.check("miopenSetConvolutionFindMode", s)
	}
	var perf [16]C.mi_perf
	var n C.int
	err := l.check("miopenFindConvolutionForwardAlgorithm", C.mi_find(C.uintptr_t(h.h),
		C.uintptr_t(e.xd), C.uintptr_t(x), C.uintptr_t(e.wd), C.uintptr_t(w), cd,
		C.uintptr_t(e.yd), C.uintptr_t(y), C.int(len(perf)), &n, &perf[0], C.uintptr_t(workspace), C.size_t(wsBytes)))
	C.mi_set_find_mode(cd, miFindFast)
	if err != nil {
		return nil, fmt.Errorf("%v: %w", d, err)
	}
	// Find recorded its measurements in the find-db; immediate mode now
	// lists the solutions with measured times.
	sols, err := h.solutions(d, e)
	if err != nil {
		return nil, err
	}
	var plans []Plan
	var skipped []string
	for _, s := range sols {
		if p, ok := h.tryMIOpen(d, e, uint64(s.solution_id), int(s.algorithm), "search", &skipped); ok {
			p.TimeMs = float32(s.time)
			plans = append(plans, p)
		}
	}
	return plans, nil
}
