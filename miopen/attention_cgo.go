//go:build cgo

package miopen

/*
#include <stdint.h>
#include <stddef.h>
#include <stdbool.h>

// cuDNN's graph (backend) API, loaded with the library (lib_cgo.go).
typedef int (*be_create_t)(int, void**);
typedef int (*be_destroy_t)(void*);
typedef int (*be_set_t)(void*, int, int, int64_t, const void*);
typedef int (*be_get_t)(void*, int, int, int64_t, int64_t*, void*);
typedef int (*be_finalize_t)(void*);
typedef int (*be_execute_t)(void*, void*, void*);
typedef void (*be_last_error_t)(char*, size_t);

static struct {
	be_create_t create;
	be_destroy_t destroy;
	be_set_t set;
	be_get_t get;
	be_finalize_t finalize;
	be_execute_t execute;
	be_last_error_t last_error;
} be;

static void be_init(uintptr_t c, uintptr_t d, uintptr_t s, uintptr_t g, uintptr_t f, uintptr_t e, uintptr_t l) {
	be.create = (be_create_t)c;
	be.destroy = (be_destroy_t)d;
	be.set = (be_set_t)s;
	be.get = (be_get_t)g;
	be.finalize = (be_finalize_t)f;
	be.execute = (be_execute_t)e;
	be.last_error = (be_last_error_t)l;
}

// Attribute types (cudnnBackendAttributeType_t).
enum { T_HANDLE = 0, T_DATA_TYPE = 1, T_BOOLEAN = 2, T_INT64 = 3, T_FLOAT = 4, T_VOID_PTR = 6, T_HEUR_MODE = 8,
       T_DESC = 15 };

static int be_create(int type, uintptr_t* out) {
	void* p = 0;
	int r = be.create(type, &p);
	*out = (uintptr_t)p;
	return r;
}
static int be_destroy(uintptr_t d) { return be.destroy((void*)d); }
static int be_finalize(uintptr_t d) { return be.finalize((void*)d); }
static int be_set_desc(uintptr_t d, int name, uintptr_t v) { void* p = (void*)v; return be.set((void*)d, name, T_DESC, 1, &p); }
static int be_set_handle(uintptr_t d, int name, uintptr_t h) { void* p = (void*)h; return be.set((void*)d, name, T_HANDLE, 1, &p); }
static int be_set_int(uintptr_t d, int name, int type, int v) { return be.set((void*)d, name, type, 1, &v); }
static int be_get_i64(uintptr_t d, int name, int64_t* v) { int64_t n = 0; return be.get((void*)d, name, T_INT64, 1, &n, v); }
static int be_set_descs(uintptr_t d, int name, int64_t n, uintptr_t* v) { return be.set((void*)d, name, T_DESC, n, (void*)v); }
static int be_get_descs(uintptr_t d, int name, int64_t want, int64_t* got, uintptr_t* out) {
	return be.get((void*)d, name, T_DESC, want, got, (void*)out);
}
static int be_set_i64s(uintptr_t d, int name, int64_t n, const int64_t* v) { return be.set((void*)d, name, T_INT64, n, v); }
static int be_set_f32(uintptr_t d, int name, float v) { return be.set((void*)d, name, T_FLOAT, 1, &v); }
// be_get_enums reads up to max values of an enum-array attribute of type
// type (an engine's numerical notes).
static int be_get_enums(uintptr_t d, int name, int type, int64_t max, int64_t* n, int* out) {
	return be.get((void*)d, name, type, max, n, out);
}
// be_run binds n device pointers to their uids and the workspace in a
// variant pack and executes plan on the handle's stream.
static int be_run(uintptr_t handle, uintptr_t plan, int64_t n, const int64_t* uids, const uintptr_t* ptrs, uintptr_t ws) {
	void* p[16];
	if (n > 16) return 2000; // CUDNN_STATUS_BAD_PARAM
	for (int64_t i = 0; i < n; i++) p[i] = (void*)ptrs[i];
	void* vp = 0;
	int r = be.create(16, &vp); // CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR
	if (r) return r;
	void* w = (void*)ws;
	r = be.set(vp, 1000, T_INT64, n, uids);           // UNIQUE_IDS
	if (!r) r = be.set(vp, 1001, T_VOID_PTR, n, p);    // DATA_POINTERS
	if (!r) r = be.set(vp, 1003, T_VOID_PTR, 1, &w);   // WORKSPACE
	if (!r) r = be.finalize(vp);
	if (!r) r = be.execute((void*)handle, (void*)plan, vp);
	be.destroy(vp);
	return r;
}
static void be_last_error(char* buf, size_t n) {
	buf[0] = 0;
	if (be.last_error) be.last_error(buf, n);
}

// be_tensor makes and finalizes a 4-d tensor descriptor.
static int be_tensor(uintptr_t* out, int64_t uid, int dtype, const int64_t* dims, const int64_t* strides, bool by_value) {
	void* t = 0;
	int r = be.create(17, &t); // CUDNN_BACKEND_TENSOR_DESCRIPTOR
	if (r) return r;
	int64_t align = 16;
	bool is_virtual = false;
	if (!r) r = be.set(t, 906, T_INT64, 1, &uid);      // UNIQUE_ID
	if (!r) r = be.set(t, 901, T_DATA_TYPE, 1, &dtype); // DATA_TYPE
	if (!r) r = be.set(t, 902, T_INT64, 4, dims);       // DIMENSIONS
	if (!r) r = be.set(t, 903, T_INT64, 4, strides);    // STRIDES
	if (!r) r = be.set(t, 900, T_INT64, 1, &align);     // BYTE_ALIGNMENT
	if (!r) r = be.set(t, 907, T_BOOLEAN, 1, &is_virtual);
	if (!r && by_value) r = be.set(t, 908, T_BOOLEAN, 1, &by_value);
	if (!r) r = be.finalize(t);
	if (r) { be.destroy(t); return r; }
	*out = (uintptr_t)t;
	return 0;
}

// be_sdpa_run binds q, k, v, o (uids 1-4), the scale by value (uid 5) and
// the workspace in a variant pack and executes the plan on the handle's
// stream.
static int be_sdpa_run(uintptr_t handle, uintptr_t plan, uintptr_t q, uintptr_t k, uintptr_t v, uintptr_t o,
	float scale, uintptr_t ws) {
	void* vp = 0;
	int r = be.create(16, &vp); // CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR
	if (r) return r;
	int64_t uids[5] = {1, 2, 3, 4, 5};
	void* ptrs[5] = {(void*)q, (void*)k, (void*)v, (void*)o, &scale};
	void* w = (void*)ws;
	r = be.set(vp, 1000, T_INT64, 5, uids);           // UNIQUE_IDS
	if (!r) r = be.set(vp, 1001, T_VOID_PTR, 5, ptrs); // DATA_POINTERS
	if (!r) r = be.set(vp, 1003, T_VOID_PTR, 1, &w);   // WORKSPACE
	if (!r) r = be.finalize(vp);
	if (!r) r = be.execute((void*)handle, (void*)plan, vp);
	be.destroy(vp);
	return r;
}

// be_tensor_nd makes and finalizes an n-d tensor descriptor, virtual (an
// intermediate of the graph, never in memory) or not.
static int be_tensor_nd(uintptr_t* out, int64_t uid, int dtype, int64_t n, const int64_t* dims, const int64_t* strides,
	bool is_virtual) {
	void* t = 0;
	int r = be.create(17, &t); // CUDNN_BACKEND_TENSOR_DESCRIPTOR
	if (r) return r;
	int64_t align = 16;
	if (!r) r = be.set(t, 906, T_INT64, 1, &uid);
	if (!r) r = be.set(t, 901, T_DATA_TYPE, 1, &dtype);
	if (!r) r = be.set(t, 902, T_INT64, n, dims);
	if (!r) r = be.set(t, 903, T_INT64, n, strides);
	if (!r) r = be.set(t, 900, T_INT64, 1, &align);
	if (!r) r = be.set(t, 907, T_BOOLEAN, 1, &is_virtual);
	if (!r) r = be.finalize(t);
	if (r) { be.destroy(t); return r; }
	*out = (uintptr_t)t;
	return 0;
}

// be_fp8_sdpa_run binds an FP8 attention's tensors (uids 1-4: q, k, v, o;
// 5: the scale, by value; 6-13: the FP8 scales and amaxes, on the device)
// and the workspace, and executes the plan on the handle's stream.
static int be_fp8_sdpa_run(uintptr_t handle, uintptr_t plan, uintptr_t q, uintptr_t k, uintptr_t v, uintptr_t o,
	float scale, uintptr_t dq, uintptr_t dk, uintptr_t dv, uintptr_t ds, uintptr_t ss, uintptr_t so,
	uintptr_t amax_s, uintptr_t amax_o, uintptr_t ws) {
	void* vp = 0;
	int r = be.create(16, &vp); // CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR
	if (r) return r;
	int64_t uids[13] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13};
	void* ptrs[13] = {(void*)q, (void*)k, (void*)v, (void*)o, &scale, (void*)dq, (void*)dk, (void*)dv,
		(void*)ds, (void*)ss, (void*)so, (void*)amax_s, (void*)amax_o};
	void* w = (void*)ws;
	r = be.set(vp, 1000, T_INT64, 13, uids);
	if (!r) r = be.set(vp, 1001, T_VOID_PTR, 13, ptrs);
	if (!r) r = be.set(vp, 1003, T_VOID_PTR, 1, &w);
	if (!r) r = be.finalize(vp);
	if (!r) r = be.execute((void*)handle, (void*)plan, vp);
	be.destroy(vp);
	return r;
}
*/
import "C"

