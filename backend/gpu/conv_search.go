package gpu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/framepack-go/framepack/convchain"
	"github.com/framepack-go/framepack/miopen"
	"github.com/framepack-go/framepack/tensor"
)

// The optimized tier's search replaces the GPU backend's own (this package
// imports backend/gpu, so its init runs later): it searches the layout the
// tier will run.
func init() { convchain.RegisterSearch("optimized", searchOptimized) }

// searchWorkspace is the workspace a search may offer the library.
const searchWorkspace = 256 << 20

// searchOptimized runs in a child process (the chain kills it at its
// deadline): a fresh backend, buffers of one chunk's size, the library's
// benchmarking search, and the fastest usable algorithm as the plan.
func searchOptimized(ctx context.Context, req convchain.SearchRequest) (*convchain.Plan, error) {
	g, err := geomOf(req.Key)
	if err != nil {
		return nil, err
	}
	dt, err := libDType(req.Key.DType)
	if err != nil {
		return nil, err
	}
	if g.pointwise() { // a GEMM: nothing to search
		data, _ := json.Marshal(planData{Layout: "gemm"})
		return &convchain.Plan{Algorithm: "1×1×1 as one GEMM per batch", Data: data}, nil
	}
	be, err := New(Options{NoBLAS: true, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return nil, err
	}
	defer be.Close()
	o := &ConvOptions{}
	t, err := newOptimized(be, o)
	if err != nil {
		return nil, err
	}
	if req.Key.Layout == "ndhwc" { // the caller's channels-last tensors, whole
		p, err := t.search(g.lastDesc(dt))
		if err != nil {
			return nil, err
		}
		return &convchain.Plan{Algorithm: fmt.Sprintf("%s ndhwc %s (channels-last operands)", t.h.Lib().Name(), p),
			Workspace: p.WorkspaceBytes, Data: t.remembered(p, miopen.NDHWC, true)}, nil
	}
	var errs []error
	for _, l := range t.layouts(g) {
		tc := g.To
		if l == miopen.NDHWC {
			tc = g.chunkFrames(o.chunkBytes())
		}
		d := g.desc(dt, l, tc)
		p, err := t.search(d)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", layoutName(l), err))
			continue
		}
		return &convchain.Plan{Algorithm: fmt.Sprintf("%s %s %s", t.h.Lib().Name(), layoutName(l), p),
			Workspace: p.WorkspaceBytes, Data: t.remembered(p, l, true)}, nil
	}
	return nil, errors.Join(errs...)
}

// search benchmarks d on scratch buffers and returns the fastest plan that
// is not the naive solver.
func (t *optimized) search(d miopen.ConvDesc) (miopen.Plan, error) {
	es := int64(d.DType.Size())
	var bufs []*tensor.Tensor
	defer func() {
		for _, b := range bufs {
			tensor.Release(b)
		}
	}()
	var ptrs []uintptr
	for _, n := range []int64{d.XElems() * es, d.WElems() * es, d.YElems() * es, searchWorkspace} {
		b, err := tensor.Alloc(t.be, tensor.U8, int(n))
		if err != nil {
			return miopen.Plan{}, err
		}
		bufs = append(bufs, b)
		if err := t.be.Fill(b, 0x3c); err != nil { // small non-zero values in every dtype
			return miopen.Plan{}, err
		}
		ptrs = append(ptrs, Ptr(b))
	}
	if err := t.be.Sync(); err != nil {
		return miopen.Plan{}, err
	}
	release, err := t.bind()
	if err != nil {
		return miopen.Plan{}, err
	}
	defer release()
	t.h.SetTimer(t.timer)
	defer t.h.SetTimer(nil)
	plans, err := t.h.Search(d, ptrs[0], ptrs[1], ptrs[2], ptrs[3], searchWorkspace)
	if err != nil {
		return miopen.Plan{}, err
	}
	for _, p := range plans {
		if !p.IsNaive {
			return p, nil
		}
	}
	return miopen.Plan{}, fmt.Errorf("%v: the search found only the naive solver", d)
}

// timer times a library call for a search: one run to warm it, then the
// mean of three between two waits for the device.
func (t *optimized) timer(run func() error) (float32, error) {
	if err := run(); err != nil {
		return 0, err
	}
	if err := t.be.Sync(); err != nil {
		return 0, err
	}
	const n = 3
	start := time.Now()
	for range n {
		if err := run(); err != nil {
			return 0, err
		}
	}
	if err := t.be.Sync(); err != nil {
		return 0, err
	}
	return float32(time.Since(start).Seconds() * 1e3 / n), nil
}
