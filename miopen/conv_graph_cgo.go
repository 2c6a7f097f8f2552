//go:build cgo

package miopen

import (
	"fmt"
	"strings"
)

// cuDNN's graph API for convolution forward: one operation, y = conv(x, w),
// on the graph machinery of attention_cgo.go. It reaches the engines
// PyTorch runs (the legacy API's algorithms are a subset, and for NDHWC
// half-precision 3-D convolutions slower ones).

// cuDNN graph-API enums for the convolution graph (cudnn_graph.h, cuDNN 9).
const (
	beConvolution, beOpConvForward = 1, 10

	attrConvCompType, attrConvMode, attrConvDilations, attrConvFilterStrides = 100, 101, 102, 103
	attrConvPostPaddings, attrConvPrePaddings, attrConvSpatialDims           = 104, 105, 106
	attrConvFwdAlpha, attrConvFwdBeta, attrConvFwdConvDesc                   = 700, 701, 702
	attrConvFwdW, attrConvFwdX, attrConvFwdY                                 = 703, 704, 705

	typeConvMode       = 7 // CUDNN_TYPE_CONVOLUTION_MODE
	cdCrossCorrelation = 1 // CUDNN_CROSS_CORRELATION

	// cudnnBackendNumericalNote_t
	noteTensorCore, noteDownConvertInputs, noteReducedPrecisionReduction = 0, 1, 2

	// The graph's tensor uids (uidConvOut: the convolution before its bias
	// epilogue, never in memory).
	uidX, uidW, uidY, uidBias, uidConvOut = 1, 2, 3, 4, 100

	// graphAlign is the byte alignment the graph's tensors promise
	// (CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, as be_tensor_nd sets it).
	graphAlign = 16
)

// chooseConv plans d on NVIDIA: with the graph API unless the handle says
// legacy, falling back on the legacy API (ConvAPIAuto) when the graph API
// has no engine for d.
func (h *Handle) chooseConv(d ConvDesc, e *entry) (Plan, error) {
	if h.convAPI == ConvAPILegacy {
		return h.chooseCUDNN(d, e)
	}
	p, gerr := h.chooseGraph(d, e)
	if gerr != nil && d.Bias {
		// No engine takes the bias: the convolution alone, the caller adds it.
		nb := d
		nb.Bias = false
		if q, err := h.chooseGraph(nb, e); err == nil {
			q.Fallback = "bias not fused: " + gerr.Error()
			return q, nil
		}
	}
	if gerr == nil || h.convAPI == ConvAPIGraph {
		return p, gerr
	}
	p, err := h.chooseCUDNN(d, e)
	if err != nil {
		return Plan{}, fmt.Errorf("%w (and the graph API: %v)", err, gerr)
	}
	p.Fallback = gerr.Error()
	return p, nil
}

// graphAlgoBase + i is the Algo (and the PlanWith id) of a graph-API plan
// with the i-th engine configuration walkEngines offers: the heuristics'
// order, mode A's list then the fallback list, among those the handle's
// rules allow. 0 is the heuristics' choice; a search may choose another.
const graphAlgoBase = 1 << 20

// graphRank is the place in walkEngines' order of a graph-API plan's
// Algo, or -1 for a legacy algorithm.
func graphRank(algo int) int {
	if algo < graphAlgoBase {
		return -1
	}
	return algo - graphAlgoBase
}

// chooseGraph plans d with the first engine configuration that the graph
// API's heuristics rank and the handle's rules allow, and keeps its
// execution plan in e.
func (h *Handle) chooseGraph(d ConvDesc, e *entry) (Plan, error) {
	return h.chooseGraphAt(d, e, 0)
}