import (
	"fmt"
	"slices"
	"strings"
	"unsafe"
)

// cuDNN graph API enums (cudnn_graph.h, cuDNN 9).
const (
	beEngine, beEngineCfg, beEngineHeur, beExecutionPlan = 2, 3, 4, 5
	beOperationGraph, beSDPAForward                      = 15, 41

	attrEngineHeurMode, attrEngineHeurGraph, attrEngineHeurResults = 200, 201, 202
	attrEngineCfgEngine                                            = 300
	attrPlanHandle, attrPlanEngineCfg, attrPlanWorkspace           = 400, 401, 402
	attrGraphHandle, attrGraphOps                                  = 800, 801
	attrEngineGlobalIndex, attrEngineNumericalNote                 = 1301, 1303
	attrSDPAQ, attrSDPAK, attrSDPAV, attrSDPAO, attrSDPAScale      = 2800, 2801, 2802, 2803, 2805

	typeHeurMode, typeNumericalNote = 8, 11 // cudnnBackendAttributeType_t

	heurModeInstant, heurModeFallback, heurModeA = 0, 2, 3
	// minGraphSDPA: cuDNN 9.13 added the SDPA forward operation.
	minGraphSDPA = 91300
)

// initGraph hands the graph API's addresses to the C side; false when any
// is missing.
func initGraph(create, destroy, set, get, finalize, execute, lastErr uintptr) bool {
	if create == 0 || destroy == 0 || set == 0 || get == 0 || finalize == 0 || execute == 0 {
		return false
	}
	C.be_init(C.uintptr_t(create), C.uintptr_t(destroy), C.uintptr_t(set), C.uintptr_t(get),
		C.uintptr_t(finalize), C.uintptr_t(execute), C.uintptr_t(lastErr))
	return true
}

