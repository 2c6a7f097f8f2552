package gpu

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/framepack-go/framepack/convchain"
	"github.com/framepack-go/framepack/hip"
	"github.com/framepack-go/framepack/miopen"
	"github.com/framepack-go/framepack/tensor"
)

// optimized is the chain's first tier: the vendor library (cuDNN on NVIDIA,
// MIOpen on AMD) through package miopen.
//
// In channels-last layout (NDHWC, the libraries' fast path) the input is
// packed a chunk of output frames at a time into an NDHWC scratch tensor,
// convolved, and unpacked into the NCDHW output with the bias added in the
// same pass: the scratch memory stays within ConvOptions.ChunkBytes whatever the
// convolution's size, and temporal zero padding is done by the packing. In
// NCDHW layout the library reads and writes the engine's tensors directly
// and the bias is a separate pass. Scratch tensors and the library's
// workspace are allocated on the output's backend, so a budget above the
// chain counts them; when they do not fit, the chunk shrinks before the
// tier gives up. The packed weights are kept for later calls (convpack.go).
type optimized struct {
	*handle
	o *ConvOptions
}

// handle is a GPU backend's library handle and layout kernels, shared by
// every chain on that backend (the handle is not safe for concurrent use:
// mu guards it).
type handle struct {
	be     *Backend
	dev    *hip.Device
	h      *miopen.Handle
	lk     *layoutKernels
	vendor miopen.Vendor
	mu     sync.Mutex
	given  map[miopen.ConvDesc]bool // descs planned with a searched algorithm
}

// bind locks the handle and binds its device to this thread for a library
// call; release undoes both.
func (h *handle) bind() (release func(), err error) {
	h.mu.Lock()
	unbind, err := h.dev.Bind()
	if err != nil {
		h.mu.Unlock()
		return nil, err
	}
	return func() { unbind(); h.mu.Unlock() }, nil
}

var (
	handlesMu sync.Mutex
	handles   = map[*Backend]*handle{}
)

// planData is what the tier remembers of a plan: the layout and, when a
// search chose it, the algorithm (a cuDNN algorithm or a MIOpen solution id).
type planData struct {
	ID     uint64 `json:"id"`
	Layout string `json:"layout"`
	Given  bool   `json:"given,omitempty"` // ID was chosen by a search
}

// remembered is the planData of p in layout l: cuDNN's plans are
// algorithms, MIOpen's solutions.
func (t *optimized) remembered(p miopen.Plan, l miopen.Layout, given bool) []byte {
	id := p.SolutionID
	if t.vendor == miopen.NVIDIA {
		id = uint64(p.Algo)
	}
	data, _ := json.Marshal(planData{ID: id, Layout: layoutName(l), Given: given})
	return data
}

// live is the in-process form of a plan.
type live struct {
	layout miopen.Layout
	gemm   bool // a 1×1×1 convolution as one GEMM, no library
	id     uint64
	given  bool
	frames int  // output frames per chunk (NDHWC) at the default bound
	last   bool // a channels-last call: the whole convolution, no packing
}

func newOptimized(be *Backend, o *ConvOptions) (*optimized, error) {
	handlesMu.Lock()
	defer handlesMu.Unlock()
	if h := handles[be]; h != nil {
		return &optimized{handle: h, o: o}, nil
	}
	h, err := openHandle(be)
	if err != nil {
		return nil, err
	}
	handles[be] = h
	return &optimized{handle: h, o: o}, nil
}

// workspaceLimit bounds the library's workspace (plans needing more are
// passed over).
const workspaceLimit = 1 << 30

func openHandle(be *Backend) (*handle, error) {
	dev := be.Device()
	lib, err := miopen.OpenVendor(dev.Vendor)
	if err != nil {
		return nil, err
	}
	unbind, err := dev.Bind()
	if err != nil {
		return nil, err
	}
	defer unbind()
	h, err := lib.NewHandle(uintptr(be.Stream()))
	if err != nil {
		return nil, err
	}
	h.SetWorkspaceLimit(workspaceLimit)
	api, _ := miopen.ParseConvAPI(be.opts.ConvAPI) // checked by New
	h.SetConvAPI(api)
	return &handle{be: be, dev: dev, h: h, vendor: dev.Vendor, given: map[miopen.ConvDesc]bool{},
		lk: &layoutKernels{b: be}}, nil
}

