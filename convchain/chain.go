// Package convchain runs 3-D convolutions through a chain of tiers that
// always finishes: optimized (MIOpen / cuDNN) → GEMM (rocBLAS / cuBLAS) →
// naive GPU kernel → CPU. A tier that errors, runs out of memory, overruns
// its search deadline or (on AMD) resolves to MIOpen's naive solver is
// skipped for that convolution shape, and the next one runs. What worked
// for each shape and device is remembered on disk with the reason for
// every skip, so later runs go straight to it.
//
// Algorithm searches (MIOpen Find, benchmarking) run in a child process —
// this binary started again, see MaybeRunChild — that is killed at the
// deadline (30 s by default), so a search that hangs in the driver cannot
// hang the run or keep it from exiting. Searches are never exhaustive
// unless asked. Plan and Run calls are in process and not bounded by the
// deadline (work queued on a device cannot be abandoned safely); the first
// run of each plan waits for the device, so that its failure skips the tier.
//
// A search that overruns its deadline turns that tier's searches off on
// the device: the shape, and every shape after it, plans the tier from its
// heuristics (as with searches off) without waiting again, since a driver
// whose search hangs hangs for every shape. That is remembered on disk
// beside the choices, until ForgetSearchTimeouts (`framepack doctor
// --retry-searches`). A cancelled context (Bind) kills a running search at
// once and fails its convolution, remembering nothing.
//
// A choice made after a tier ran out of memory is kept for this process
// only, since it depends on what else held the device; a later run tries
// that tier again. Other skips (errors, timeouts, naive solvers) are
// remembered.
//
// Faults are injected through one setting, FRAMEPACK_FAULTS (see FaultsEnv).
package convchain

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/framepack-go/framepack/tensor"
)

// DefaultSearchDeadline bounds every algorithm search.
const DefaultSearchDeadline = 30 * time.Second

// Options configure a Chain.
type Options struct {
	// Device names the device (and library versions) in keys and the
	// cache; "default" when empty.
	Device string
	// CachePath is the file of remembered choices: "" for
	// DefaultCachePath, "off" for none.
	CachePath string
	// SearchDeadline bounds each algorithm search (0: 30 s).
	SearchDeadline time.Duration
	// Exhaustive asks searches to benchmark every algorithm (slow; off by
	// default).
	Exhaustive bool
	// NoSearch plans every tier without its registered search (the
	// library's heuristics alone); an injected hang still runs its child.
	NoSearch bool
	// Faults to inject; nil reads FRAMEPACK_FAULTS.
	Faults *Faults
	// Log receives skips, choices and the summary (nil: slog.Default()).
	Log *slog.Logger
}

// Chain runs convolutions through its tiers in order.
type Chain struct {
	tiers     []Tier
	opt       Options
	log       *slog.Logger
	faults    *Faults
	cachePath string // "" when choices are not kept on disk

	mu         sync.Mutex
	remembered map[string]*Choice // from disk and from this run
	live       map[string]live    // ready plans of this process
	stats      []tierStats
	warnedSave bool
	// timedOut is, per tier, the search timeout that turned its searches
	// off on this device (from this run or remembered); nil: searches on.
	timedOut []*SearchTimeout

	ctxMu sync.Mutex
	ctxs  []context.Context // bound by Bind; searches stop when one is done
}

type live struct {
	tier int
	plan *Plan
}

type tierStats struct {
	convs      int
	runTime    time.Duration
	searches   int
	searchTime time.Duration
	skips      map[string]int // by kind
	// timedOutHere: a search of this tier timed out in this process;
	// unwaited counts the shapes planned without a search since.
	timedOutHere bool
	unwaited     int
}