// graphError is a failed graph-API call with cuDNN's last error message.
func (l *Lib) graphError(what string, s C.int) error {
	if s == 0 {
		return nil
	}
	var buf [512]C.char
	C.be_last_error(&buf[0], C.size_t(len(buf)))
	err := l.check(what, s).(*Error)
	if msg := strings.TrimSpace(C.GoString(&buf[0])); msg != "" {
		err.Name += ": " + msg
	}
	return err
}

// HasFusedAttention: the library has a fused attention operation (cuDNN
// ≥ 9.13 with its graph API).
func (l *Lib) HasFusedAttention() bool {
	return l.vendor == NVIDIA && l.graph && l.cudnnVersion >= minGraphSDPA
}

// PlanAttention chooses cuDNN's fused attention engine for d (the first
// that its heuristics rank and that accepts the graph) and caches the
// choice, or the failure, in the handle. The error wraps
// ErrNoFusedAttention when the library cannot take d.
func (h *Handle) PlanAttention(d AttnDesc) (AttnPlan, error) {
	if h.closed {
		return AttnPlan{}, errClosed
	}
	if err := d.Validate(); err != nil {
		return AttnPlan{}, err
	}
	l := h.lib
	if !l.HasFusedAttention() {
		return AttnPlan{}, fmt.Errorf("%v: %v (needs cuDNN ≥ 9.13): %w", l, d, ErrNoFusedAttention)
	}
	if p, ok := h.attn[d]; ok {
		return p.plan, p.err
	}
	build := h.buildAttention
	if d.FP8 {
		build = h.buildAttentionFP8
	}
	p := build(d)
	if h.attn == nil {
		h.attn = map[AttnDesc]*attnPlan{}
	}
	h.attn[d] = p
	return p.plan, p.err
}

