package tensor

import (
	"errors"
	"fmt"
)

// Backend runs kernels on one device. Every kernel takes its output first,
// preallocated with the right shape and dtype by the Scope, and contiguous
// inputs that live on this backend. Unless a kernel says otherwise its inputs
// share the output's dtype. A backend reports a kernel or dtype it lacks
// with an error wrapping ErrUnsupported.
type Backend interface {
	Name() string

	// Alloc returns n bytes of storage (contents undefined). An allocation
	// the backend cannot or may not make fails with an error wrapping
	// ErrOutOfMemory.
	Alloc(n int64) (Buffer, error)
	Free(Buffer)
	// Upload copies host bytes into dst at byte offset off; Download copies
	// out of src at byte offset off.
	Upload(dst Buffer, off int64, src []byte) error
	Download(dst []byte, src Buffer, off int64) error
	// Sync waits for all queued work.
	Sync() error

	// Fill sets every element of dst to v.
	Fill(dst *Tensor, v float64) error
	// Cast converts src into dst's dtype (same element count).
	Cast(dst, src *Tensor) error
	// Copy copies a strided view of src into a strided view of dst, both
	// given in elements: shape is the view's shape, offsets and strides
	// locate it in each buffer. Permute, slice, concat, expand and pad-zero
	// are all this.
	Copy(dst *Tensor, dstOff int, dstStrides []int, src *Tensor, srcOff int, srcStrides []int, shape []int) error
	// Unary applies op elementwise; a and b are its parameters (Scale: a;
	// Clamp: [a, b]; AddScalar: a; Pow: a).
	Unary(op UnaryOp, dst, src *Tensor, a, b float32) error
	// Binary computes dst = a op b. dst is contiguous with dst's shape; a
	// and b are read through strides over dst's shape (0 for a broadcast
	// axis), in elements.
	Binary(op BinaryOp, dst, a *Tensor, aStrides []int, b *Tensor, bStrides []int) error
	// MatMul computes dst[i] = alpha · op(a[i]) · op(b[i]) over p.Batch
	// matrices; op transposes when asked. a is (Batch|1, M, K) or (…, K, M)
	// transposed, b is (Batch|1, K, N) or (…, N, K); a batch of 1 broadcasts.
	// dst is (Batch, M, N). Accumulation is f32.
	MatMul(dst, a, b *Tensor, p MatMulParams) error
	// Linear computes dst = x · wᵀ + bias for x (M, K), w (N, K), bias (N)
	// or nil, dst (M, N).
	Linear(dst, x, w, bias *Tensor) error
	// Conv3d is a cross-correlation with zero padding, groups 1: x (B, Cin,
	// T, H, W), w (Cout, Cin, kT, kH, kW), bias (Cout) or nil, dst (B, Cout,
	// T', H', W').
	Conv3d(dst, x, w, bias *Tensor, p ConvParams) error
	// GroupNorm normalises x (B, C, ...) over C/groups channels and all
	// trailing positions, then applies the affine w, b (C) and, if silu,
	// SiLU. Statistics in f32.
	GroupNorm(dst, x, w, b *Tensor, groups int, eps float32, silu bool) error
	// LayerNorm normalises over the last axis; w and b (last axis) may be
	// nil. Statistics in f32.
	LayerNorm(dst, x, w, b *Tensor, eps float32) error
	// RMSNorm: x · rsqrt(mean(x²) + eps) · w over the last axis; w may be
	// nil. The normalised value is rounded to dst's dtype before the weight
	// multiply, as the reference does.
	RMSNorm(dst, x, w *Tensor, eps float32) error
	// Softmax over the last axis.
	Softmax(dst, x *Tensor) error
	// Attention is softmax(q·kᵀ·scale + mask)·v with q (B, Lq, Hq, D), k and
	// v (B, Lk, Hkv, D), dst (B, Lq, Hq, D); Hq is a multiple of Hkv (GQA).
	// It never holds an Lq×Lk matrix per head beyond a block.
	Attention(dst, q, k, v *Tensor, p AttnParams) error
	// RoPE rotates interleaved channel pairs (2i, 2i+1) of x (B, L, H, D)
	// by cos and sin (L, D), both f32:
	//   out[2i]   = x[2i]·cos[2i] − x[2i+1]·sin[2i]
	//   out[2i+1] = x[2i+1]·cos[2i+1] + x[2i]·sin[2i+1]
	RoPE(dst, x, cos, sin *Tensor) error
	// Reduce reduces src (N, K) over its last axis into dst (N).
	Reduce(op ReduceOp, dst, src *Tensor) error
	// Pad pads the trailing len(before) axes of src; dst's shape gives the
	// padded sizes, before the amount added in front of each padded axis.
	Pad(dst, src *Tensor, before []int, mode PadMode) error
	// UpsampleNearest repeats the last three axes of src by scale
	// (output index i reads i/scale).
	UpsampleNearest(dst, src *Tensor, scale [3]int) error
	// AvgPool3d averages non-overlapping kernel-sized cells of the last three
	// axes (kernel = stride, no padding; sizes divisible).
	AvgPool3d(dst, src *Tensor, kernel [3]int) error
	// Embedding gathers rows of table (V, D) by ids (N, i64 or i32) into
	// dst (N, D).
	Embedding(dst, table, ids *Tensor) error
}