// chooseGraphAt is chooseGraph with the rank-th configuration offered.
func (h *Handle) chooseGraphAt(d ConvDesc, e *entry, rank int) (Plan, error) {
	if !h.lib.graph {
		return Plan{}, fmt.Errorf("miopen: %v: %v lacks the graph API", d, h.lib)
	}
	b, graph, err := h.convGraph(d)
	if err != nil {
		return Plan{}, fmt.Errorf("miopen: %v: graph API: %w", d, err)
	}
	var skipped []string
	var got *convCandidate
	offered := 0
	h.walkEngines(d, b, graph, &skipped, func(c convCandidate) bool {
		if offered == rank {
			got = &c
			return false
		}
		offered++
		b.destroy(c.exec)
		return true
	})
	switch {
	case b.err != nil:
		err = fmt.Errorf("miopen: %v: graph API: %w", d, b.err)
	case got == nil && rank > 0:
		err = fmt.Errorf("miopen: %v: the graph API offers %d engine configurations, not %d (%s)", d, offered, rank+1, summary(skipped, 8))
	case got == nil:
		err = fmt.Errorf("miopen: %v: no engine of the graph API usable (%s)", d, summary(skipped, 8))
	}
	if err != nil {
		b.release()
		return Plan{}, err
	}
	got.plan.Algo = graphAlgoBase + rank
	e.exec, e.graph = got.exec, b.descs
	// Tensors off the graph's alignment run the legacy API's choice: the
	// plan's workspace covers both.
	if lp, err := h.chooseCUDNN(d, e); err == nil {
		e.legacy = &lp
		got.plan.WorkspaceBytes = max(got.plan.WorkspaceBytes, lp.WorkspaceBytes)
	}
	return got.plan, nil
}

// convGraph is d's operation graph, finalized on the handle: y = conv(x,
// w) with x, w and y of uids 1, 2 and 3, 5-d in (N, C, D, H, W) order with
// the layout's strides. Its descriptors are in b.
func (h *Handle) convGraph(d ConvDesc) (*graphBuild, uintptr, error) {
	b := &graphBuild{l: h.lib}
	dt := int(vendorType(d.DType, NVIDIA))
	tensor := func(uid int64, n, c, dd, hh, ww int) uintptr {
		dims, strides := d.tensorDims(n, c, dd, hh, ww)
		return b.tensorND(uid, dt, int64s(dims...), int64s(strides...), false)
	}
	do, ho, wo := d.OutDims()
	x := tensor(uidX, d.N, d.C, d.D, d.H, d.W)
	w := tensor(uidW, d.K, d.C, d.KD, d.KH, d.KW)
	y := tensor(uidY, d.N, d.K, do, ho, wo)
	ops := []uintptr{}
	out := y
	if fusesBias(d) {
		// conv → f32 intermediate → + bias (1, K, 1, 1, 1) → y.
		dims, strides := d.tensorDims(d.N, d.K, do, ho, wo)
		out = b.tensorND(uidConvOut, cdFloat, int64s(dims...), int64s(strides...), true)
		bd, bs := d.tensorDims(1, d.K, 1, 1, 1)
		bias := b.tensorND(uidBias, dt, int64s(bd...), int64s(bs...), false)
		ops = append(ops, b.pointwise(pwAdd, out, bias, y))
	}

	conv := b.create(beConvolution)
	b.setEnum(conv, attrConvCompType, typeDataType, cdFloat) // f32 accumulation for every dtype
	b.setEnum(conv, attrConvMode, typeConvMode, cdCrossCorrelation)
	b.setInt64s(conv, attrConvSpatialDims, int64(len(d.spatial(d.Pad))))
	b.setInt64s(conv, attrConvDilations, int64s(d.spatial(d.Dilation)...)...)
	b.setInt64s(conv, attrConvFilterStrides, int64s(d.spatial(d.Stride)...)...)
	b.setInt64s(conv, attrConvPrePaddings, int64s(d.spatial(d.Pad)...)...)
	b.setInt64s(conv, attrConvPostPaddings, int64s(d.spatial(d.Pad)...)...)
	b.finalize(conv, "convolution")

	op := b.create(beOpConvForward)
	b.link(op, attrConvFwdX, x)
	b.link(op, attrConvFwdW, w)
	b.link(op, attrConvFwdY, out)
	b.link(op, attrConvFwdConvDesc, conv)
	// y = 1·conv(x, w) + β·y, β 1 when accumulating. cuDNN takes the
	// scalars as FLOAT (DOUBLE only for double data) whatever the tensors'
	// type.
	b.setFloat(op, attrConvFwdAlpha, 1)
	b.setFloat(op, attrConvFwdBeta, float32(beta(d)))
	b.finalize(op, "convolution forward")

	graph := b.create(beOperationGraph)
	b.linkAll(graph, attrGraphOps, append([]uintptr{op}, ops...))
	b.setHandle(graph, attrGraphHandle, h.h)
	b.finalize(graph, "operation graph")
	if b.err != nil {
		b.release()
		return nil, 0, b.err
	}
	return b, graph, nil
}

// fusesBias: d's graph adds the bias as its epilogue.
func fusesBias(d ConvDesc) bool { return d.Bias && !d.Accumulate }