// Attention queues o = softmax(scale·q·kᵀ)·v on the handle's stream.
// workspace holds the plan's WorkspaceBytes (0 when it needs none).
func (h *Handle) Attention(d AttnDesc, q, k, v, o uintptr, scale float32, workspace uintptr) error {
	plan, err := h.PlanAttention(d)
	if err != nil {
		return err
	}
	if plan.WorkspaceBytes > 0 && workspace == 0 {
		return fmt.Errorf("miopen: %v needs %d B of workspace", d, plan.WorkspaceBytes)
	}
	if d.FP8 {
		return fmt.Errorf("miopen: %v: an FP8 attention runs through AttentionFP8", d)
	}
	p := h.attn[d]
	s := C.be_sdpa_run(C.uintptr_t(h.h), C.uintptr_t(p.exec), C.uintptr_t(q), C.uintptr_t(k), C.uintptr_t(v),
		C.uintptr_t(o), C.float(scale), C.uintptr_t(workspace))
	return h.lib.graphError("cudnnBackendExecute("+d.String()+")", s)
}

// graphBuild makes descriptors, keeping the first error and every
// descriptor made.
type graphBuild struct {
	l     *Lib
	descs []uintptr
	err   error
}

// link is a tensor an operation takes or makes, by attribute.
type link struct {
	name   int
	tensor uintptr
}

// op makes an operation (descriptor type opType) configured by a descriptor
// of type cfgType with the enum attributes enums ({name, type, value}),
// which it takes as cfgAttr, and the tensors of links (0: none), and
// returns it.
func (b *graphBuild) op(what string, cfgType int, enums [][3]int, opType, cfgAttr int, links ...link) uintptr {
	cfg := b.create(cfgType)
	for _, e := range enums {
		b.setEnum(cfg, e[0], e[1], e[2])
	}
	b.finalize(cfg, what+" descriptor")
	op := b.create(opType)
	b.link(op, cfgAttr, cfg)
	for _, l := range links {
		if l.tensor != 0 {
			b.link(op, l.name, l.tensor)
		}
	}
	b.finalize(op, what)
	return op
}

