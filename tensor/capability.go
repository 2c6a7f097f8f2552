package tensor

import "time"

// Backends are layered: a memory budget over a conv3d chain over a device,
// say. Optional capabilities — fused kernels, buffer views, pinned uploads,
// convolving through a padding — live on whichever layer has them, and As
// finds them the way errors.As finds an error in a chain, so no wrapper has
// to forward methods it does not change.

// Wrapper is a backend layered over another.
type Wrapper interface{ Unwrap() Backend }

// As returns the first backend in be's chain of wrappers (be itself, then
// what Unwrap returns, and so on) that implements T.
func As[T any](be Backend) (T, bool) {
	for be != nil {
		if t, ok := be.(T); ok {
			return t, true
		}
		w, ok := be.(Wrapper)
		if !ok {
			break
		}
		be = w.Unwrap()
	}
	var zero T
	return zero, false
}

// FusedKernels are elementwise kernels fused around the transformer's GEMMs
// (backend/gpu has them; backend/cpu has them as the reference). The Scope
// methods of the same names run them when the backend has them and op by op
// otherwise.
type FusedKernels interface {
	// LayerNormModulate: dst = LayerNorm(x)·(1 + scale) + shift, x (B, L, D),
	// shift and scale B·D values.
	LayerNormModulate(dst, x, shift, scale *Tensor, eps float32) error
	// GatedAdd: dst = x + (y + bias)·gate, x and y (B, L, D), bias (D) or
	// nil, gate B·D values.
	GatedAdd(dst, x, y, bias, gate *Tensor) error
	// QKNormRoPE writes the q, k, v columns of src (B, Ls, S) at cols, plus
	// bias (S) or nil, to rows [rowOff, rowOff+Ls) of q, k, v (B, Lj, H,
	// Dh), q and k through the per-head RMSNorms and, when cos is set, RoPE
	// with rows [rowOff, rowOff+Ls) of cos, sin (R, Lj, Dh), R 1 or B.
	QKNormRoPE(q, k, v, src, bias *Tensor, rowOff int, cols [3]int, wq, wk, cos, sin *Tensor, eps float32) error
	// ActivateColumns applies op to columns [srcCol, srcCol+cols) of src
	// (plus bias, one value a column of src, or nil) into columns
	// [dstCol, dstCol+cols) of dst; dst and src have the same rows.
	ActivateColumns(op UnaryOp, dst *Tensor, dstCol int, src, bias *Tensor, srcCol, cols int) error
	// ChannelsLastRMSNorm normalises x (B, P..., C) over its last axis, the
	// channels, at every position — weight w (C) or nil — then SiLU when
	// silu, rounding where RMSNorm and SiLU round. dst (B, ..., C) may have
	// more positions a batch than x: the result fills each batch's last
	// ones and the first are left as they are.
	ChannelsLastRMSNorm(dst, x, w *Tensor, eps float32, silu bool) error
}

// ChannelsLastConv convolves channels-last tensors: x (B, T, H, W, Cin)
// into dst (B, To, Ho, Wo, Cout), w (Cout, Cin, kT, kH, kW) as checkpoints
// hold it, or packed (Cout, kT, kH, kW, Cin) with p.WeightLast (the vendor
// libraries' fast layout, with no repacking of the activations); with
// p.Accumulate, added to what dst holds.
type ChannelsLastConv interface {
	Conv3dLast(dst, x, w, bias *Tensor, p ConvParams) error
}

// PaddedConv convolves the input a Padding makes from x without making it
// (the conv3d chain packs through the padding).
type PaddedConv interface {
	Conv3dPadded(dst, x, w, bias *Tensor, p ConvParams, pad Padding) error
}

// Viewer makes a buffer of part of another without a copy.
type Viewer interface {
	View(buf Buffer, off, n int64) (Buffer, error)
}

// PinnedUploader has page-locked host memory and uploads that overlap
// compute: what weight streaming needs.
type PinnedUploader interface {
	AllocPinned(n int64) (*HostBuffer, error)
	FreePinned(*HostBuffer) error
	UploadAsync(dst Buffer, off int64, src []byte) (wait func() error, err error)
}

// QueuedUploader copies out of page-locked memory on a copy stream and
// tells the host when each copy is done, so that a staging buffer is
// refilled as soon as its copy completes while later copies still run:
// what loading weights at disk speed needs.
type QueuedUploader interface {
	PinnedUploader
	// UploadQueued queues a copy of src into dst at byte offset off,
	// ordered after the work queued so far on the compute stream (dst may
	// be a buffer just allocated in stream order). done blocks until the
	// copy has completed; it may be called several times and from any
	// goroutine. src must stay unchanged until then, and so must dst's
	// allocation. Memory not from AllocPinned is uploaded before
	// UploadQueued returns.
	UploadQueued(dst Buffer, off int64, src []byte) (done func() error, err error)
}

