//go:build cgo

package rocblas

/*
#include <stdint.h>
#include <stddef.h>

// One table per vendor (0 hipBLASLt, 1 cuBLASLt): the two libraries have
// the same functions and signatures under their own prefixes; only the
// enum values differ, and those come from Go (ltEnums).
enum { LT_CREATE, LT_DESTROY, LT_DESC_CREATE, LT_DESC_DESTROY, LT_DESC_SET,
       LT_LAYOUT_CREATE, LT_LAYOUT_DESTROY, LT_PREF_CREATE, LT_PREF_DESTROY,
       LT_PREF_SET, LT_HEURISTIC, LT_MATMUL, LT_VERSION, LT_N };

static void* lt_fp[2][LT_N];
static void lt_set(int v, int i, uintptr_t p) { lt_fp[v][i] = (void*)p; }

typedef int (*lt_create_t)(void**);
typedef int (*lt_destroy_t)(void*);
typedef int (*lt_desc_create_t)(void**, int, int);
typedef int (*lt_set_t)(void*, int, const void*, size_t);
typedef int (*lt_layout_create_t)(void**, int, uint64_t, uint64_t, int64_t);
typedef int (*lt_heuristic_t)(void*, void*, void*, void*, void*, void*, void*, int, void*, int*);
typedef int (*lt_matmul_t)(void*, void*, const void*, const void*, void*, const void*, void*,
	const void*, const void*, void*, void*, void*, const void*, void*, size_t, void*);
typedef size_t (*lt_version_t)(void);

static int lt_create(int v, uintptr_t* h) {
	void* p = 0;
	int s = ((lt_create_t)lt_fp[v][LT_CREATE])(&p);
	*h = (uintptr_t)p;
	return s;
}
static int lt_destroy(int v, uintptr_t h) { return ((lt_destroy_t)lt_fp[v][LT_DESTROY])((void*)h); }
static long long lt_version(int v) {
	return lt_fp[v][LT_VERSION] ? (long long)((lt_version_t)lt_fp[v][LT_VERSION])() : -1;
}

typedef struct {
	int compute, scale_type, x_type, w_type, d_type;
	int attr_transa, attr_transb, attr_epilogue, attr_bias, attr_ascale, attr_bscale;
	int attr_ascale_mode, attr_bscale_mode, scale_outer_vec;
	int pref_ws, op_t, op_n;
	uint32_t epilogue;
} lt_enums;

// lt_linear runs D (N×M, column-major) = op(W)ᵀ... the row-major Linear
// described in Go: A = W (K×N, ld K) transposed, B = X (K×M, ld K), C = D
// (N×M, ld N), beta 0. *stage says which call failed.
static int lt_linear(int v, uintptr_t h, const lt_enums* e, int m, int n, int k,
	uintptr_t x, uintptr_t w, uintptr_t d, uintptr_t bias, uintptr_t xs, uintptr_t ws, int row_scales,
	uintptr_t work, size_t work_bytes, uintptr_t stream, int* stage) {
	void** f = lt_fp[v];
	void *desc = 0, *la = 0, *lb = 0, *ld = 0, *pref = 0;
	uint64_t heur[64]; // one heuristic result (96 bytes on CUDA 12); the algorithm is its first member
	int found = 0, s;
	float alpha = 1.0f, beta = 0.0f;
	int opT = e->op_t, opN = e->op_n;
	void* p;
#define LT_TRY(st, call) do { *stage = st; if ((s = (call)) != 0) goto out; } while (0)
	LT_TRY(1, ((lt_desc_create_t)f[LT_DESC_CREATE])(&desc, e->compute, e->scale_type));
	LT_TRY(2, ((lt_set_t)f[LT_DESC_SET])(desc, e->attr_transa, &opT, sizeof opT));
	LT_TRY(2, ((lt_set_t)f[LT_DESC_SET])(desc, e->attr_transb, &opN, sizeof opN));
	LT_TRY(3, ((lt_set_t)f[LT_DESC_SET])(desc, e->attr_epilogue, &e->epilogue, sizeof e->epilogue));
	if (bias) {
		p = (void*)bias;
		LT_TRY(3, ((lt_set_t)f[LT_DESC_SET])(desc, e->attr_bias, &p, sizeof p));
	}
	if (ws) {
		p = (void*)ws; // A is the weight
		LT_TRY(4, ((lt_set_t)f[LT_DESC_SET])(desc, e->attr_ascale, &p, sizeof p));
	}
	if (xs) {
		p = (void*)xs;
		LT_TRY(4, ((lt_set_t)f[LT_DESC_SET])(desc, e->attr_bscale, &p, sizeof p));
	}
	if (row_scales) {
		// A's vector has op(A)'s rows (W's N), B's has op(B)'s columns (X's M).
		int32_t mode = e->scale_outer_vec;
		LT_TRY(10, ((lt_set_t)f[LT_DESC_SET])(desc, e->attr_ascale_mode, &mode, sizeof mode));
		LT_TRY(10, ((lt_set_t)f[LT_DESC_SET])(desc, e->attr_bscale_mode, &mode, sizeof mode));
	}
	LT_TRY(5, ((lt_layout_create_t)f[LT_LAYOUT_CREATE])(&la, e->w_type, k, n, k));
	LT_TRY(5, ((lt_layout_create_t)f[LT_LAYOUT_CREATE])(&lb, e->x_type, k, m, k));
	LT_TRY(5, ((lt_layout_create_t)f[LT_LAYOUT_CREATE])(&ld, e->d_type, n, m, n));
	LT_TRY(6, ((lt_create_t)f[LT_PREF_CREATE])(&pref));
	uint64_t wb = work_bytes;
	LT_TRY(6, ((lt_set_t)f[LT_PREF_SET])(pref, e->pref_ws, &wb, sizeof wb));
	LT_TRY(7, ((lt_heuristic_t)f[LT_HEURISTIC])((void*)h, desc, la, lb, ld, ld, pref, 1, heur, &found));
	if (found < 1) { *stage = 8; s = -1; goto out; }
	LT_TRY(9, ((lt_matmul_t)f[LT_MATMUL])((void*)h, desc, &alpha, (const void*)w, la, (const void*)x, lb,
		&beta, (const void*)d, ld, (void*)d, ld, heur, (void*)work, work_bytes, (void*)stream));
	*stage = 0;
out:
	if (pref) ((lt_destroy_t)f[LT_PREF_DESTROY])(pref);
	if (ld) ((lt_destroy_t)f[LT_LAYOUT_DESTROY])(ld);
	if (lb) ((lt_destroy_t)f[LT_LAYOUT_DESTROY])(lb);
	if (la) ((lt_destroy_t)f[LT_LAYOUT_DESTROY])(la);
	if (desc) ((lt_destroy_t)f[LT_DESC_DESTROY])(desc);
	return s;
#undef LT_TRY
}
*/
import "C"