// New builds a chain of tiers, in order of preference.
func New(tiers []Tier, o Options) (*Chain, error) {
	if len(tiers) == 0 {
		return nil, errors.New("convchain: no tiers")
	}
	var names []string
	for _, t := range tiers {
		if slices.Contains(names, t.Name()) {
			return nil, fmt.Errorf("convchain: two tiers named %s", t.Name())
		}
		names = append(names, t.Name())
	}
	c := &Chain{tiers: tiers, opt: o, log: o.Log, faults: o.Faults,
		remembered: map[string]*Choice{}, live: map[string]live{}, stats: make([]tierStats, len(tiers)),
		timedOut: make([]*SearchTimeout, len(tiers))}
	for i := range c.stats {
		c.stats[i].skips = map[string]int{}
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	if c.opt.Device == "" {
		c.opt.Device = "default"
	}
	if c.opt.SearchDeadline <= 0 {
		c.opt.SearchDeadline = DefaultSearchDeadline
	}
	if c.faults == nil {
		f, err := FaultsFromEnv()
		if err != nil {
			return nil, err
		}
		c.faults = f
	}
	for t := range c.faults.Conv3d {
		if !slices.Contains(names, t) {
			return nil, fmt.Errorf("%s names conv3d.%s, but the chain's tiers are %s", FaultsEnv, t, strings.Join(names, ", "))
		}
	}

	switch {
	case len(c.faults.Conv3d) > 0:
		c.log.Info("conv3d: faults injected (" + c.faults.String() + "); remembered choices are neither read nor written")
	case o.CachePath == "off":
	default:
		path := o.CachePath
		if path == "" {
			p, err := DefaultCachePath()
			if err != nil {
				c.log.Warn("conv3d: choices will not be remembered", "err", err)
				break
			}
			path = p
		}
		c.cachePath = path
		f, err := readCacheFile(path)
		if err != nil {
			c.log.Warn(fmt.Sprintf("conv3d: ignoring the remembered choices in %s (%v); the file will be rewritten", path, err), "path", path)
		}
		c.remembered = f.Choices
		c.useTimeouts(f.SearchTimeouts)
	}
	return c, nil
}

// useTimeouts turns off the searches of the tiers whose search timed out
// on this device in an earlier run.
func (c *Chain) useTimeouts(m map[string]*SearchTimeout) {
	for i, t := range c.tiers {
		for _, rec := range m {
			if rec.Device != c.opt.Device || rec.Tier != t.Name() || (rec.Exhaustive && !c.opt.Exhaustive) {
				continue
			}
			c.timedOut[i] = rec
			if c.searches(i) {
				c.log.Info(fmt.Sprintf("conv3d: tier %s's search overran its deadline on this device on %s; the tier plans from its heuristics without searching (`framepack doctor --retry-searches` searches again)",
					t.Name(), rec.Updated.Format(time.DateOnly)), "tier", t.Name())
			}
			break
		}
	}
}

// searches reports whether tier i plans through a search in a child
// process: it registered one and searches are on, or a hang is injected.
func (c *Chain) searches(i int) bool {
	name := c.tiers[i].Name()
	return c.faults.Conv3d[name] == FaultHang || (!c.opt.NoSearch && searchFor(name) != nil)
}

// Bind makes ctx stop the chain's searches: while it is bound, a search
// running when ctx is done is killed at once and its convolution fails
// with an error wrapping ctx.Err(), and no new search starts. The returned
// function unbinds it. Pipeline.Generate binds its context.
func (c *Chain) Bind(ctx context.Context) (unbind func()) { return bind(&c.ctxMu, &c.ctxs, ctx) }

// Bind binds ctx to the chain in be's layers (see Chain.Bind); a backend
// without one needs nothing.
func Bind(be tensor.Backend, ctx context.Context) (unbind func()) {
	if c := ChainOf(be); c != nil {
		return c.Bind(ctx)
	}
	return func() {}
}

// BindAll binds ctx to every chain of the process, those made later
// included: a command binds the context its signals cancel.
func BindAll(ctx context.Context) (unbind func()) { return bind(&allMu, &all, ctx) }

var (
	allMu sync.Mutex
	all   []context.Context // bound by BindAll
)

func bind(mu *sync.Mutex, ctxs *[]context.Context, ctx context.Context) func() {
	mu.Lock()
	*ctxs = append(*ctxs, ctx)
	mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			mu.Lock()
			defer mu.Unlock()
			if i := slices.Index(*ctxs, ctx); i >= 0 {
				*ctxs = slices.Delete(*ctxs, i, i+1)
			}
		})
	}
}