// Trimmer returns a backend's pooled memory to the device.
type Trimmer interface{ Trim() error }

// Budgeted is a layer with a memory budget (what memory.Budgeted makes):
// Available is the room it still has free, in bytes.
type Budgeted interface{ Available() int64 }

// QueueIdler is a device backend that measures how long its queue stood
// empty because the host waited on it: from the end of the work a host
// wait (a sync, a download) waited for to the next work queued. The figure
// grows for the backend's life; callers take differences.
type QueueIdler interface {
	QueueIdle() (time.Duration, error)
}

// QueueIdle is be's QueueIdler figure, and false where no layer measures
// it (or the measurement failed).
func QueueIdle(be Backend) (time.Duration, bool) {
	q, ok := As[QueueIdler](be)
	if !ok {
		return 0, false
	}
	d, err := q.QueueIdle()
	return d, err == nil
}

// Trim trims the first layer of be that pools memory; nil when none does.
func Trim(be Backend) error {
	if t, ok := As[Trimmer](be); ok {
		return t.Trim()
	}
	return nil
}

// Op is one kernel launch as a Hook sees it.
type Op struct {
	// Class names the kernel for a profile: the op ("matmul", "unary
	// silu", "fused gated_add"), convolutions with their channels and
	// kernel ("conv3d 128→128 k3").
	Class string
	// Flops is the arithmetic of the ops that count it (GEMMs,
	// convolutions, attention), else 0.
	Flops float64
}

// Hook runs around every kernel a Scope launches, as ggml's scheduler calls
// its eval callback: it must call run once and return run's error (a
// profiler times it).
type Hook func(op Op, run func() error) error

// Settings travel with a backend into every Scope made on it (and its
// children), so that model code that opens its own scopes honours them.
type Settings struct {
	// Hook, when set, runs around every kernel.
	Hook Hook
	// OpByOp leaves the fused kernels unused: the Scope runs their op-by-op
	// fallbacks, the fused kernels' reference.
	OpByOp bool
}

// WithSettings returns be carrying st. Put it under a memory budget (the
// budget wraps it) so that tensors keep one backend identity.
func WithSettings(be Backend, st Settings) Backend { return &settled{Backend: be, st: st} }

type settled struct {
	Backend
	st Settings
}

func (s *settled) Unwrap() Backend    { return s.Backend }
func (s *settled) settings() Settings { return s.st }

type settingsCarrier interface{ settings() Settings }

func settingsOf(be Backend) Settings {
	if c, ok := As[settingsCarrier](be); ok {
		return c.settings()
	}
	return Settings{}
}

// FP8Compute runs Linears in FP8 on both sides: the input quantized per row
// (a token) to E4M3 with scale amax/448, the weight per output channel, the
// products of codes summed in f32 and scaled by both scales. backend/cpu is
// its reference; backend/gpu runs it on FP8 tensor cores where the GPU and
// its Lt library have them.
type FP8Compute interface {
	// QuantizeRowsFP8: q (M, K) F8E4M3 and scale (M) F32 of x (M, K) in a
	// compute dtype, as QuantizeF8E4M3Rows does.
	QuantizeRowsFP8(q, scale, x *Tensor) error
	// LinearScaledFP8: dst[m, n] = Σk xq[m, k]·wq[n, k] · xs[m]·ws[n] +
	// bias[n], f32 accumulation, rounded once to dst's compute dtype; xq
	// (M, K) and wq (N, K) F8E4M3, xs (M) and ws (N) F32, bias (N) in dst's
	// dtype or nil.
	LinearScaledFP8(dst, xq, xs, wq, ws, bias *Tensor) error
	// NativeFP8 tells whether the products run on FP8 hardware; without it
	// the operands are widened first, a reference and not a fast path.
	NativeFP8() bool
}

// NativeFP8 tells whether be multiplies FP8 operands on FP8 hardware, where
// FP8 compute (Scope.LinearFP8Compute) is the fast path.
func NativeFP8(be Backend) bool {
	f, ok := As[FP8Compute](be)
	return ok && f.NativeFP8()
}

// FP8Weights runs a Linear whose weight is F8E4M3 with one f32 scale per
// output channel (weight-only FP8: the weight is dequantized on the fly, the
// product computed in the compute dtype with f32 accumulation).
type FP8Weights interface {
	// LinearFP8: dst = x · (w·scale)ᵀ + bias for x (M, K) and dst (M, N) in
	// the compute dtype, w (N, K) F8E4M3, scale (N) F32, bias (N) in dst's
	// dtype or nil.
	LinearFP8(dst, x, w, scale, bias *Tensor) error
}