// pointwise is the operation y = mode(x, x2) (x2 0 for a unary mode), in
// f32.
func (b *graphBuild) pointwise(mode int, x, x2, y uintptr) uintptr {
	return b.op(fmt.Sprintf("pointwise %d", mode), bePointwise,
		[][3]int{{attrPointwiseMode, typePointwiseMode, mode}, {attrPointwiseMathPrec, typeDataType, cdFloat}},
		beOpPointwise, attrOpPointwiseDesc, link{attrOpPointwiseX, x}, link{attrOpPointwiseB, x2}, link{attrOpPointwiseY, y})
}

func (b *graphBuild) check(what string, s C.int) {
	if b.err == nil && s != 0 {
		b.err = b.l.graphError(what, s)
	}
}

func (b *graphBuild) create(typ int) uintptr {
	if b.err != nil {
		return 0
	}
	var d C.uintptr_t
	b.check(fmt.Sprintf("cudnnBackendCreateDescriptor(%d)", typ), C.be_create(C.int(typ), &d))
	if d != 0 {
		b.descs = append(b.descs, uintptr(d))
	}
	return uintptr(d)
}

func (b *graphBuild) link(d uintptr, name int, v uintptr) {
	if b.err == nil {
		b.check(fmt.Sprintf("cudnnBackendSetAttribute(%d)", name), C.be_set_desc(C.uintptr_t(d), C.int(name), C.uintptr_t(v)))
	}
}

func (b *graphBuild) finalize(d uintptr, what string) {
	if b.err == nil {
		b.check("cudnnBackendFinalize("+what+")", C.be_finalize(C.uintptr_t(d)))
	}
}

func (b *graphBuild) tensor(uid int64, dtype C.int, dims, strides [4]int64, byValue bool) uintptr {
	if b.err != nil {
		return 0
	}
	var d C.uintptr_t
	b.check(fmt.Sprintf("tensor descriptor %d", uid), C.be_tensor(&d, C.int64_t(uid), dtype,
		(*C.int64_t)(unsafe.Pointer(&dims[0])), (*C.int64_t)(unsafe.Pointer(&strides[0])), C.bool(byValue)))
	if d != 0 {
		b.descs = append(b.descs, uintptr(d))
	}
	return uintptr(d)
}

// tensorND is an n-d tensor descriptor; a virtual one is an intermediate
// of the graph.
func (b *graphBuild) tensorND(uid int64, dtype int, dims, strides []int64, virtual bool) uintptr {
	if b.err != nil {
		return 0
	}
	var d C.uintptr_t
	b.check(fmt.Sprintf("tensor descriptor %d", uid), C.be_tensor_nd(&d, C.int64_t(uid), C.int(dtype), C.int64_t(len(dims)),
		(*C.int64_t)(unsafe.Pointer(&dims[0])), (*C.int64_t)(unsafe.Pointer(&strides[0])), C.bool(virtual)))
	if d != 0 {
		b.descs = append(b.descs, uintptr(d))
	}
	return uintptr(d)
}

// scalarByValue is a 1×1×1×1 f32 tensor passed by value.
func (b *graphBuild) scalarByValue(uid int64) uintptr {
	one := [4]int64{1, 1, 1, 1}
	return b.tensor(uid, cdFloat, one, one, true)
}

// setEnum sets an enum-valued attribute (a data type, a pointwise mode, a
// reduction operator: attribute type typ).
func (b *graphBuild) setEnum(d uintptr, name, typ, v int) {
	if b.err == nil {
		b.check(fmt.Sprintf("cudnnBackendSetAttribute(%d)", name), C.be_set_int(C.uintptr_t(d), C.int(name), C.int(typ), C.int(v)))
	}
}

// linkAll sets a list of descriptors (a graph's operations).
func (b *graphBuild) linkAll(d uintptr, name int, vs []uintptr) {
	if b.err == nil && len(vs) > 0 {
		b.check(fmt.Sprintf("cudnnBackendSetAttribute(%d)", name), C.be_set_descs(C.uintptr_t(d), C.int(name),
			C.int64_t(len(vs)), (*C.uintptr_t)(unsafe.Pointer(&vs[0]))))
	}
}