// context is done when any bound context is done.
func (c *Chain) context() (context.Context, context.CancelFunc) {
	c.ctxMu.Lock()
	ctxs := slices.Clone(c.ctxs)
	c.ctxMu.Unlock()
	allMu.Lock()
	ctxs = append(ctxs, all...)
	allMu.Unlock()
	ctx, cancel := context.WithCancelCause(context.Background())
	var stops []func() bool
	for _, b := range ctxs {
		if b.Err() != nil {
			cancel(context.Cause(b))
			break
		}
		stops = append(stops, context.AfterFunc(b, func() { cancel(context.Cause(b)) }))
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel(nil)
	}
}

// errCancelled is wrapped when a bound context stopped a search.
var errCancelled = errors.New("search stopped: cancelled")

// Tiers names the tiers in order.
func (c *Chain) Tiers() []string {
	out := make([]string, len(c.tiers))
	for i, t := range c.tiers {
		out[i] = t.Name()
	}
	return out
}

var errNaive = errors.New("resolved to the vendor's naive solver")

// ErrPartSum marks a run that failed after it began adding to its output
// (ConvParams.Accumulate): the output may hold part of the sum, so no
// other tier may add it again. A tier wraps it around such a failure; a
// failure before anything is written (an unsupported convolution, no
// memory for a workspace) passes the call on to the next tier.
var ErrPartSum = errors.New("the output may hold part of the sum, so no other tier runs it")

// Error is a convolution that no tier could run. It wraps every tier's
// error, so errors.Is(err, tensor.ErrOutOfMemory) holds when one of them
// ran out of memory.
type Error struct {
	Key   Key
	Skips []Skip
	errs  []error
}

func (e *Error) Error() string {
	parts := make([]string, len(e.Skips))
	for i, s := range e.Skips {
		parts[i] = s.Tier + ": " + s.Reason
	}
	what := "every tier failed"
	if errors.Is(e, ErrPartSum) {
		what = "failed while adding to its output"
	}
	return fmt.Sprintf("conv3d %s: %s: %s", e.Key, what, strings.Join(parts, "; "))
}

func (e *Error) Unwrap() []error { return e.errs }

// Conv3d computes dst as tensor.Backend.Conv3d does, through the chain.
func (c *Chain) Conv3d(dst, x, w, bias *tensor.Tensor, p tensor.ConvParams) error {
	return c.conv3d(KeyOf(c.opt.Device, x, w, bias, p), &call{dst: dst, x: x, w: w, bias: bias, p: p})
}

// PaddingTier is a tier that can read its input through a padding itself,
// without a padded copy (packing it into another layout, say).
type PaddingTier interface {
	// RunPadded is Run on the input pad makes from x.
	RunPadded(plan *Plan, dst, x, w, bias *tensor.Tensor, p tensor.ConvParams, pad tensor.Padding) error
}

// Conv3dPadded computes Conv3d(dst, pad(x), w, bias, p): a tier that is a
// PaddingTier reads x through the padding, the others get a padded copy,
// made once on dst's backend when first needed and freed before it
// returns. The key is the padded convolution's, so choices are shared with
// Conv3d on a padded input.
func (c *Chain) Conv3dPadded(dst, x, w, bias *tensor.Tensor, p tensor.ConvParams, pad tensor.Padding) error {
	return c.conv3dPadded(nil, dst, x, w, bias, p, pad)
}

// conv3dPadded is Conv3dPadded with be the backend of a padded copy when
// neither dst nor x names one (host tensors).
func (c *Chain) conv3dPadded(be tensor.Backend, dst, x, w, bias *tensor.Tensor, p tensor.ConvParams, pad tensor.Padding) error {
	if x.Rank() != 5 {
		return fmt.Errorf("conv3d: input %v is not (B, C, T, H, W)", x.Shape())
	}
	for i := 0; i < 3; i++ {
		if pad.Before[i] < 0 || pad.After[i] < 0 || pad.Upsample[i] < 0 {
			return fmt.Errorf("conv3d: negative padding %v/%v or upsample %v", pad.Before, pad.After, pad.Upsample)
		}
	}
	shape := pad.Shape(x.Shape())
	k := KeyOf(c.opt.Device, x, w, bias, p)
	copy(k.X[:], shape)
	cl := &call{dst: dst, x: x, w: w, bias: bias, p: p, pad: &pad, shape: shape, be: be}
	defer cl.release()
	return c.conv3d(k, cl)
}