import (
	"fmt"

	"github.com/framepack-go/framepack/internal/dynlib"
)

// ltFuncs names the functions by the C enum, less the vendor's prefix
// (ltPrefixes): hipBLASLt and cuBLASLt export the same functions.
var ltFuncs = [C.LT_N]string{
	C.LT_CREATE:         "Create",
	C.LT_DESTROY:        "Destroy",
	C.LT_DESC_CREATE:    "MatmulDescCreate",
	C.LT_DESC_DESTROY:   "MatmulDescDestroy",
	C.LT_DESC_SET:       "MatmulDescSetAttribute",
	C.LT_LAYOUT_CREATE:  "MatrixLayoutCreate",
	C.LT_LAYOUT_DESTROY: "MatrixLayoutDestroy",
	C.LT_PREF_CREATE:    "MatmulPreferenceCreate",
	C.LT_PREF_DESTROY:   "MatmulPreferenceDestroy",
	C.LT_PREF_SET:       "MatmulPreferenceSetAttribute",
	C.LT_HEURISTIC:      "MatmulAlgoGetHeuristic",
	C.LT_MATMUL:         "Matmul",
	// Optional in both. hipblasLtGetVersion takes a handle and an int*:
	// never called (lt_version is NVIDIA's); listed so the table is complete.
	C.LT_VERSION: "GetVersion",
}

var ltPrefixes = [2]string{"hipblasLt", "cublasLt"}

func init() { ltLibs.Symbols, ltLibs.Init = ltSymbols, initLt }

// ltSymbols is v's function table: ltFuncs under v's prefix.
func ltSymbols(v Vendor) []dynlib.Symbol {
	syms := make([]dynlib.Symbol, len(ltFuncs))
	for i, f := range ltFuncs {
		syms[i] = dynlib.Symbol{Name: ltPrefixes[v-1] + f, Optional: i == C.LT_VERSION}
	}
	return syms
}

func initLt(v Vendor, t *dynlib.Table) (*LtLib, error) {
	for i, p := range t.Addrs {
		C.lt_set(C.int(v-1), C.int(i), C.uintptr_t(p))
	}
	l := &LtLib{vendor: v, path: t.Path, version: "(version unknown)"}
	if v == NVIDIA {
		if ver := int64(C.lt_version(1)); ver > 0 {
			l.version = fmt.Sprintf("cuBLASLt %d.%d.%d", ver/10000, ver/100%100, ver%100)
		}
	}
	return l, nil
}

// ltEnum is one vendor's values of the enums lt_linear uses.
type ltEnum struct {
	compute, scaleType                                 int
	types                                              [4]int // by LtType
	transA, transB, epilogue, bias, aScale, bScale, ws int
	aScaleMode, bScaleMode, outerVec                   int
	opT, opN                                           int
	epilogues                                          [4]uint32 // by Epilogue
}