// setInt64s sets an INT64 attribute of one or more values (a tensor's
// dimensions, a convolution's paddings).
func (b *graphBuild) setInt64s(d uintptr, name int, vs ...int64) {
	if b.err == nil && len(vs) > 0 {
		b.check(fmt.Sprintf("cudnnBackendSetAttribute(%d)", name), C.be_set_i64s(C.uintptr_t(d), C.int(name),
			C.int64_t(len(vs)), (*C.int64_t)(unsafe.Pointer(&vs[0]))))
	}
}

// setFloat sets a FLOAT attribute (an operation's alpha or beta).
func (b *graphBuild) setFloat(d uintptr, name int, v float32) {
	if b.err == nil {
		b.check(fmt.Sprintf("cudnnBackendSetAttribute(%d)", name), C.be_set_f32(C.uintptr_t(d), C.int(name), C.float(v)))
	}
}

// setHandle binds d (an operation graph, an execution plan) to the cuDNN
// handle h.
func (b *graphBuild) setHandle(d uintptr, name int, h uintptr) {
	if b.err == nil {
		b.check(fmt.Sprintf("cudnnBackendSetAttribute(%d)", name), C.be_set_handle(C.uintptr_t(d), C.int(name), C.uintptr_t(h)))
	}
}

// destroy frees d, one of b's descriptors, ahead of the rest.
func (b *graphBuild) destroy(d uintptr) {
	if i := slices.Index(b.descs, d); i >= 0 {
		b.descs = slices.Delete(b.descs, i, i+1)
		C.be_destroy(C.uintptr_t(d))
	}
}

// execute runs plan on the cuDNN handle h (on its stream) with the device
// pointers ptrs bound to the tensor uids and the workspace.
func (l *Lib) execute(h, plan uintptr, uids []int64, ptrs []uintptr, workspace uintptr) error {
	if len(uids) != len(ptrs) || len(uids) == 0 {
		return fmt.Errorf("miopen: %d uids for %d pointers", len(uids), len(ptrs))
	}
	p := make([]C.uintptr_t, len(ptrs))
	for i, v := range ptrs {
		p[i] = C.uintptr_t(v)
	}
	return l.graphError("cudnnBackendExecute", C.be_run(C.uintptr_t(h), C.uintptr_t(plan), C.int64_t(len(uids)),
		(*C.int64_t)(unsafe.Pointer(&uids[0])), &p[0], C.uintptr_t(workspace)))
}

func (b *graphBuild) release() {
	for i := len(b.descs) - 1; i >= 0; i-- {
		C.be_destroy(C.uintptr_t(b.descs[i]))
	}
	b.descs = nil
}

// buildAttention describes d as one SDPA forward operation (no stats
// output: inference), asks the heuristics for engine configurations and
// keeps the first execution plan that finalizes.
func (h *Handle) buildAttention(d AttnDesc) *attnPlan {
	b := &graphBuild{l: h.lib}
	dt := vendorType(d.DType, NVIDIA)
	rows := func(uid int64, heads, n int) uintptr {
		B, H, L, D := int64(d.B), int64(heads), int64(n), int64(d.D)
		return b.tensor(uid, dt, [4]int64{B, H, L, D}, [4]int64{L * H * D, D, H * D, 1}, false)
	}
	one := [4]int64{1, 1, 1, 1}
	op := b.create(beSDPAForward)
	b.link(op, attrSDPAQ, rows(1, d.Hq, d.Lq))
	b.link(op, attrSDPAK, rows(2, d.Hkv, d.Lk))
	b.link(op, attrSDPAV, rows(3, d.Hkv, d.Lk))
	b.link(op, attrSDPAO, rows(4, d.Hq, d.Lq))
	b.link(op, attrSDPAScale, b.tensor(5, cdFloat, one, one, true))
	b.finalize(op, "SDPA forward")

	graph := b.create(beOperationGraph)
	b.link(graph, attrGraphOps, op)
	return h.planGraph(d, b, graph)
}

