// Package gpu is framepack's GPU backend: every tensor.Backend kernel on an
// AMD (HIP) or NVIDIA (CUDA) device through package hip, with GEMMs through
// rocBLAS/cuBLAS (package rocblas) when the library is present and our own
// kernels (package kernels, compiled at run time and cached on disk) for
// everything else. Device memory comes from a stream-ordered pool under a
// hard cap; all work is queued on one stream.
//
// Attention is one fused kernel that never holds an Lq×Lk matrix: on
// NVIDIA cuDNN's fused attention where it takes the call, else on NVIDIA
// sm_80+ with bf16/f16 and head dim 64 or 128 a tensor-core kernel
// (mma.sync), f32 at head dim 128 on a register-tiled kernel (the BLAS
// in chunks for other f32 calls), elsewhere a portable one for any head
// dim up to 512 and every dtype (FRAMEPACK_ATTN=kernel skips cuDNN,
// =generic forces the portable kernel). Kernels compile on first
// use of their module and are cached under os.UserCacheDir()/framepack/kernels.
package gpu

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/framepack-go/framepack/hip"
	"github.com/framepack-go/framepack/internal/envconfig"
	"github.com/framepack-go/framepack/miopen"
	"github.com/framepack-go/framepack/rocblas"
	"github.com/framepack-go/framepack/tensor"
)

// Options configure New.
type Options struct {
	// Device is the GPU ordinal.
	Device int
	// Limit is the hard cap on device memory this backend may hold, in
	// bytes; 0 means the free memory at start less a margin (5% of the
	// device, at least 256 MiB).
	Limit int64
	// CacheDir holds compiled kernels; "" means
	// os.UserCacheDir()/framepack/kernels. "-" disables the disk cache.
	CacheDir string
	// NoBLAS skips rocBLAS/cuBLAS and runs GEMMs on our own kernel.
	NoBLAS bool
	// OwnMath compiles the kernels with framepack's own transcendental
	// functions (the AMD code path) also on NVIDIA, to test them there. The
	// precompiled kernels always use them.
	OwnMath bool
	// RuntimeCompile compiles every kernel module with hiprtc / NVRTC even
	// where the binary ships it precompiled (also FRAMEPACK_KERNELS=compile).
	RuntimeCompile bool
	// GenericAttention skips cuDNN, the tensor-core attention kernels, the
	// tiled f32 kernel and the f32 attention through the BLAS (also
	// FRAMEPACK_ATTN=generic).
	GenericAttention bool
	// NoFusedAttention skips cuDNN's fused attention: framepack's own
	// kernels run every attention (also FRAMEPACK_ATTN=kernel).
	NoFusedAttention bool
	// ConvAPI is the cuDNN API the conv3d chain's optimized tier plans
	// with: "legacy", "graph" or "" (auto: the graph API, the legacy one
	// where the graph has no engine; also FRAMEPACK_CUDNN_CONV).
	ConvAPI string
	// Lt runs Linear layers (bf16/f16, bias fused in the epilogue) through
	// cuBLASLt / hipBLASLt when the library loads (also FRAMEPACK_BLAS=lt);
	// by default where the architecture's table says (BLASFor: RDNA3,
	// RDNA3.5, RDNA4), and not elsewhere until it measures faster than the
	// plain GEMM. NoLt keeps the plain BLAS everywhere (also
	// FRAMEPACK_BLAS=plain).
	Lt, NoLt bool
	// Log receives one-line notes (library choices, compile times); nil
	// means slog.Default().
	Log *slog.Logger
}