func (t *optimized) Name() string { return "optimized" }

func libDType(dt string) (miopen.DType, error) {
	switch dt {
	case "f32":
		return miopen.F32, nil
	case "f16":
		return miopen.F16, nil
	case "bf16":
		return miopen.BF16, nil
	}
	return 0, fmt.Errorf("gpu: conv3d on %s: %w", dt, tensor.ErrUnsupported)
}

// geom is a key's convolution in numbers.
type geom struct {
	B, Cin, T, H, W, Cout, kT, kH, kW int
	st, pad                           [3]int
	To, Ho, Wo                        int
	es                                int
}

func geomOf(k convchain.Key) (geom, error) {
	dt, err := tensor.ParseDType(k.DType)
	if err != nil {
		return geom{}, err
	}
	g := geom{B: k.X[0], Cin: k.X[1], T: k.X[2], H: k.X[3], W: k.X[4], Cout: k.W[0], kT: k.W[2], kH: k.W[3], kW: k.W[4],
		st: k.Stride, pad: k.Padding, es: dt.Size()}
	for i := range g.st {
		g.st[i] = max(g.st[i], 1)
	}
	g.To = (g.T+2*g.pad[0]-g.kT)/g.st[0] + 1
	g.Ho = (g.H+2*g.pad[1]-g.kH)/g.st[1] + 1
	g.Wo = (g.W+2*g.pad[2]-g.kW)/g.st[2] + 1
	if g.To <= 0 || g.Ho <= 0 || g.Wo <= 0 || k.W[1] != g.Cin {
		return geom{}, fmt.Errorf("gpu: conv3d %s: bad shapes", k)
	}
	return g, nil
}

// inFrames is the input frames a chunk of tc output frames reads.
func (g geom) inFrames(tc int) int { return (tc-1)*g.st[0] + g.kT }

// scratch is the bytes of a chunk's NDHWC scratch tensors (input and
// output).
func (g geom) scratch(tc int) int64 {
	in := int64(g.B) * int64(g.inFrames(tc)) * int64(g.H) * int64(g.W) * int64(g.Cin)
	out := int64(g.B) * int64(tc) * int64(g.Ho) * int64(g.Wo) * int64(g.Cout)
	w := int64(g.Cout) * int64(g.Cin) * int64(g.kT*g.kH*g.kW)
	return (in + out + w) * int64(g.es)
}