// ChannelsLastTier is a tier that convolves channels-last tensors (x (B, T,
// H, W, Cin) into dst (B, To, Ho, Wo, Cout), or added to dst when
// p.Accumulate) as they are.
type ChannelsLastTier interface {
	RunLast(plan *Plan, dst, x, w, bias *tensor.Tensor, p tensor.ConvParams) error
}

// Conv3dLast computes the channels-last convolution of x (B, T, H, W, Cin)
// into dst (B, To, Ho, Wo, Cout), or adds it to dst (p.Accumulate): a tier
// that is a ChannelsLastTier convolves them as they are; the others get x
// moved channels-first (a copy made once when first needed) and their
// output moved back into dst, or added. The key's layout is "ndhwc", so its
// choices are its own.
func (c *Chain) Conv3dLast(dst, x, w, bias *tensor.Tensor, p tensor.ConvParams) error {
	return c.conv3dLast(nil, dst, x, w, bias, p)
}

func (c *Chain) conv3dLast(be tensor.Backend, dst, x, w, bias *tensor.Tensor, p tensor.ConvParams) error {
	if x.Rank() != 5 || dst.Rank() != 5 || w.Rank() != 5 {
		return fmt.Errorf("conv3d: channels-last input %v into %v: want (B, T, H, W, C)", x.Shape(), dst.Shape())
	}
	cl := &call{dst: dst, x: x, w: w, bias: bias, p: p, last: true, be: be}
	defer cl.release()
	return c.conv3d(KeyOfLast(c.opt.Device, x, w, bias, p), cl)
}

// call is one convolution: its operands and, for Conv3dPadded, the padding
// its input still needs; for Conv3dLast, the channels-last flag.
type call struct {
	dst, x, w, bias *tensor.Tensor
	p               tensor.ConvParams
	pad             *tensor.Padding
	shape           []int          // the padded input's shape
	be              tensor.Backend // for copies when the tensors name none
	padded          *tensor.Tensor // the padded copy, once a tier needed it
	last            bool           // x and dst channels-last
	first           *tensor.Tensor // x moved channels-first, once a tier needed it
	wFirst          *tensor.Tensor // a packed w moved channels-first, likewise
}

// backend is where the call's copies go.
func (cl *call) backend() tensor.Backend {
	if be := cl.dst.Backend(); be != nil {
		return be
	}
	if be := cl.x.Backend(); be != nil {
		return be
	}
	return cl.be
}

func (cl *call) runOn(t Tier, plan *Plan) error {
	if cl.last {
		return cl.runLast(t, plan)
	}
	if cl.pad == nil {
		return t.Run(plan, cl.dst, cl.x, cl.w, cl.bias, cl.p)
	}
	if pt, ok := t.(PaddingTier); ok {
		return pt.RunPadded(plan, cl.dst, cl.x, cl.w, cl.bias, cl.p, *cl.pad)
	}
	if cl.padded == nil {
		be := cl.backend()
		if be == nil {
			return errors.New("conv3d: no backend to pad the input on")
		}
		pd, err := cl.pad.Materialize(be, cl.x)
		if err != nil {
			return err
		}
		cl.padded = pd
	}
	return t.Run(plan, cl.dst, cl.padded, cl.w, cl.bias, cl.p)
}