// convCandidate is the execution plan of one engine configuration.
type convCandidate struct {
	plan      Plan
	exec, cfg uintptr
	rank      string // heuristics mode and place in its list: "A#0"
}

// walkEngines offers keep the execution plans of graph's engine
// configurations in the order cuDNN's heuristics rank them (mode A's list,
// then the fallback list), each that the handle's rules allow and that
// finalizes; keep says whether to go on. Configurations passed over are
// destroyed, with why in skipped; the offered ones stay in b.
func (h *Handle) walkEngines(d ConvDesc, b *graphBuild, graph uintptr, skipped *[]string, keep func(convCandidate) bool) {
	for _, m := range []struct {
		mode int
		name string
	}{{heurModeA, "A"}, {heurModeFallback, "fallback"}} {
		cfgs, err := b.heuristicConfigs(graph, m.mode)
		if b.err != nil {
			return
		}
		if err != nil {
			*skipped = append(*skipped, err.Error())
			continue
		}
		for i, cfg := range cfgs {
			c, why := h.tryEngine(d, b, cfg)
			if b.err != nil {
				return
			}
			if why != "" {
				b.destroy(cfg)
				*skipped = append(*skipped, fmt.Sprintf("%s#%d %s", m.name, i, why))
				continue
			}
			c.rank = fmt.Sprintf("%s#%d", m.name, i)
			if !keep(c) {
				for _, rest := range cfgs[i+1:] {
					b.destroy(rest)
				}
				return
			}
		}
	}
}

// tryEngine finalizes cfg's execution plan when the handle's rules allow
// its engine for d, or says why not.
func (h *Handle) tryEngine(d ConvDesc, b *graphBuild, cfg uintptr) (convCandidate, string) {
	idx, notes, err := b.engineInfo(cfg)
	name := fmt.Sprintf("cuDNN engine %d", idx)
	if err != nil {
		return convCandidate{}, name + ": " + err.Error()
	}
	// As PyTorch filters: no engine that narrows its inputs, and none on
	// tensor cores (TF32) for strict f32. Nor one that sums in less than
	// f32, which the package promises for every dtype.
	for _, n := range notes {
		switch {
		case n == noteTensorCore && d.DType == F32 && !h.fast:
			return convCandidate{}, name + ": tensor cores (TF32), fast f32 is off"
		case n == noteDownConvertInputs:
			return convCandidate{}, name + ": converts its inputs to a narrower type"
		case n == noteReducedPrecisionReduction:
			return convCandidate{}, name + ": sums in less than f32"
		}
	}
	exec, ws, err := b.executionPlan(h.h, cfg)
	if err != nil {
		return convCandidate{}, name + ": " + err.Error()
	}
	if h.wsLimit > 0 && ws > h.wsLimit {
		b.destroy(exec)
		return convCandidate{}, fmt.Sprintf("%s: workspace %d B over the limit %d B", name, ws, h.wsLimit)
	}
	return convCandidate{
		plan: Plan{Desc: d, Algo: graphAlgoBase, Name: name, WorkspaceBytes: ws, TimeMs: -1, Source: "graph", AddsBias: fusesBias(d)},
		exec: exec, cfg: cfg,
	}, ""
}

// runGraph queues e's graph plan on the handle's stream.
func (h *Handle) runGraph(d ConvDesc, e *entry, x, w, bias, y, workspace uintptr) error {
	uids, ptrs := graphOperands(e.plan.AddsBias, x, w, bias, y)
	if err := h.lib.execute(h.h, e.exec, uids, ptrs, workspace); err != nil {
		return fmt.Errorf("%v with %s: %w", d, e.plan.Name, err)
	}
	return nil
}

// graphOperands are the uids and addresses of a graph's tensors, the bias
// among them when the graph adds it.
func graphOperands(addsBias bool, x, w, bias, y uintptr) ([]int64, []uintptr) {
	if addsBias {
		return []int64{uidX, uidW, uidY, uidBias}, []uintptr{x, w, y, bias}
	}
	return []int64{uidX, uidW, uidY}, []uintptr{x, w, y}
}

// graphAligned: the tensors keep the alignment the graph promises cuDNN.
func graphAligned(ptrs ...uintptr) bool {
	for _, p := range ptrs {
		if p%graphAlign != 0 {
			return false
		}
	}
	return true
}

