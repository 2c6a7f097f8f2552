// Package cpu is framepack's CPU backend: every tensor.Backend kernel in Go,
// parallel over cores, with GEMMs through OpenBLAS when the library is
// present at run time and through gonum otherwise. It is the reference the
// other backends are tested against, so every kernel is written for
// accuracy first: f16 and bf16 are widened to f32, computed, and rounded
// back once (or where the PyTorch reference rounds, as RMSNorm does);
// reductions and normalisation statistics accumulate in float64.
package cpu

import (
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/framepack-go/framepack/tensor"
)

// Backend runs kernels on the host. Its buffers are *tensor.HostBuffer, so
// host tensors are used without a copy.
type Backend struct {
	threads int
	blas    blasImpl
	pool    scratchPool
}

// Options configure New.
type Options struct {
	// Threads is the number of goroutines kernels split their work over;
	// 0 means runtime.NumCPU().
	Threads int
	// BLAS chooses the GEMM library: "" or "auto" (OpenBLAS when it
	// loads, else gonum; FRAMEPACK_BLAS=gonum in the environment forces
	// gonum), "openblas" (an error when it does not load) or "gonum".
	BLAS string
}

// New returns a CPU backend using every core and the best BLAS present.
func New() *Backend {
	be, err := NewWithOptions(Options{})
	if err != nil { // cannot happen: the automatic choice always has gonum
		panic(err)
	}
	return be
}

// NewWithOptions returns a CPU backend configured by o.
func NewWithOptions(o Options) (*Backend, error) {
	n := o.Threads
	if n <= 0 {
		n = runtime.NumCPU()
	}
	bl, err := chooseBLAS(o.BLAS)
	if err != nil {
		return nil, err
	}
	return &Backend{threads: n, blas: bl}, nil
}

var (
	_ tensor.Backend    = (*Backend)(nil)
	_ tensor.HostBacked = (*Backend)(nil)
)

func (be *Backend) Name() string { return "cpu" }

// HostBacked reports that buffers are *tensor.HostBuffer.
func (be *Backend) HostBacked() bool { return true }

// BLAS describes the GEMM library in use, e.g. "openblas 0.3.21
// (libopenblas.so.0)", or "gonum (why OpenBLAS is not in use)".
func (be *Backend) BLAS() string { return be.blas.name() }

// Threads is the number of goroutines kernels use.
func (be *Backend) Threads() int { return be.threads }

func (be *Backend) Alloc(n int64) (buf tensor.Buffer, err error) {
	if n < 0 {
		return nil, fmt.Errorf("cpu: alloc of %d bytes: %w", n, tensor.ErrOutOfMemory)
	}
	defer func() { // a size the runtime cannot make panics in make
		if r := recover(); r != nil {
			buf, err = nil, fmt.Errorf("cpu: alloc of %d bytes: %v: %w", n, r, tensor.ErrOutOfMemory)
		}
	}()
	return tensor.NewHostBuffer(n), nil
}

// Free drops the buffer; the garbage collector reclaims it.
func (be *Backend) Free(tensor.Buffer) {}

func (be *Backend) Upload(dst tensor.Buffer, off int64, src []byte) error {
	d, err := hostRange("upload", "into", dst, off, len(src))
	if err == nil {
		copy(d, src)
	}
	return err
}

func (be *Backend) Download(dst []byte, src tensor.Buffer, off int64) error {
	d, err := hostRange("download", "from", src, off, len(dst))
	if err == nil {
		copy(dst, d)
	}
	return err
}

// hostRange is bytes [off, off+n) of a host buffer, for op (upload into,
// download from) to copy.
func hostRange(op, prep string, b tensor.Buffer, off int64, n int) ([]byte, error) {
	hb, ok := b.(*tensor.HostBuffer)
	if !ok {
		return nil, fmt.Errorf("cpu: %s %s a %T", op, prep, b)
	}
	d := hb.Data()
	if off < 0 || off+int64(n) > int64(len(d)) {
		return nil, fmt.Errorf("cpu: %s of %d bytes at %d %s %d", op, n, off, prep, len(d))
	}
	return d[off : off+int64(n)], nil
}

func (be *Backend) Sync() error { return nil }