// Backend implements tensor.Backend on one GPU.
type Backend struct {
	dev    *hip.Device
	stream hip.Stream
	opts   Options
	log    *slog.Logger
	alloc  allocator
	stage  staging
	idle   idleMeter

	modMu     sync.Mutex
	mods      map[string]*module
	fnMu      sync.Mutex
	fns       map[string]*hip.Function
	bigShared map[string]int // kernels opted in to more than 48 KiB of shared memory

	blas    *rocblas.Handle
	blasErr error
	blasMu  sync.Mutex
	lt      *rocblas.LtHandle // cuBLASLt / hipBLASLt (under blasMu): Linear with Options.Lt, FP8 compute
	ltWork  *Buffer
	// ltRefusedOnce logs the first Linear the Lt library refused.
	ltRefusedOnce sync.Once
	fp8Once       sync.Once
	fp8           bool // NativeFP8

	// cuDNN for fused attention, opened on first use (attention.go).
	dnn        *miopen.Handle
	dnnErr     error
	dnnMu      sync.Mutex
	dnnRefused map[miopen.AttnDesc]bool
	fusedCalls atomic.Int64
	// blasAttnCalls, blasAttnChunks count the f32 attention calls run
	// through the BLAS and their query chunks.
	blasAttnCalls, blasAttnChunks atomic.Int64
	// tiledF32Calls counts the f32 attention calls run on attn_f32_128.
	tiledF32Calls atomic.Int64
	// FP8 attention (attention_fp8.go): P's scale constants, calls run.
	fp8Consts    *Buffer
	fp8AttnCalls atomic.Int64

	errFlag uintptr // 4 bytes of device memory for kernels that report bad input
	errBuf  *Buffer // errFlag's allocation

	packs *packCache // the conv3d tier's kept packed weights (convpack.go)
}

var _ tensor.Backend = (*Backend)(nil)

// New opens the GPU and returns a backend on it. Without a usable GPU the
// error wraps hip.ErrNoGPU and says why.
func New(o Options) (*Backend, error) {
	// The environment's settings join the options once, here: no kernel
	// launch reads the environment.
	env := envconfig.Read()
	o.RuntimeCompile = o.RuntimeCompile || env.RuntimeCompile
	o.GenericAttention = o.GenericAttention || env.GenericAttention
	o.NoFusedAttention = o.NoFusedAttention || env.KernelAttention
	o.Lt = o.Lt || env.Lt
	o.NoLt = (o.NoLt || env.PlainBLAS) && !o.Lt
	if o.ConvAPI == "" {
		o.ConvAPI = env.CUDNNConv
		if _, err := miopen.ParseConvAPI(o.ConvAPI); err != nil {
			return nil, fmt.Errorf("gpu: %s: %w", envconfig.CUDNNConv, err)
		}
	} else if _, err := miopen.ParseConvAPI(o.ConvAPI); err != nil {
		return nil, fmt.Errorf("gpu: %w", err)
	}
	d, err := hip.Open(o.Device)
	if err != nil {
		return nil, err
	}
	lg := o.Log
	if lg == nil {
		lg = slog.Default()
	}
	b := &Backend{dev: d, opts: o, log: lg, mods: map[string]*module{}, fns: map[string]*hip.Function{},
		bigShared: map[string]int{}, packs: newPackCache()}
	if b.stream, err = d.NewStream(); err != nil {
		return nil, fmt.Errorf("gpu: %w", err)
	}
	if err := b.alloc.init(d, b.stream, o.Limit); err != nil {
		return nil, err
	}
	b.stage.init(d, b.stream)
	b.idle.init(d, b.stream)
	if p, err := b.alloc.alloc(4); err == nil {
		b.errFlag, b.errBuf = p.ptr, p
	} else {
		return nil, err
	}
	if !o.NoBLAS {
		b.openBLAS()
		if c := BLASFor(d.Arch); !o.Lt && !o.NoLt && c.Lt {
			b.log.Info("gpu: " + c.Why)
			b.opts.Lt = true
		}
		if b.opts.Lt {
			b.openLt()
		}
	}
	return b, nil
}

// openLt opens cuBLASLt / hipBLASLt with its workspace; without it Linear
// and FP8 compute stay on the plain GEMM, with a log line saying why.
func (b *Backend) openLt() {
	lib, err := rocblas.OpenLt(b.dev.Vendor) // hip's, rocblas' and miopen's Vendor are dynlib's
	if err != nil {
		b.log.Info("gpu: no Lt library, Linear runs on the plain GEMM", "why", err)
		return
	}
	ws, err := b.alloc.alloc(rocblas.LtWorkspace)
	if err != nil {
		b.log.Info("gpu: no memory for the Lt workspace, Linear runs on the plain GEMM", "why", err)
		return
	}
	unbind, err := b.dev.Bind()
	if err != nil {
		b.alloc.free(ws)
		return
	}
	defer unbind()
	h, err := lib.NewHandle(uintptr(b.stream), ws.ptr, rocblas.LtWorkspace)
	if err != nil {
		b.alloc.free(ws)
		b.log.Info("gpu: Lt handle failed, Linear runs on the plain GEMM", "why", err)
		return
	}
	b.lt, b.ltWork = h, ws
	b.log.Info("gpu: Lt GEMMs through " + lib.String())
}