// planGraph finalizes graph (its ops set) on the handle, asks the
// heuristics for engine configurations and keeps the first execution plan
// that finalizes.
func (h *Handle) planGraph(d AttnDesc, b *graphBuild, graph uintptr) *attnPlan {
	b.setHandle(graph, attrGraphHandle, h.h)
	b.finalize(graph, "operation graph")
	p := &attnPlan{plan: AttnPlan{Desc: d}}
	var refused []string
	total := 0
	// The instant heuristics know the fused SDPA operation; a composite
	// graph (FP8) may need mode A's or the fallback's engines.
	for _, mode := range []int{heurModeInstant, heurModeA, heurModeFallback} {
		if b.err != nil || p.exec != 0 {
			break
		}
		cfgs, err := b.heuristicConfigs(graph, mode)
		if err != nil {
			refused = append(refused, err.Error())
			continue
		}
		total += len(cfgs)
		for _, cfg := range cfgs {
			plan, ws, err := b.executionPlan(h.h, cfg)
			if b.err != nil {
				break
			}
			if err != nil {
				refused = append(refused, err.Error())
				continue
			}
			p.exec = plan
			p.plan.Engine = h.engineName(b, cfg)
			p.plan.WorkspaceBytes = ws
			break
		}
	}
	switch {
	case b.err != nil:
		p.err = fmt.Errorf("%v: %w: %w", d, b.err, ErrNoFusedAttention)
	case p.exec == 0:
		p.err = fmt.Errorf("%v: %d engine configurations, none took the graph (%s): %w", d, total,
			strings.Join(refused, "; "), ErrNoFusedAttention)
	}
	if p.err != nil {
		b.release()
		p.exec = 0
		return p
	}
	p.descs = b.descs
	return p
}

// heuristicConfigs asks cuDNN's heuristics in mode for engine
// configurations of graph (finalized), best first, made in b. A mode that
// cannot serve the graph returns its error and leaves b usable; a failure
// of the API itself is b.err.
func (b *graphBuild) heuristicConfigs(graph uintptr, mode int) ([]uintptr, error) {
	heur := b.create(beEngineHeur)
	b.link(heur, attrEngineHeurGraph, graph)
	b.setEnum(heur, attrEngineHeurMode, typeHeurMode, mode)
	if b.err != nil {
		return nil, b.err
	}
	if s := C.be_finalize(C.uintptr_t(heur)); s != 0 {
		err := fmt.Errorf("heuristics mode %d: %w", mode, b.l.graphError("finalize", s))
		b.destroy(heur)
		return nil, err
	}
	var n C.int64_t
	b.check("heuristic results", C.be_get_descs(C.uintptr_t(heur), attrEngineHeurResults, 0, &n, nil))
	cfgs := make([]uintptr, int(n))
	for i := range cfgs {
		cfgs[i] = b.create(beEngineCfg)
	}
	if b.err == nil && n > 0 {
		b.check("heuristic results", C.be_get_descs(C.uintptr_t(heur), attrEngineHeurResults, n, &n,
			(*C.uintptr_t)(unsafe.Pointer(&cfgs[0]))))
	}
	if b.err != nil {
		return nil, b.err
	}
	return cfgs[:n], nil
}

// executionPlan finalizes an execution plan of cfg on the cuDNN handle h
// and returns it with its workspace size. A configuration that refuses
// the graph returns cuDNN's error and leaves nothing in b; a failure of the
// API itself is b.err.
func (b *graphBuild) executionPlan(h, cfg uintptr) (uintptr, int64, error) {
	plan := b.create(beExecutionPlan)
	b.setHandle(plan, attrPlanHandle, h)
	b.link(plan, attrPlanEngineCfg, cfg)
	if b.err != nil {
		return 0, 0, b.err
	}
	if s := C.be_finalize(C.uintptr_t(plan)); s != 0 {
		err := b.l.graphError("plan", s)
		b.destroy(plan)
		return 0, 0, err
	}
	var ws C.int64_t
	b.check("plan workspace", C.be_get_i64(C.uintptr_t(plan), attrPlanWorkspace, &ws))
	return plan, int64(ws), b.err
}