// ---- storage access ----

// raw is a tensor's storage as bytes, checked to be host memory that holds
// the whole tensor.
func raw(t *tensor.Tensor) ([]byte, error) {
	hb, ok := t.Buffer().(*tensor.HostBuffer)
	if !ok {
		return nil, fmt.Errorf("cpu: %v is not in host memory", t)
	}
	d := hb.Data()
	if int64(len(d)) < t.Bytes() {
		return nil, fmt.Errorf("cpu: %v: buffer holds %d bytes, need %d", t, len(d), t.Bytes())
	}
	return d[:t.Bytes()], nil
}

// rawAll is each tensor's host bytes (see raw).
func rawAll(ts ...*tensor.Tensor) ([][]byte, error) {
	out := make([][]byte, len(ts))
	for i, t := range ts {
		b, err := raw(t)
		if err != nil {
			return nil, err
		}
		out[i] = b
	}
	return out, nil
}

func isHalf(dt tensor.DType) bool { return dt == tensor.F16 || dt == tensor.BF16 }

func isCompute(dt tensor.DType) bool { return dt == tensor.F32 || isHalf(dt) }

func unsupported(op string, dt tensor.DType) error {
	return fmt.Errorf("cpu: %s on %s: %w", op, dt, tensor.ErrUnsupported)
}

// temps hands out the f32 scratch of one kernel call (widened operands,
// half-precision results before rounding, im2col buffers) from the
// backend's pool, and gives it all back when the kernel returns.
type temps struct {
	be   *Backend
	bufs [][]float32
}

func (be *Backend) temps() *temps { return &temps{be: be} }

// alloc returns n floats of undefined contents.
func (tm *temps) alloc(n int) []float32 {
	b := tm.be.pool.get(n)
	tm.bufs = append(tm.bufs, b)
	return b
}

func (tm *temps) release() {
	for _, b := range tm.bufs {
		tm.be.pool.put(b)
	}
	tm.bufs = nil
}

// widen reads a compute-dtype tensor as f32: its own storage for f32, a
// converted copy for f16/bf16 (nil for a nil tensor).
func (tm *temps) widen(t *tensor.Tensor) ([]float32, error) {
	if t == nil {
		return nil, nil
	}
	b, err := raw(t)
	if err != nil {
		return nil, err
	}
	switch t.DType() {
	case tensor.F32:
		return tensor.ViewAs[float32](b), nil
	case tensor.F16, tensor.BF16:
		src := tensor.ViewAs[uint16](b)
		out := tm.alloc(len(src))
		tm.be.widenInto(out, src, t.DType())
		return out, nil
	}
	return nil, unsupported("read", t.DType())
}

// widenAll widens each tensor in turn (see widen).
func (tm *temps) widenAll(ts ...*tensor.Tensor) ([][]float32, error) {
	out := make([][]float32, len(ts))
	for i, t := range ts {
		f, err := tm.widen(t)
		if err != nil {
			return nil, err
		}
		out[i] = f
	}
	return out, nil
}

// inF32 runs a kernel on f32 data: ins read as f32 (see widen; a nil input
// stays nil) and dst's values computed into out, narrowed into dst after
// (see output). The scratch, and what the kernel takes from tm, is released
// when it returns.
func (be *Backend) inF32(dst *tensor.Tensor, ins []*tensor.Tensor, kernel func(tm *temps, in [][]float32, out []float32)) error {
	tm := be.temps()
	defer tm.release()
	in, err := tm.widenAll(ins...)
	if err != nil {
		return err
	}
	out, commit, err := tm.output(dst)
	if err != nil {
		return err
	}
	kernel(tm, in, out)
	commit()
	return nil
}

func (be *Backend) widenInto(dst []float32, src []uint16, dt tensor.DType) {
	convertInto(be, dst, src, dt, tensor.WidenF16, tensor.WidenBF16)
}

// convertInto converts src into dst in parallel chunks with f16 or bf16,
// as dt says.
func convertInto[D, S any](be *Backend, dst []D, src []S, dt tensor.DType, f16, bf16 func([]D, []S)) {
	f := bf16
	if dt == tensor.F16 {
		f = f16
	}
	be.parallel(len(dst), 1<<14, func(lo, hi int) { f(dst[lo:hi], src[lo:hi]) })
}