// runLast runs a channels-last call on t: as it is on a ChannelsLastTier,
// else channels-first on copies.
func (cl *call) runLast(t Tier, plan *Plan) error {
	if lt, ok := t.(ChannelsLastTier); ok {
		return lt.RunLast(plan, cl.dst, cl.x, cl.w, cl.bias, cl.p)
	}
	be := cl.backend()
	if be == nil {
		return errors.New("conv3d: no backend to move the channels on")
	}
	if cl.first == nil {
		f, err := permuted(be, cl.x, 0, 4, 1, 2, 3)
		if err != nil {
			return err
		}
		cl.first = f
	}
	w := cl.w
	if cl.p.WeightLast {
		if cl.wFirst == nil {
			f, err := permuted(be, cl.w, 0, 4, 1, 2, 3)
			if err != nil {
				return err
			}
			cl.wFirst = f
		}
		w = cl.wFirst
	}
	ds := cl.dst.Shape()
	y, err := tensor.Alloc(be, cl.dst.DType(), ds[0], ds[4], ds[1], ds[2], ds[3])
	if err != nil {
		return err
	}
	defer tensor.Release(y)
	p := cl.p
	p.Accumulate, p.WeightLast = false, false
	if err := t.Run(plan, y, cl.first, w, cl.bias, p); err != nil {
		return err
	}
	if !cl.p.Accumulate {
		return permuteInto(be, cl.dst, y, 0, 2, 3, 4, 1)
	}
	// Added to dst: moved channels-last beside it first.
	last, err := tensor.Alloc(be, cl.dst.DType(), ds...)
	if err != nil {
		return err
	}
	defer tensor.Release(last)
	if err := permuteInto(be, last, y, 0, 2, 3, 4, 1); err != nil {
		return err
	}
	st := tensor.ContiguousStrides(ds)
	if err := be.Binary(tensor.OpAdd, cl.dst, cl.dst, st, last, st); err != nil {
		return fmt.Errorf("%w (%w)", err, ErrPartSum)
	}
	return nil
}

// permuted is x with its axes reordered (out axis i is x's axis perm[i]),
// a copy on be.
func permuted(be tensor.Backend, x *tensor.Tensor, perm ...int) (*tensor.Tensor, error) {
	_, shape := tensor.PermutedStrides(x.Shape(), perm)
	out, err := tensor.Alloc(be, x.DType(), shape...)
	if err != nil {
		return nil, err
	}
	if err := permuteInto(be, out, x, perm...); err != nil {
		tensor.Release(out)
		return nil, err
	}
	return out, nil
}

// permuteInto copies src into dst with its axes reordered: dst's axis i is
// src's axis perm[i].
func permuteInto(be tensor.Backend, dst, src *tensor.Tensor, perm ...int) error {
	st, _ := tensor.PermutedStrides(src.Shape(), perm)
	return be.Copy(dst, 0, tensor.ContiguousStrides(dst.Shape()), src, 0, st, dst.Shape())
}

func (cl *call) release() {
	if cl.padded != nil {
		tensor.Release(cl.padded)
		cl.padded = nil
	}
	if cl.first != nil {
		tensor.Release(cl.first)
		cl.first = nil
	}
	if cl.wFirst != nil {
		tensor.Release(cl.wFirst)
		cl.wFirst = nil
	}
}