var ltEnums = [2]ltEnum{
	{ // hipBLASLt (hipblas-common, hipblaslt.h of ROCm 6.1+)
		compute: 2, scaleType: 0, types: [4]int{0, 2, 14, 28},
		transA: 0, transB: 1, epilogue: 2, bias: 3, aScale: 5, bScale: 6, ws: 1,
		aScaleMode: 31, bScaleMode: 32, outerVec: 3, // ROCm 7
		opT: 112, opN: 111, epilogues: [4]uint32{1, 4, 32, 36},
	},
	{ // cuBLASLt (cublasLt.h, CUDA 12)
		compute: 68, scaleType: 0, types: [4]int{0, 2, 14, 28},
		transA: 3, transB: 4, epilogue: 7, bias: 8, aScale: 17, bScale: 18, ws: 1,
		aScaleMode: 31, bScaleMode: 32, outerVec: 3, // CUDA 12.9+
		opT: 1, opN: 0, epilogues: [4]uint32{1, 4, 32, 36},
	},
}

var ltStages = [...]string{"", "MatmulDescCreate", "MatmulDescSetAttribute (transpose)", "MatmulDescSetAttribute (epilogue)",
	"MatmulDescSetAttribute (scale pointers)", "MatrixLayoutCreate", "MatmulPreference", "MatmulAlgoGetHeuristic",
	"MatmulAlgoGetHeuristic (no algorithm for this problem)", "Matmul", "MatmulDescSetAttribute (row scale modes)"}

// NewHandle creates a handle whose calls queue on stream and use the
// device workspace of wsBytes bytes (LtWorkspace; the caller owns it).
func (l *LtLib) NewHandle(stream, workspace uintptr, wsBytes int64) (*LtHandle, error) {
	var h C.uintptr_t
	if s := C.lt_create(C.int(l.vendor-1), &h); s != 0 {
		return nil, &Error{Lib: "rocblas", Func: l.prefix() + "Create", Status: int(s), Name: "status " + fmt.Sprint(int(s))}
	}
	return &LtHandle{lib: l, h: uintptr(h), stream: stream, workspace: workspace, wsBytes: wsBytes}, nil
}

func (l *LtLib) prefix() string { return ltPrefixes[l.vendor-1] }

// Close destroys the handle.
func (h *LtHandle) Close() error {
	if h.closed {
		return nil
	}
	h.closed = true
	if s := C.lt_destroy(C.int(h.lib.vendor-1), C.uintptr_t(h.h)); s != 0 {
		return &Error{Lib: "rocblas", Func: h.lib.prefix() + "Destroy", Status: int(s), Name: "status " + fmt.Sprint(int(s))}
	}
	return nil
}

// Linear queues g on the handle's stream.
func (h *LtHandle) Linear(g LtLinear) error {
	if h.closed {
		return errClosed
	}
	if err := g.Validate(); err != nil {
		return err
	}
	if g.M == 0 || g.N == 0 {
		return nil
	}
	e := ltEnums[h.lib.vendor-1]
	ce := C.lt_enums{
		compute: C.int(e.compute), scale_type: C.int(e.scaleType),
		x_type: C.int(e.types[g.XType]), w_type: C.int(e.types[g.WType]), d_type: C.int(e.types[g.DType]),
		attr_transa: C.int(e.transA), attr_transb: C.int(e.transB), attr_epilogue: C.int(e.epilogue),
		attr_bias: C.int(e.bias), attr_ascale: C.int(e.aScale), attr_bscale: C.int(e.bScale),
		attr_ascale_mode: C.int(e.aScaleMode), attr_bscale_mode: C.int(e.bScaleMode), scale_outer_vec: C.int(e.outerVec),
		pref_ws: C.int(e.ws), op_t: C.int(e.opT), op_n: C.int(e.opN), epilogue: C.uint32_t(e.epilogues[g.Epilogue]),
	}
	var stage C.int
	s := C.lt_linear(C.int(h.lib.vendor-1), C.uintptr_t(h.h), &ce, C.int(g.M), C.int(g.N), C.int(g.K),
		C.uintptr_t(g.X), C.uintptr_t(g.W), C.uintptr_t(g.D), C.uintptr_t(g.Bias), C.uintptr_t(g.XScale), C.uintptr_t(g.WScale),
		C.int(b2i(g.RowScales)), C.uintptr_t(h.workspace), C.size_t(h.wsBytes), C.uintptr_t(h.stream), &stage)
	if s != 0 {
		return &Error{Lib: "rocblas", Func: h.lib.prefix() + ltStages[stage], Status: int(s),
			Name: fmt.Sprintf("%dx%dx%d %s·%s→%s epilogue %d row scales %v", g.M, g.N, g.K, g.XType, g.WType, g.DType, g.Epilogue, g.RowScales)}
	}
	return nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