// chunkFrames is the most output frames whose scratch fits in limit (at
// least 1).
func (g geom) chunkFrames(limit int64) int {
	lo, hi := 1, g.To
	for lo < hi { // the largest tc with scratch(tc) <= limit
		mid := (lo + hi + 1) / 2
		if g.scratch(mid) <= limit {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

// desc is the library's description of the convolution: the whole of it in
// NCDHW, or a chunk of tc output frames in NDHWC (temporal padding done by
// the packing).
func (g geom) desc(dt miopen.DType, l miopen.Layout, tc int) miopen.ConvDesc {
	d := miopen.ConvDesc{N: g.B, C: g.Cin, D: g.T, H: g.H, W: g.W, K: g.Cout, KD: g.kT, KH: g.kH, KW: g.kW,
		Stride: g.st, Pad: g.pad, DType: dt, Layout: l}
	if l == miopen.NDHWC {
		d.D = g.inFrames(tc)
		d.Pad[0] = 0
	}
	return d
}

// lastDesc is the library's description of a channels-last convolution:
// the whole of it on the caller's tensors, the padding the library's own.
func (g geom) lastDesc(dt miopen.DType) miopen.ConvDesc {
	return miopen.ConvDesc{N: g.B, C: g.Cin, D: g.T, H: g.H, W: g.W, K: g.Cout, KD: g.kT, KH: g.kH, KW: g.kW,
		Stride: g.st, Pad: g.pad, DType: dt, Layout: miopen.NDHWC}
}

// layouts is the order the tier tries layouts in for g.
func (t *optimized) layouts(g geom) []miopen.Layout {
	switch t.o.Layout {
	case LayoutNCDHW:
		return []miopen.Layout{miopen.NCDHW}
	case LayoutNDHWC:
		return []miopen.Layout{miopen.NDHWC}
	}
	// Strict f32 on NVIDIA (no TF32: cuDNN's FMA engines) runs NCDHW on
	// the tensors as they are, with a workspace of a few bytes; in
	// channels-last the chunk bound leaves room for one frame of f32 at
	// the VAE's sizes, packed, convolved and unpacked a frame at a time.
	if g.es == 4 && t.vendor == miopen.NVIDIA {
		return []miopen.Layout{miopen.NCDHW, miopen.NDHWC}
	}
	// Channels-last is the libraries' fast path (NCDHW's fast algorithms
	// want workspaces of several GiB at the VAE's sizes); NCDHW stays as
	// the fallback.
	return []miopen.Layout{miopen.NDHWC, miopen.NCDHW}
}

// pointwise is a 1×1×1 convolution with stride 1 and no padding: a GEMM.
func (g geom) pointwise() bool {
	return g.kT == 1 && g.kH == 1 && g.kW == 1 && g.st == [3]int{1, 1, 1} && g.pad == [3]int{}
}

func isGEMM(data json.RawMessage) bool {
	var pd planData
	return json.Unmarshal(data, &pd) == nil && pd.Layout == "gemm"
}

func layoutName(l miopen.Layout) string {
	if l == miopen.NDHWC {
		return "ndhwc"
	}
	return "ncdhw"
}

func parseLayout(s string) (miopen.Layout, error) {
	switch s {
	case "ndhwc":
		return miopen.NDHWC, nil
	case "ncdhw", "":
		return miopen.NCDHW, nil
	}
	return 0, fmt.Errorf("gpu: unknown layout %q in a remembered plan", s)
}

// libPlan plans d on the handle: with the searched algorithm when given
// (once per desc), else by the library's heuristics. Called with t.mu held
// and the device bound.
func (t *optimized) libPlan(d miopen.ConvDesc, id uint64, given bool) (miopen.Plan, error) {
	if given && !t.given[d] {
		p, err := t.h.PlanWith(d, id)
		if err == nil {
			t.given[d] = true
		}
		return p, err
	}
	return t.h.Plan(d)
}

func (t *optimized) Plan(k convchain.Key, searched *convchain.Plan) (*convchain.Plan, error) {
	g, err := geomOf(k)
	if err != nil {
		return nil, err
	}
	dt, err := libDType(k.DType)
	if err != nil {
		return nil, err
	}
	last := k.Layout == "ndhwc"
	if g.pointwise() && (t.o.Layout == LayoutAuto || last) && (searched == nil || len(searched.Data) == 0 || isGEMM(searched.Data)) {
		data, _ := json.Marshal(planData{Layout: "gemm"})
		return &convchain.Plan{Algorithm: "1×1×1 as one GEMM on " + t.be.BLAS(), Data: data, Live: &live{gemm: true, last: last}}, nil
	}
	if last {
		return t.planLast(k, g, dt, searched)
	}
	order := t.layouts(g)
	var pd planData
	if searched != nil && len(searched.Data) > 0 {
		if err := json.Unmarshal(searched.Data, &pd); err != nil {
			return nil, fmt.Errorf("gpu: remembered conv3d plan: %w", err)
		}
		l, err := parseLayout(pd.Layout)
		if err != nil {
			return nil, err
		}
		// A searched algorithm runs in the layout it was timed in; a plan
		// the heuristics chose is planned again in today's order.
		if pd.Given {
			order = []miopen.Layout{l}
		}
	}
	release, err := t.bind()
	if err != nil {
		return nil, err
	}
	defer release()
	var errs []error
	var naive *convchain.Plan
	for _, l := range order {
		lv := &live{layout: l, id: pd.ID, given: pd.Given}
		if l == miopen.NDHWC {
			lv.frames = g.chunkFrames(t.o.chunkBytes())
		}
		d := g.desc(dt, l, max(lv.frames, 1))
		p, err := t.libPlan(d, lv.id, lv.given)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", layoutName(l), err))
			continue
		}
		data := t.remembered(p, l, lv.given)
		alg := fmt.Sprintf("%s %s %s", t.h.Lib().Name(), layoutName(l), p)
		if l == miopen.NDHWC && lv.frames < g.To {
			alg += fmt.Sprintf(", %d of %d frames a chunk", lv.frames, g.To)
		}
		cp := &convchain.Plan{Algorithm: alg, Naive: p.IsNaive, Workspace: p.WorkspaceBytes, Data: data, Live: lv}
		if p.IsNaive { // another layout may have a real solver
			if naive == nil {
				naive = cp
			}
			continue
		}
		return cp, nil
	}
	if naive != nil {
		return naive, nil // the chain skips it and says why
	}
	return nil, errors.Join(errs...)
}

// planLast plans a channels-last convolution: the library in NDHWC on the
// caller's tensors, with the searched algorithm when there is one.
func (t *optimized) planLast(k convchain.Key, g geom, dt miopen.DType, searched *convchain.Plan) (*convchain.Plan, error) {
	var pd planData
	if searched != nil && len(searched.Data) > 0 {
		if err := json.Unmarshal(searched.Data, &pd); err != nil {
			return nil, fmt.Errorf("gpu: remembered conv3d plan: %w", err)
		}
		if pd.Layout != "ndhwc" {
			return nil, fmt.Errorf("gpu: conv3d %s: a remembered plan in layout %q", k, pd.Layout)
		}
	}
	release, err := t.bind()
	if err != nil {
		return nil, err
	}
	defer release()
	lv := &live{layout: miopen.NDHWC, id: pd.ID, given: pd.Given, last: true}
	p, err := t.libPlan(g.lastDesc(dt), lv.id, lv.given)
	if err != nil {
		return nil, err
	}
	return &convchain.Plan{Algorithm: fmt.Sprintf("%s ndhwc %s (channels-last operands)", t.h.Lib().Name(), p), Naive: p.IsNaive,
		Workspace: p.WorkspaceBytes, Data: t.remembered(p, miopen.NDHWC, lv.given), Live: lv}, nil
}

// prepared is what a run of key k needs before it convolves.
type prepared struct {
	plan  *convchain.Plan
	g     geom
	dt    miopen.DType
	lv    *live
	alloc tensor.Backend // where its scratch goes: dst's backend, else the tier's
}

// prepare readies a run of key k into dst: its geometry and library dtype,
// and plan's live state, planned again where plan has none for this kind
// of call (channels-last or not), as for a remembered plan.
func (t *optimized) prepare(k convchain.Key, plan *convchain.Plan, dst *tensor.Tensor, last bool) (prepared, error) {
	r := prepared{plan: plan, alloc: dst.Backend()}
	var err error
	if r.g, err = geomOf(k); err != nil {
		return r, err
	}
	if r.dt, err = libDType(k.DType); err != nil {
		return r, err
	}
	if r.lv, _ = plan.Live.(*live); r.lv == nil || r.lv.last != last {
		if r.plan, err = t.Plan(k, plan); err != nil {
			return r, err
		}
		r.lv = r.plan.Live.(*live)
	}
	if r.alloc == nil {
		r.alloc = t.be
	}
	return r, nil
}

// RunLast convolves channels-last x into dst as they are: the library in
// NDHWC with the packed weight (then the bias, where its epilogue did not
// add it), or one GEMM with the bias for a 1×1×1 convolution.
func (t *optimized) RunLast(plan *convchain.Plan, dst, x, w, bias *tensor.Tensor, p tensor.ConvParams) error {
	r, err := t.prepare(convchain.KeyOfLast("", x, w, bias, p), plan, dst, true)
	if err != nil {
		return err
	}
	plan, g, dt, lv, alloc := r.plan, r.g, r.dt, r.lv, r.alloc
	if p.Accumulate && (lv.gemm || lv.given || t.h.Lib().Vendor() == miopen.AMD) {
		// The GEMM here and MIOpen cannot add to dst, and a searched plan
		// runs the convolution it timed (no β): convolve into scratch,
		// then add.
		return t.runLastAdded(plan, alloc, dst, x, w, bias, p)
	}
	rows := g.B * g.To * g.Ho * g.Wo
	if lv.gemm {
		err = t.o.Profile.time("conv3d.gemm", t.be, g.flops(g.To), func() error {
			return t.be.Linear(dst.Reshape(rows, g.Cout), x.Reshape(rows, g.Cin), w.Reshape(g.Cout, g.Cin), bias)
		})
		bias = nil // Linear added it
	} else {
		// Out of memory, the kept weight copies go first and the call runs
		// once more without keeping one.
		for keep := true; ; keep = false {
			var added bool
			added, err = t.runLast(alloc, g, dt, p, lv, dst, x, w, bias, keep)
			if added {
				bias = nil // the library's epilogue added it
			}
			if err == nil || !errors.Is(err, tensor.ErrOutOfMemory) || !keep || t.be.packs.Clear() == 0 {
				break
			}
		}
	}
	if err != nil || bias == nil {
		return err
	}
	err = t.o.Profile.time("conv3d.bias", t.be, 0, func() error {
		y := dst.Reshape(rows, g.Cout)
		return t.be.Binary(tensor.OpAdd, y, y, []int{g.Cout, 1}, bias, []int{0, 1})
	})
	if err != nil && p.Accumulate {
		// The library added the convolution already.
		err = fmt.Errorf("conv3d bias after the sum: %w (%w)", err, convchain.ErrPartSum)
	}
	return err
}

// runLast runs the library on channels-last operands; on NVIDIA the plan
// adds the bias as its epilogue where an engine takes it (added).
func (t *optimized) runLast(alloc tensor.Backend, g geom, dt miopen.DType, p tensor.ConvParams, lv *live, dst, x, w, bias *tensor.Tensor, keep bool) (added bool, err error) {
	wl := w // packed already (p.WeightLast)
	if !p.WeightLast {
		var done func()
		if wl, done, err = t.packedWeight(alloc, g, dst.DType(), w, keep); err != nil {
			return false, err
		}
		defer done()
	}
	acc := p.Accumulate
	d := g.lastDesc(dt)
	d.Accumulate = acc
	var bp uintptr
	// A searched plan's engine is its place in the list of the graph it
	// timed, which had no bias: that graph runs, the bias is added after.
	if bias != nil && !acc && !lv.given && t.h.Lib().Vendor() == miopen.NVIDIA {
		d.Bias, bp = true, Ptr(bias)
	}
	err = t.o.Profile.time("conv3d.library", t.be, g.flops(g.To), func() (err error) {
		added, err = t.forwardBias(alloc, d, lv, Ptr(x), Ptr(wl), bp, Ptr(dst))
		return err
	})
	return added, err
}

// runLastAdded is RunLast adding to dst through a scratch output.
func (t *optimized) runLastAdded(plan *convchain.Plan, alloc tensor.Backend, dst, x, w, bias *tensor.Tensor, p tensor.ConvParams) error {
	tmp, err := scratch(alloc, dst.DType(), int64(dst.Numel()))
	if err != nil {
		return err
	}
	defer tensor.Release(tmp)
	part := tmp.Reshape(dst.Shape()...)
	p.Accumulate = false
	if err := t.RunLast(plan, part, x, w, bias, p); err != nil {
		return err
	}
	st := tensor.ContiguousStrides(dst.Shape())
	if err := t.be.Binary(tensor.OpAdd, dst, dst, st, part, st); err != nil {
		return fmt.Errorf("conv3d sum: %w (%w)", err, convchain.ErrPartSum)
	}
	return nil
}

func (t *optimized) Run(plan *convchain.Plan, dst, x, w, bias *tensor.Tensor, p tensor.ConvParams) error {
	return t.run(plan, dst, x, nil, w, bias, p)
}

// RunPadded is Run on x padded by pad: the channels-last path packs x
// through the padding, the others pad a copy first.
func (t *optimized) RunPadded(plan *convchain.Plan, dst, x, w, bias *tensor.Tensor, p tensor.ConvParams, pad tensor.Padding) error {
	return t.run(plan, dst, x, &pad, w, bias, p)
}

func (t *optimized) run(plan *convchain.Plan, dst, x *tensor.Tensor, pad *tensor.Padding, w, bias *tensor.Tensor, p tensor.ConvParams) error {
	k := convchain.KeyOf("", x, w, bias, p)
	if pad != nil {
		copy(k.X[:], pad.Shape(x.Shape()))
	}
	r, err := t.prepare(k, plan, dst, false)
	if err != nil {
		return err
	}
	g, dt, lv, alloc := r.g, r.dt, r.lv, r.alloc
	if pad != nil && (lv.gemm || lv.layout == miopen.NCDHW) {
		// Only the packing reads through a padding: pad a copy.
		var px *tensor.Tensor
		if err := t.o.Profile.time("conv3d.pad", t.be, 0, func() (err error) {
			px, err = pad.Materialize(alloc, x)
			return err
		}); err != nil {
			return err
		}
		defer tensor.Release(px)
		x, pad = px, nil
	}
	switch {
	case lv.gemm:
		return t.runGEMM(g, dst, x, w, bias)
	case lv.layout == miopen.NCDHW:
		return t.runNCDHW(alloc, g, dt, lv, dst, x, w, bias)
	}
	// Out of memory, the kept weight copies go first (they may be what does
	// not fit; the retry keeps none), then a chunk shrinks, down to one
	// frame.
	keep := true
	for tc := g.chunkFrames(t.chunkLimit(alloc)); ; {
		err := t.runNDHWC(alloc, g, dt, lv, tc, dst, x, pad, w, bias, keep)
		if err == nil || !errors.Is(err, tensor.ErrOutOfMemory) {
			return err
		}
		if keep {
			keep = false
			if n := t.be.packs.Clear(); n > 0 {
				if t.o.Log != nil {
					t.o.Log.Info(fmt.Sprintf("conv3d: %s: %d-frame chunks do not fit (%v); letting go of %s of kept weight copies and retrying",
						k, tc, err, mib(n)))
				}
				continue
			}
		}
		if tc == 1 {
			return err
		}
		if t.o.Log != nil {
			t.o.Log.Info(fmt.Sprintf("conv3d: %s: %d-frame chunks do not fit (%v); trying %d", k, tc, err, (tc+1)/2))
		}
		tc = (tc + 1) / 2
	}
}

// maxChunkBytes bounds the scratch of a chunk when the budget has room.
const maxChunkBytes = 4 << 30

// chunkLimit is the scratch bound of a run: ConvOptions.ChunkBytes when set,
// else DefaultChunkBytes, raised to a quarter of what the budget still has
// free (at most maxChunkBytes): fewer, larger chunks re-pack fewer halo
// frames and keep the library busier.
func (t *optimized) chunkLimit(alloc tensor.Backend) int64 {
	if t.o.ChunkBytes > 0 {
		return t.o.ChunkBytes
	}
	lim := int64(DefaultChunkBytes)
	if av, ok := alloc.(tensor.Budgeted); ok {
		lim = max(lim, min(av.Available()/4, maxChunkBytes))
	}
	return lim
}

// runGEMM is a pointwise convolution: dst[b] (Cout, S) = w (Cout, Cin) ·
// x[b] (Cin, S), then the bias.
func (t *optimized) runGEMM(g geom, dst, x, w, bias *tensor.Tensor) error {
	S := g.T * g.H * g.W
	y := dst.Reshape(g.B, g.Cout, S)
	err := t.o.Profile.time("conv3d.gemm", t.be, g.flops(g.To), func() error {
		return t.be.MatMul(y, w.Reshape(1, g.Cout, g.Cin), x.Reshape(g.B, g.Cin, S),
			tensor.MatMulParams{Batch: g.B, M: g.Cout, N: S, K: g.Cin, Alpha: 1})
	})
	if err != nil || bias == nil {
		return err
	}
	return t.o.Profile.time("conv3d.bias", t.be, 0, func() error {
		return t.be.Binary(tensor.OpAdd, y, y, []int{g.Cout * S, S, 1}, bias, []int{0, 1, 0})
	})
}

// scratch allocates n elements of dt on be.
func scratch(be tensor.Backend, dt tensor.DType, n int64) (*tensor.Tensor, error) {
	return tensor.Alloc(be, dt, int(n))
}

// forward runs the library on d (planning it first when needed) with a
// workspace from alloc.
func (t *optimized) forward(alloc tensor.Backend, d miopen.ConvDesc, lv *live, x, w, y uintptr) error {
	_, err := t.forwardBias(alloc, d, lv, x, w, 0, y)
	return err
}

// forwardBias is forward with d.Bias's bias, which the plan adds where it
// can (added).
func (t *optimized) forwardBias(alloc tensor.Backend, d miopen.ConvDesc, lv *live, x, w, bias, y uintptr) (added bool, err error) {
	release, err := t.bind()
	if err != nil {
		return false, err
	}
	p, err := t.libPlan(d, lv.id, lv.given)
	release()
	if err != nil {
		return false, err
	}
	var ws *tensor.Tensor
	var wsp uintptr
	if p.WorkspaceBytes > 0 {
		if ws, err = scratch(alloc, tensor.U8, p.WorkspaceBytes); err != nil {
			return false, err
		}
		defer tensor.Release(ws)
		wsp = Ptr(ws)
	}
	if release, err = t.bind(); err != nil {
		return false, err
	}
	defer release()
	return t.h.Conv3dForwardBias(d, x, w, bias, y, wsp)
}

func (t *optimized) runNCDHW(alloc tensor.Backend, g geom, dt miopen.DType, lv *live, dst, x, w, bias *tensor.Tensor) error {
	d := g.desc(dt, miopen.NCDHW, 0)
	err := t.o.Profile.time("conv3d.library", t.be, g.flops(g.To), func() error {
		return t.forward(alloc, d, lv, Ptr(x), Ptr(w), Ptr(dst))
	})
	if err != nil || bias == nil {
		return err
	}
	return t.o.Profile.time("conv3d.bias", t.be, 0, func() error {
		C := dst.Dim(1)
		S := dst.Numel() / max(dst.Dim(0)*C, 1)
		y3 := dst.Reshape(dst.Dim(0), C, S)
		return t.be.Binary(tensor.OpAdd, y3, y3, []int{C * S, S, 1}, bias, []int{0, 1, 0})
	})
}

// runNDHWC convolves a chunk of tc output frames at a time; keep lets the
// packed weight be kept for later calls (packedWeight).
func (t *optimized) runNDHWC(alloc tensor.Backend, g geom, dt miopen.DType, lv *live, tc int, dst, x *tensor.Tensor, pad *tensor.Padding, w, bias *tensor.Tensor, keep bool) error {
	tdt := dst.DType()
	wl, done, err := t.packedWeight(alloc, g, tdt, w, keep)
	if err != nil {
		return err
	}
	defer done()
	xc, err := scratch(alloc, tdt, int64(g.B)*int64(g.inFrames(tc))*int64(g.H)*int64(g.W)*int64(g.Cin))
	if err != nil {
		return err
	}
	defer tensor.Release(xc)
	yc, err := scratch(alloc, tdt, int64(g.B)*int64(tc)*int64(g.Ho)*int64(g.Wo)*int64(g.Cout))
	if err != nil {
		return err
	}
	defer tensor.Release(yc)
	pr := t.o.Profile
	S, So := g.H*g.W, g.Ho*g.Wo
	var bp uintptr
	if bias != nil {
		bp = Ptr(bias)
	}
	for to0 := 0; to0 < g.To; to0 += tc {
		n := min(tc, g.To-to0)
		ti0 := to0*g.st[0] - g.pad[0]
		in := g.inFrames(n)
		if err := pr.time("conv3d.pack", t.be, 0, func() error {
			if pad != nil {
				us := pad.Shape(x.Shape())
				pg := padGeom{N: g.B, C: g.Cin, T: x.Dim(2), H: x.Dim(3), W: x.Dim(4),
					Tu: us[2] - pad.Before[0] - pad.After[0], Hu: us[3] - pad.Before[1] - pad.After[1], Wu: us[4] - pad.Before[2] - pad.After[2],
					up: pad.Upsample, causal: pad.CausalFirst, Tp: g.T, Hp: g.H, Wp: g.W,
					before: pad.Before, zt: g.pad[0], replicate: pad.Mode == tensor.PadReplicate}
				return t.lk.packpad(tdt, Ptr(xc), Ptr(x), pg, ti0+g.pad[0], in)
			}
			return t.lk.pack(tdt, Ptr(xc), Ptr(x), g.B, g.Cin, g.T, S, ti0, in)
		}); err != nil {
			return err
		}
		d := g.desc(dt, miopen.NDHWC, n)
		if err := pr.time("conv3d.library", t.be, g.flops(n), func() error {
			return t.forward(alloc, d, lv, Ptr(xc), Ptr(wl), Ptr(yc))
		}); err != nil {
			return err
		}
		if err := pr.time("conv3d.unpack", t.be, 0, func() error {
			return t.lk.unpack(tdt, Ptr(dst), Ptr(yc), bp, g.B, g.Cout, g.To, So, to0, n)
		}); err != nil {
			return err
		}
	}
	return nil
}

// flops is the multiply-adds ×2 of tc output frames.
func (g geom) flops(tc int) float64 {
	return 2 * float64(g.B) * float64(tc) * float64(g.Ho*g.Wo) * float64(g.Cout) * float64(g.Cin*g.kT*g.kH*g.kW)
}