func (c *Chain) conv3d(k Key, cl *call) error {
	ks := k.String()
	c.mu.Lock()
	defer c.mu.Unlock()

	start := 0
	var skips []Skip
	var errs []error
	if l, ok := c.live[ks]; ok {
		err := c.run(l.tier, l.plan, false, cl)
		if err == nil {
			return nil
		}
		delete(c.live, ks)
		skips, errs = c.skip(l.tier, k, err, skips, errs)
		if errors.Is(err, ErrPartSum) {
			return &Error{Key: k, Skips: skips, errs: errs}
		}
		start = l.tier + 1
		if r := c.remembered[ks]; r != nil {
			skips = append(slices.Clone(r.Skips), skips...)
		}
	} else if r := c.remembered[ks]; r != nil && !c.searchesAgain(r) {
		// A choice of an earlier run: its plan stands in for the search.
		if i := slices.Index(c.Tiers(), r.Tier); i >= 0 {
			plan, err := c.tiers[i].Plan(c.tierKey(i, k), r.Plan)
			if err == nil && plan == nil {
				plan = &Plan{}
			}
			if err == nil {
				err = c.run(i, plan, true, cl)
			}
			if err == nil {
				c.live[ks] = live{i, plan}
				return nil
			}
			skips, errs = c.skip(i, k, fmt.Errorf("remembered choice failed: %w", err), slices.Clone(r.Skips), errs)
			if errors.Is(err, ErrPartSum) {
				return &Error{Key: k, Skips: skips, errs: errs}
			}
			start = i + 1
		}
	}

	for i := start; i < len(c.tiers); i++ {
		plan, err := c.plan(i, k)
		if errors.Is(err, errCancelled) {
			// Nothing was learnt about the tier: no skip, nothing kept.
			return fmt.Errorf("%s: %w", k, err)
		}
		if err == nil {
			err = c.run(i, plan, true, cl)
		}
		if err != nil {
			skips, errs = c.skip(i, k, err, skips, errs)
			if errors.Is(err, ErrPartSum) {
				break
			}
			continue
		}
		c.live[ks] = live{i, plan}
		c.remember(&Choice{Key: k, Tier: c.tiers[i].Name(), Plan: plan, Skips: skips, Updated: time.Now().UTC()})
		if len(skips) > 0 {
			c.log.Info(fmt.Sprintf("conv3d: %s runs on tier %s", ks, c.tiers[i].Name()), "tier", c.tiers[i].Name())
		}
		return nil
	}
	return &Error{Key: k, Skips: skips, errs: errs}
}

func (c *Chain) skip(i int, k Key, err error, skips []Skip, errs []error) ([]Skip, []error) {
	name := c.tiers[i].Name()
	kind := classify(err)
	c.stats[i].skips[kind]++
	c.log.Warn(fmt.Sprintf("conv3d: tier %s skipped for %s (%s): %v", name, k, kind, err), "tier", name, "kind", kind)
	return append(skips, Skip{Tier: name, Kind: kind, Reason: err.Error()}), append(errs, fmt.Errorf("tier %s: %w", name, err))
}

func classify(err error) string {
	switch {
	case errors.Is(err, ErrDeadline):
		return "timeout"
	case errors.Is(err, tensor.ErrOutOfMemory):
		return "oom"
	case errors.Is(err, errNaive):
		return "naive"
	case errors.Is(err, errChild):
		return "crash"
	}
	return "error"
}

// plan readies tier i for k: its search in a child process when it has
// one (or when a hang is injected), then its in-process Plan. After a
// search of the tier timed out on this device, the tier plans from its
// heuristics without one.
func (c *Chain) plan(i int, k Key) (*Plan, error) {
	t := c.tiers[i]
	name := t.Name()
	k = c.tierKey(i, k)
	if !c.searches(i) {
		return c.planWith(i, k, nil)
	}
	if c.timedOut[i] != nil {
		c.stats[i].unwaited++
		return c.planWith(i, k, nil)
	}
	req := SearchRequest{Tier: name, Key: k, Exhaustive: c.opt.Exhaustive}
	if c.faults.Conv3d[name] == FaultHang {
		req.Fault = FaultHang
	}
	ctx, stop := c.context()
	defer stop()
	if ctx.Err() != nil {
		return nil, fmt.Errorf("%w before the search of tier %s: %w", errCancelled, name, context.Cause(ctx))
	}
	c.log.Debug(fmt.Sprintf("conv3d: searching tier %s for %s in a child process (deadline %v)", name, k, c.opt.SearchDeadline), "tier", name)
	start := time.Now()
	res, err := searchInChild(ctx, req, c.opt.SearchDeadline)
	c.stats[i].searches++
	c.stats[i].searchTime += time.Since(start)
	if errors.Is(err, ErrDeadline) {
		c.searchTimedOut(i, k)
		plan, perr := c.planWith(i, k, nil)
		if perr != nil {
			return nil, fmt.Errorf("%w; without a search: %w", err, perr)
		}
		return plan, nil
	}
	if err != nil {
		return nil, err
	}
	return c.planWith(i, k, res)
}