// legacyFor is the legacy algorithm e's graph plan runs tensors off its
// alignment with: the one chosen beside the graph plan (its workspace is
// the plan's), else _v7's first within the plan's workspace.
func (h *Handle) legacyFor(d ConvDesc, e *entry) (Plan, error) {
	if e.legacy == nil {
		p, err := h.chooseCUDNNWithin(d, e, e.plan.WorkspaceBytes)
		if err != nil {
			return Plan{}, fmt.Errorf("miopen: %v: tensors off the graph plan's %d-byte alignment: %w", d, graphAlign, err)
		}
		e.legacy = &p
	}
	return *e.legacy, nil
}

// releaseGraph destroys e's graph-API descriptors.
func (h *Handle) releaseGraph(e *entry) {
	if len(e.graph) > 0 {
		(&graphBuild{l: h.lib, descs: e.graph}).release()
	}
	e.exec, e.graph, e.legacy = 0, nil, nil
}

// convEngines are execution plans of one convolution's engine
// configurations, to time against each other (graphConvEngines).
type convEngines struct {
	h       *Handle
	d       ConvDesc
	b       *graphBuild
	list    []convCandidate
	skipped []string
}

// graphConvEngines builds the execution plans of the first n engine
// configurations that cuDNN's heuristics rank for d (mode A's list, then
// the fallback list) and the handle's rules allow, in the order Plan walks
// them: the first is the graph API's plan. free releases them.
func (h *Handle) graphConvEngines(d ConvDesc, n int) (*convEngines, error) {
	if h.closed {
		return nil, errClosed
	}
	if err := d.Validate(); err != nil {
		return nil, err
	}
	d = d.norm()
	if h.lib.vendor != NVIDIA || !h.lib.graph {
		return nil, fmt.Errorf("miopen: %v lacks cuDNN's graph API", h.lib)
	}
	b, graph, err := h.convGraph(d)
	if err != nil {
		return nil, fmt.Errorf("miopen: %v: graph API: %w", d, err)
	}
	c := &convEngines{h: h, d: d, b: b}
	h.walkEngines(d, b, graph, &c.skipped, func(k convCandidate) bool {
		c.list = append(c.list, k)
		return len(c.list) < n
	})
	if b.err != nil {
		b.release()
		return nil, fmt.Errorf("miopen: %v: graph API: %w", d, b.err)
	}
	return c, nil
}

// run queues the convolution with plan i on the handle's stream.
func (c *convEngines) run(i int, x, w, bias, y, workspace uintptr) error {
	k := c.list[i]
	uids, ptrs := graphOperands(fusesBias(c.d), x, w, bias, y)
	if err := c.h.lib.execute(c.h.h, k.exec, uids, ptrs, workspace); err != nil {
		return fmt.Errorf("%v with %s (%s): %w", c.d, k.plan.Name, k.rank, err)
	}
	return nil
}

func (c *convEngines) free() { c.b.release() }

// summary is the first n of a list of reasons, and how many more.
func summary(s []string, n int) string {
	if len(s) <= n {
		return orNone(s)
	}
	return fmt.Sprintf("%s; and %d more", strings.Join(s[:n], "; "), len(s)-n)
}

func int64s[T int | int32](v ...T) []int64 {
	out := make([]int64, len(v))
	for i, x := range v {
		out[i] = int64(x)
	}
	return out
}

// searchGraph times the first searchEngines engine configurations of the
// graph API for d on the given buffers with the handle's timer and returns
// their plans (Algo graphAlgoBase + rank, Source "search"); none without
// a timer, the graph API or under ConvAPILegacy.
func (h *Handle) searchGraph(d ConvDesc, x, w, y, workspace uintptr, wsBytes int64) ([]Plan, error) {
	if h.timer == nil || !h.lib.graph || h.convAPI == ConvAPILegacy {
		return nil, nil
	}
	ce, err := h.graphConvEngines(d, searchEngines)
	if err != nil {
		return nil, err
	}
	defer ce.free()
	var plans []Plan
	for i, c := range ce.list {
		if c.plan.WorkspaceBytes > wsBytes {
			continue
		}
		ms, err := h.timer(func() error { return ce.run(i, x, w, 0, y, workspace) })
		if err != nil {
			return nil, err
		}
		p := c.plan
		p.Algo, p.Source, p.TimeMs = graphAlgoBase+i, "search", ms
		plans = append(plans, p)
	}
	return plans, nil
}

// searchEngines is how many of the graph API's engine configurations a
// search times.
const searchEngines = 8