func (b *Backend) openBLAS() {
	lib, err := rocblas.OpenVendor(b.dev.Vendor)
	if err != nil {
		b.blasErr = err
		b.log.Info("gpu: no vendor BLAS, GEMMs run on framepack's own kernel", "why", err)
		return
	}
	unbind, err := b.dev.Bind()
	if err != nil {
		b.blasErr = err
		return
	}
	defer unbind()
	h, err := lib.NewHandle(uintptr(b.stream))
	if err != nil {
		b.blasErr = err
		b.log.Info("gpu: vendor BLAS handle failed, GEMMs run on framepack's own kernel", "why", err)
		return
	}
	b.blas = h
}

// Name is "gpu" with the device's architecture.
func (b *Backend) Name() string { return "gpu(" + b.dev.Arch + ")" }

// Device is the opened GPU.
func (b *Backend) Device() *hip.Device { return b.dev }

// Stream is the stream all of the backend's work is queued on.
func (b *Backend) Stream() hip.Stream { return b.stream }

// BLAS describes the GEMM path: the vendor library, or why it is absent.
func (b *Backend) BLAS() string {
	if b.blas != nil {
		return b.blas.Lib().String()
	}
	if b.blasErr != nil {
		return "framepack GEMM kernel (" + b.blasErr.Error() + ")"
	}
	return "framepack GEMM kernel"
}

// Sync waits for all queued work.
func (b *Backend) Sync() error {
	b.idle.waiting()
	if err := b.dev.Sync(b.stream); err != nil {
		return fmt.Errorf("gpu: %w", err)
	}
	return nil
}

// Close frees the backend's resources. Tensors still allocated become
// invalid.
func (b *Backend) Close() error {
	err := b.Sync()
	b.packs.Clear()
	if b.blas != nil {
		b.blas.Close()
	}
	if b.lt != nil {
		b.lt.Close()
		b.alloc.free(b.ltWork)
	}
	if b.dnn != nil {
		b.dnn.Close()
	}
	if b.fp8Consts != nil {
		b.alloc.free(b.fp8Consts)
	}
	b.stage.close()
	b.idle.close()
	// Every allocation goes back before the trim: the device's pool is
	// shared by the process's backends, and a block held by a closed one
	// would stay reserved against the others' caps.
	if b.errBuf != nil {
		b.alloc.free(b.errBuf)
		b.errBuf, b.errFlag = nil, 0
	}
	b.alloc.trim()
	b.dev.DestroyStream(b.stream)
	return err
}

// Buffer is device memory owned by the backend: an allocation, or a view
// of part of one.
type Buffer struct {
	ptr   uintptr
	n     int64
	size  int64 // accounted size (rounded up)
	freed atomic.Bool
	// root is the allocation a view is part of; nil for an allocation.
	root *Buffer
	// gen counts the uploads into an allocation: a copy derived from it
	// (the conv3d tier's packed weights) is of one generation.
	gen atomic.Uint64
	// packed is set once the conv3d tier keeps, or has asked to keep, a
	// packed copy of part of the allocation: its free then drops them.
	packed atomic.Bool
}

// allocation is the allocation b is or is part of, and b's byte offset in it.
func (b *Buffer) allocation() (*Buffer, int64) {
	if b.root == nil {
		return b, 0
	}
	return b.root, int64(b.ptr - b.root.ptr)
}

// uploaded notes a write from the host into b.
func (b *Buffer) uploaded() {
	r, _ := b.allocation()
	r.gen.Add(1)
}

// Bytes is the buffer's size.
func (b *Buffer) Bytes() int64 { return b.n }