// output gives f32 storage to compute a tensor's values into and a commit
// that narrows them into the tensor (a no-op for f32). The kernel must
// write every value.
func (tm *temps) output(t *tensor.Tensor) ([]float32, func(), error) {
	b, err := raw(t)
	if err != nil {
		return nil, nil, err
	}
	switch t.DType() {
	case tensor.F32:
		return tensor.ViewAs[float32](b), func() {}, nil
	case tensor.F16, tensor.BF16:
		dst := tensor.ViewAs[uint16](b)
		tmp := tm.alloc(len(dst))
		dt := t.DType()
		return tmp, func() { tm.be.narrowInto(dst, tmp, dt) }, nil
	}
	return nil, nil, unsupported("write", t.DType())
}

// scratchPool keeps recently used scratch buffers so that kernels do not
// allocate (and the runtime zero) large temporaries on every call. It holds
// at most scratchKeep bytes between calls.
type scratchPool struct {
	mu   sync.Mutex
	free [][]float32
	held int
}

const scratchKeep = 256 << 20

// get returns the smallest free buffer that holds n floats without wasting
// more than half of it, or a new one.
func (p *scratchPool) get(n int) []float32 {
	p.mu.Lock()
	best := -1
	for i, b := range p.free {
		if c := cap(b); c >= n && c <= 2*n+1024 && (best < 0 || c < cap(p.free[best])) {
			best = i
		}
	}
	if best >= 0 {
		b := p.free[best]
		p.free = append(p.free[:best], p.free[best+1:]...)
		p.held -= 4 * cap(b)
		p.mu.Unlock()
		b = b[:n]
		if poisonScratch {
			poison(b)
		}
		return b
	}
	p.mu.Unlock()
	b := make([]float32, n)
	if poisonScratch {
		poison(b)
	}
	return b
}

// poisonScratch makes tests fill scratch with NaN, so a kernel that reads
// scratch it did not write fails instead of seeing zeros by luck.
var poisonScratch = false

func poison(b []float32) {
	nan := float32(math.NaN())
	for i := range b {
		b[i] = nan
	}
}

func (p *scratchPool) put(b []float32) {
	if cap(b) < 1<<12 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.free = append(p.free, b[:0])
	p.held += 4 * cap(b)
	for p.held > scratchKeep { // drop the oldest
		p.held -= 4 * cap(p.free[0])
		p.free = p.free[1:]
	}
}

func (be *Backend) narrowInto(dst []uint16, src []float32, dt tensor.DType) {
	convertInto(be, dst, src, dt, tensor.NarrowF16, tensor.NarrowBF16)
}

// ---- parallelism ----

// parallel splits [0, n) into contiguous ranges of at least grain items and
// runs fn on them over the backend's threads.
func (be *Backend) parallel(n, grain int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	grain = max(grain, 1)
	parts := min(be.threads, (n+grain-1)/grain)
	if parts <= 1 {
		fn(0, n)
		return
	}
	be.parallelParts(n, parts, fn)
}

// eachRow runs fn on every row of [0, n), rows of d elements, in parallel.
func (be *Backend) eachRow(n, d int, fn func(r int)) {
	be.parallel(n, max(1, 4096/max(d, 1)), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			fn(r)
		}
	})
}

// parallelParts splits [0, n) into exactly parts ranges run concurrently.
func (be *Backend) parallelParts(n, parts int, fn func(lo, hi int)) {
	var wg sync.WaitGroup
	for p := 0; p < parts; p++ {
		lo, hi := n*p/parts, n*(p+1)/parts
		if lo == hi {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(lo, hi)
		}()
	}
	wg.Wait()
}

// tasks runs fn(i) for every i in [0, n) over the backend's threads, handing
// out items one at a time (for uneven work such as attention rows).
func (be *Backend) tasks(n int, fn func(worker, i int)) {
	workers := min(be.threads, n)
	if workers <= 1 {
		for i := 0; i < n; i++ {
			fn(0, i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				fn(w, i)
			}
		}()
	}
	wg.Wait()
}