// searchTimedOut turns tier i's searches off on this device, in this run
// and, through the choices file, later ones.
func (c *Chain) searchTimedOut(i int, k Key) {
	name := c.tiers[i].Name()
	rec := &SearchTimeout{Device: c.opt.Device, Tier: name, Key: k, Deadline: c.opt.SearchDeadline.Seconds(),
		Exhaustive: c.opt.Exhaustive, Updated: time.Now().UTC()}
	c.timedOut[i] = rec
	c.stats[i].timedOutHere = true
	kept := "; in this process only (faults are injected or choices are not kept)"
	if c.cachePath != "" {
		kept = "; remembered in " + c.cachePath + " (`framepack doctor --retry-searches` searches again)"
		if err := updateCache(c.cachePath, func(f *cacheFile) { f.SearchTimeouts[rec.id()] = rec }); err != nil && !c.warnedSave {
			c.warnedSave = true
			c.log.Warn("conv3d: cannot remember choices", "path", c.cachePath, "err", err)
		}
	}
	c.log.Warn(fmt.Sprintf("conv3d: tier %s's search of %s overran its %v deadline; no other shape waits on it: the tier plans from its heuristics without searching on %s%s",
		name, k, c.opt.SearchDeadline, c.opt.Device, kept), "tier", name)
}

// planWith is tier i's in-process Plan for k, with the search's result
// when there was one, and the chain's checks of the plan.
func (c *Chain) planWith(i int, k Key, searched *Plan) (*Plan, error) {
	t := c.tiers[i]
	name := t.Name()
	fault := c.faults.Conv3d[name]
	plan, err := t.Plan(k, searched)
	if err != nil {
		return nil, err
	}
	if plan == nil {
		plan = &Plan{}
	}
	if searched != nil {
		cp := *plan
		cp.Searched = true
		plan = &cp
	}
	if fault == FaultNaive {
		cp := *plan
		cp.Naive, cp.Algorithm = true, "naive solver (injected fault conv3d."+name+"=naive)"
		plan = &cp
	}
	if plan.Naive {
		what := plan.Algorithm
		if what == "" {
			what = "its plan"
		}
		return nil, fmt.Errorf("%w: %s", errNaive, what)
	}
	return plan, nil
}

// tierKey is the convolution tier i plans for k: a tier that is not a
// ChannelsLastTier runs a channels-last call on channels-first copies.
func (c *Chain) tierKey(i int, k Key) Key {
	if _, ok := c.tiers[i].(ChannelsLastTier); !ok && k.Layout == "ndhwc" {
		k.Layout = "ncdhw"
	}
	return k
}

// run runs tier i; a trial (the first run of a plan) waits for the device
// so that a failure shows here and not in a later op.
func (c *Chain) run(i int, plan *Plan, trial bool, cl *call) error {
	t := c.tiers[i]
	switch c.faults.Conv3d[t.Name()] {
	case FaultError:
		return fmt.Errorf("injected fault conv3d.%s=error", t.Name())
	case FaultOOM:
		return fmt.Errorf("injected fault conv3d.%s=oom: %w", t.Name(), tensor.ErrOutOfMemory)
	}
	start := time.Now()
	var err error
	if cerr := tensor.Catch(func() { err = cl.runOn(t, plan) }); cerr != nil {
		err = cerr
	}
	if err == nil && trial && cl.dst.Backend() != nil {
		if err = cl.dst.Backend().Sync(); err != nil && cl.p.Accumulate {
			// A fault found by the wait may have come after the sum began.
			err = fmt.Errorf("%w (%w)", err, ErrPartSum)
		}
	}
	if err != nil {
		return err
	}
	c.stats[i].convs++
	c.stats[i].runTime += time.Since(start)
	counter(t.Name()).Add(1)
	return nil
}

// tierConvs counts the convolutions each tier name ran in this process,
// over every chain.
var tierConvs sync.Map // tier name → *atomic.Int64

func counter(tier string) *atomic.Int64 {
	c, _ := tierConvs.LoadOrStore(tier, new(atomic.Int64))
	return c.(*atomic.Int64)
}