// Ptr is the device address (for vendor libraries taking device pointers).
func (b *Buffer) Ptr() uintptr { return b.ptr }

// Ptr is the device address of a tensor on a GPU backend.
func Ptr(t *tensor.Tensor) uintptr {
	if t == nil {
		return 0
	}
	if db, ok := t.Buffer().(*Buffer); ok {
		return db.ptr
	}
	return 0
}

// Alloc returns n bytes of device memory under the cap.
func (b *Backend) Alloc(n int64) (tensor.Buffer, error) { return b.alloc.alloc(n) }

// Free returns a buffer to the pool (stream-ordered: work already queued
// that reads it completes first).
func (b *Backend) Free(buf tensor.Buffer) {
	if db, ok := buf.(*Buffer); ok {
		b.alloc.free(db)
		if db.packed.Load() {
			b.dropPacks(db)
		}
	}
}

// Stats is the backend's memory accounting.
type Stats struct {
	Limit    int64 // the hard cap
	InUse    int64 // bytes held by live buffers
	Peak     int64 // highest InUse since start or ResetPeak
	Reserved int64 // bytes the pool holds from the driver (live + cached), when known
	Allocs   int64 // live buffers
}

func (s Stats) String() string {
	return fmt.Sprintf("in use %.2f GiB (peak %.2f), pool %.2f GiB, cap %.2f GiB, %d buffers", gib(s.InUse),
		gib(s.Peak), gib(s.Reserved), gib(s.Limit), s.Allocs)
}

func gib(n int64) float64 { return float64(n) / (1 << 30) }

// Stats reports current and peak use.
func (b *Backend) Stats() Stats { return b.alloc.stats() }

// ResetPeak starts a new peak measurement.
func (b *Backend) ResetPeak() { b.alloc.resetPeak() }

// Trim lets go of the conv3d tier's kept weight copies, waits for queued
// work and returns the pool's cached free memory to the driver.
func (b *Backend) Trim() error {
	b.packs.Clear()
	return b.alloc.trim()
}

// ptr checks that t lives on this backend and returns its address.
func (b *Backend) ptr(t *tensor.Tensor) (uintptr, error) {
	if t == nil {
		return 0, nil
	}
	db, ok := t.Buffer().(*Buffer)
	if !ok {
		return 0, fmt.Errorf("gpu: %v is not in device memory", t)
	}
	if db.freed.Load() {
		return 0, fmt.Errorf("gpu: %v: use of a freed buffer", t)
	}
	if db.n < t.Bytes() {
		return 0, fmt.Errorf("gpu: %v: buffer holds %d bytes, need %d", t, db.n, t.Bytes())
	}
	return db.ptr, nil
}

// Upload copies host bytes into dst at byte offset off. It returns once the
// bytes are staged; the copy itself is ordered on the stream.
func (b *Backend) Upload(dst tensor.Buffer, off int64, src []byte) error {
	db, ok := dst.(*Buffer)
	if !ok {
		return fmt.Errorf("gpu: upload into a %T", dst)
	}
	if off < 0 || off+int64(len(src)) > db.n {
		return fmt.Errorf("gpu: upload of %d bytes at %d into %d", len(src), off, db.n)
	}
	db.uploaded()
	b.idle.queued()
	return b.stage.upload(db.ptr+uintptr(off), src)
}

// Download copies device bytes at byte offset off into dst, after the work
// queued before it.
func (b *Backend) Download(dst []byte, src tensor.Buffer, off int64) error {
	db, ok := src.(*Buffer)
	if !ok {
		return fmt.Errorf("gpu: download from a %T", src)
	}
	if off < 0 || off+int64(len(dst)) > db.n {
		return fmt.Errorf("gpu: download of %d bytes at %d from %d", len(dst), off, db.n)
	}
	b.idle.queued()
	return b.stage.download(dst, db.ptr+uintptr(off), b.idle.waiting)
}

// defaultCacheDir is os.UserCacheDir()/framepack/kernels.
func defaultCacheDir() string {
	dir, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(dir, "framepack", "kernels")
}

func unsupported(op string, dt tensor.DType) error {
	return fmt.Errorf("gpu: %s on %s: %w", op, dt, tensor.ErrUnsupported)
}