// UnaryOp names an elementwise function.
type UnaryOp uint8

const (
	OpNeg UnaryOp = iota
	OpExp
	OpLog
	OpSin
	OpCos
	OpSqrt
	OpRsqrt
	OpAbs
	OpSquare
	OpSiLU
	OpGELU     // erf form
	OpGELUTanh // tanh approximation
	OpQuickGELU
	OpSigmoid
	OpTanh
	OpScale     // x·a
	OpAddScalar // x+a
	OpClamp     // min(max(x, a), b)
	OpPow       // x^a
	OpRecip     // 1/x
)

var unaryNames = [...]string{"neg", "exp", "log", "sin", "cos", "sqrt", "rsqrt", "abs", "square",
	"silu", "gelu", "gelu_tanh", "quick_gelu", "sigmoid", "tanh", "scale", "add_scalar", "clamp", "pow", "recip"}

func (o UnaryOp) String() string { return opName(unaryNames[:], uint8(o), "unary") }

// opName is names[o], or kind(o) for an op past the list.
func opName(names []string, o uint8, kind string) string {
	if int(o) < len(names) {
		return names[o]
	}
	return fmt.Sprintf("%s(%d)", kind, o)
}

// BinaryOp names an elementwise function of two tensors.
type BinaryOp uint8

const (
	OpAdd BinaryOp = iota
	OpSub
	OpMul
	OpDiv
	OpMax
	OpMin
)

var binaryNames = [...]string{"add", "sub", "mul", "div", "max", "min"}

func (o BinaryOp) String() string { return opName(binaryNames[:], uint8(o), "binary") }

// ReduceOp names a reduction over the last axis.
type ReduceOp uint8

const (
	ReduceSum ReduceOp = iota
	ReduceMean
	ReduceMax
	ReduceVar  // population variance (unbiased = false)
	ReduceVarU // sample variance (unbiased, torch.std's default)
	ReduceAbsMean
)

// PadMode is how Pad fills.
type PadMode uint8

const (
	PadZeros PadMode = iota
	PadReplicate
)

// MatMulParams describe a batched matrix product.
type MatMulParams struct {
	Batch, M, N, K int
	TransA, TransB bool
	Alpha          float32 // 0 means 1
}

// ConvParams describe a 3-D convolution (T, H, W order).
type ConvParams struct {
	Stride  [3]int
	Padding [3]int // zeros, both sides
	// Accumulate adds the convolution (and bias) to what dst holds
	// (ChannelsLastConv's Conv3dLast; Scope.Conv3dLastAdd).
	Accumulate bool
	// WeightLast: w is packed channels-last, (Cout, kT, kH, kW, Cin), the
	// libraries' order (ChannelsLastConv's Conv3dLast;
	// Scope.Conv3dLastPacked).
	WeightLast bool
}

// AttnParams describe one attention call. At most one of the masks is used
// per call; all masks broadcast over heads.
type AttnParams struct {
	Scale float32 // 0 means 1/sqrt(D)
	// Causal: key j is visible to query i when j <= i.
	Causal bool
	// FrameLen > 0: frame-causal; key j is visible to query i when
	// j/FrameLen <= i/FrameLen (the VAE's mid-block mask).
	FrameLen int
	// KeyMask (B, Lk), f32 0/1: key j of batch b is visible when 1.
	KeyMask *Tensor
	// Mask (B|1, Lq, Lk), f32 additive (0 or -Inf).
	Mask *Tensor
	// FP8 lets the attention run in FP8 E4M3 where the device has such an
	// engine (cuDNN's on Hopper, for the unmasked case): q, k, v and the
	// output coded per tensor, the probabilities rounded to E4M3. Elsewhere
	// it runs as without it. About 7% relative error against the exact
	// attention (miopen's TestFusedAttentionFP8).
	FP8 bool
}

// ErrOutOfMemory is wrapped by every allocation failure, from the budget or
// from the device.
var ErrOutOfMemory = errors.New("out of memory")

// ErrUnsupported is wrapped when a backend lacks a kernel or dtype.
var ErrUnsupported = errors.New("unsupported")

// OpError is what a failing op panics with inside a Scope; Catch turns it
// back into an error at a component's boundary.
type OpError struct {
	Op  string
	Err error
}

func (e *OpError) Error() string { return e.Op + ": " + e.Err.Error() }
func (e *OpError) Unwrap() error { return e.Err }

// Catch runs fn and returns the error of any op that failed inside it. Other
// panics (bugs) propagate.
func Catch(fn func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			if oe, ok := r.(*OpError); ok {
				err = oe
				return
			}
			panic(r)
		}
	}()
	fn()
	return nil
}

// Fail aborts the current op with an error; for model code that finds bad
// input in the middle of a forward (Catch turns it into an error).
func Fail(op string, format string, args ...any) {
	panic(&OpError{Op: op, Err: fmt.Errorf(format, args...)})
}