// engineInfo is the global index and the numerical notes
// (cudnnBackendNumericalNote_t) of cfg's engine.
func (b *graphBuild) engineInfo(cfg uintptr) (index int64, notes []int, err error) {
	var eng C.uintptr_t
	if s := C.be_create(beEngine, &eng); s != 0 {
		return -1, nil, b.l.graphError("cudnnBackendCreateDescriptor(engine)", s)
	}
	defer C.be_destroy(eng)
	var got, idx C.int64_t
	if s := C.be_get_descs(C.uintptr_t(cfg), attrEngineCfgEngine, 1, &got, &eng); s != 0 {
		return -1, nil, b.l.graphError("engine of a configuration", s)
	}
	if s := C.be_get_i64(eng, attrEngineGlobalIndex, &idx); s != 0 {
		return -1, nil, b.l.graphError("engine global index", s)
	}
	var buf [32]C.int
	var n C.int64_t
	if s := C.be_get_enums(eng, attrEngineNumericalNote, typeNumericalNote, C.int64_t(len(buf)), &n, &buf[0]); s != 0 {
		return int64(idx), nil, b.l.graphError("engine numerical notes", s)
	}
	for _, v := range buf[:min(int(n), len(buf))] {
		notes = append(notes, int(v))
	}
	return int64(idx), notes, nil
}

// engineName is "cuDNN engine <global index>" of an engine configuration,
// or "" when cuDNN does not say.
func (h *Handle) engineName(b *graphBuild, cfg uintptr) string {
	idx, _, _ := b.engineInfo(cfg)
	if idx < 0 {
		return ""
	}
	return fmt.Sprintf("cuDNN engine %d", idx)
}

// forgetAttention destroys the cached attention plans.
func (h *Handle) forgetAttention() {
	for k, p := range h.attn {
		for i := len(p.descs) - 1; i >= 0; i-- {
			C.be_destroy(C.uintptr_t(p.descs[i]))
		}
		delete(h.attn, k)
	}
}

// AttentionFP8 queues the FP8 attention d (d.FP8) on the handle's stream:
// q, k, v and o E4M3 codes (B, L, H, D) with the scale factors in sc.
// workspace holds the plan's WorkspaceBytes.
func (h *Handle) AttentionFP8(d AttnDesc, q, k, v, o uintptr, scale float32, sc FP8Scales, workspace uintptr) error {
	if !d.FP8 {
		return fmt.Errorf("miopen: %v is not an FP8 attention", d)
	}
	plan, err := h.PlanAttention(d)
	if err != nil {
		return err
	}
	if plan.WorkspaceBytes > 0 && workspace == 0 {
		return fmt.Errorf("miopen: %v needs %d B of workspace", d, plan.WorkspaceBytes)
	}
	p := h.attn[d]
	s := C.be_fp8_sdpa_run(C.uintptr_t(h.h), C.uintptr_t(p.exec), C.uintptr_t(q), C.uintptr_t(k), C.uintptr_t(v),
		C.uintptr_t(o), C.float(scale), C.uintptr_t(sc.DescaleQ), C.uintptr_t(sc.DescaleK), C.uintptr_t(sc.DescaleV),
		C.uintptr_t(sc.DescaleS), C.uintptr_t(sc.ScaleS), C.uintptr_t(sc.ScaleO), C.uintptr_t(sc.AmaxS),
		C.uintptr_t(sc.AmaxO), C.uintptr_t(workspace))
	return h.lib.graphError("cudnnBackendExecute("+d.String()+")", s)
}