// TierConvs is the number of convolutions the tiers named tier have run
// in this process, over every chain (for tests and logs that ask which
// path ran).
func TierConvs(tier string) int64 { return counter(tier).Load() }

// searchesAgain: searches are on and r's tier has one, but r's plan was
// not searched (it was remembered while searches were off, or after the
// tier's search timed out, which is forgotten since).
func (c *Chain) searchesAgain(r *Choice) bool {
	i := slices.Index(c.Tiers(), r.Tier)
	return !c.opt.NoSearch && searchFor(r.Tier) != nil && (r.Plan == nil || !r.Plan.Searched) && (i < 0 || c.timedOut[i] == nil)
}

// remember records a choice and writes it to disk, unless a tier before it
// was skipped only for lack of memory: that depends on what else held the
// device, so a later run tries again.
func (c *Chain) remember(ch *Choice) {
	c.remembered[ch.Key.String()] = ch
	if c.cachePath == "" || slices.ContainsFunc(ch.Skips, func(s Skip) bool { return s.Kind == "oom" }) {
		return
	}
	if err := writeCache(c.cachePath, map[string]*Choice{ch.Key.String(): ch}); err != nil && !c.warnedSave {
		c.warnedSave = true
		c.log.Warn("conv3d: cannot remember choices", "path", c.cachePath, "err", err)
	}
}

// TierSummary is what one tier did in this run.
type TierSummary struct {
	Tier       string
	Convs      int
	RunTime    time.Duration
	Searches   int
	SearchTime time.Duration
	Skips      map[string]int // by kind
	// SearchTimedOut: a search of the tier timed out in this run, and
	// Unwaited shapes were planned without a search after it.
	SearchTimedOut bool
	Unwaited       int
}

// TimeoutString is the line for a tier whose search timed out in this run
// ("" otherwise): how many shapes did not wait, and the time its searches
// took in all.
func (s TierSummary) TimeoutString() string {
	if !s.SearchTimedOut {
		return ""
	}
	shapes := "shapes"
	if s.Unwaited == 1 {
		shapes = "shape"
	}
	return fmt.Sprintf("conv3d: tier %s search timed out once; %d other %s did not wait (%.1f s in all)", s.Tier, s.Unwaited, shapes, s.SearchTime.Seconds())
}

func (s TierSummary) String() string {
	line := fmt.Sprintf("conv3d tier %s: %d convolutions in %.2f s", s.Tier, s.Convs, s.RunTime.Seconds())
	if s.Searches > 0 {
		line += fmt.Sprintf(", %d searches in %.2f s", s.Searches, s.SearchTime.Seconds())
	}
	n := 0
	for _, v := range s.Skips {
		n += v
	}
	if n > 0 {
		var kinds []string
		for _, k := range slices.Sorted(maps.Keys(s.Skips)) {
			kinds = append(kinds, fmt.Sprintf("%d %s", s.Skips[k], k))
		}
		line += fmt.Sprintf(", skipped %d times (%s)", n, strings.Join(kinds, ", "))
	}
	return line
}

// Summary reports each tier's work so far, in chain order.
func (c *Chain) Summary() []TierSummary {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]TierSummary, len(c.tiers))
	for i, t := range c.tiers {
		s := c.stats[i]
		out[i] = TierSummary{Tier: t.Name(), Convs: s.convs, RunTime: s.runTime, Searches: s.searches, SearchTime: s.searchTime, Skips: maps.Clone(s.skips),
			SearchTimedOut: s.timedOutHere, Unwaited: s.unwaited}
	}
	return out
}

// LogSummary logs one line per tier, and one for each tier whose search
// timed out; call it at the end of a run.
func (c *Chain) LogSummary() {
	for _, s := range c.Summary() {
		c.log.Info(s.String(), "tier", s.Tier, "convs", s.Convs, "seconds", s.RunTime.Seconds())
		if line := s.TimeoutString(); line != "" {
			c.log.Info(line, "tier", s.Tier, "unwaited", s.Unwaited, "search_seconds", s.SearchTime.Seconds())
		}
	}
}
