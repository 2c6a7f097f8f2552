// Package miopen runs 3-D convolutions through the GPU vendor's
// convolution library, loaded at run time: MIOpen on AMD (libMIOpen.so.1)
// and cuDNN 9 on NVIDIA (libcudnn.so.9): its graph API (conv_graph_cgo.go:
// one convolution forward operation), with the legacy N-d API as the
// fallback (ConvAPI). Nothing of either SDK is needed to build. On NVIDIA
// it also runs fused attention through cuDNN's graph API
// (attention_cgo.go: one SDPA forward operation, cuDNN ≥ 9.13); MIOpen has
// no counterpart here and reports ErrNoFusedAttention.
//
// The package knows nothing of devices or memory: tensors are device
// pointers (uintptr) and a stream is the runtime's stream handle as a
// uintptr. Calls must come from an OS thread on which the device is current
// (the caller pins its GPU goroutine with runtime.LockOSThread).
//
// Choosing an algorithm never benchmarks by default. Plan asks the library's
// heuristics once per shape (MIOpen immediate mode — its find-db when it has
// a record, else its fallback heuristic — with the descriptor's find mode
// set to FAST; cuDNN's graph-API heuristics, mode A then the fallback list,
// or its cudnnGetConvolutionForwardAlgorithm_v7) and caches the answer in
// the handle. The plan names the solution, so a caller can refuse MIOpen's
// naive solver (Plan.IsNaive) and fall back to its own kernels. Search, which does benchmark, is opt-in: MIOpen's Find can run
// for minutes or hang on some GPUs, so callers run it in a child process
// under a deadline and kill it when the deadline passes (the engine's conv3d
// chain does); the child's result reaches the parent through MIOpen's
// find-db on disk, or as a solution id handed to PlanWith.
//
// The libraries are found by soname through the system loader, then in the
// usual install directories ($ROCM_PATH/lib, /opt/rocm/lib; $CUDNN_PATH/lib,
// $CUDA_PATH/lib64, /usr/local/cuda/lib64). FRAMEPACK_MIOPEN or
// FRAMEPACK_CUDNN names one file instead. FRAMEPACK_CUDNN_CONV=legacy or
// graph sets the cuDNN API of new handles' convolutions (SetConvAPI).
package miopen

import (
	"fmt"
	"math"

	"github.com/framepack-go/framepack/internal/dynlib"
)

// Vendor names the library family behind a Lib.
type Vendor = dynlib.Vendor

const (
	AMD    = dynlib.AMD    // MIOpen
	NVIDIA = dynlib.NVIDIA // cuDNN
)

// DType is the element type of input, weight and output; accumulation is
// f32 for all three.
type DType = dynlib.DType

const (
	F32  = dynlib.F32
	F16  = dynlib.F16
	BF16 = dynlib.BF16
)

// Layout is the memory order of input, weight and output together.
type Layout int

const (
	// NCDHW: x (N, C, D, H, W), w (K, C, kD, kH, kW), y (N, K, Do, Ho, Wo).
	NCDHW Layout = iota
	// NDHWC (channels last): x (N, D, H, W, C), w (K, kD, kH, kW, C),
	// y (N, Do, Ho, Wo, K). On NVIDIA 15–45% faster with almost no
	// workspace.
	NDHWC
)

func (l Layout) String() string {
	switch l {
	case NCDHW:
		return "NCDHW"
	case NDHWC:
		return "NDHWC"
	}
	return fmt.Sprintf("layout(%d)", int(l))
}

// ConvDesc is one 3-D cross-correlation (PyTorch's conv3d), groups 1,
// without bias: the caller adds bias. Spatial triples are in (D, H, W)
// order; zero strides and dilations mean 1. With TwoD it is a 2-D one
// (conv2d) through the libraries' 2-D path.
type ConvDesc struct {
	N, C, D, H, W int // input
	K             int // output channels
	KD, KH, KW    int // kernel
	Stride        [3]int
	Pad           [3]int // zeros on both sides
	Dilation      [3]int
	DType         DType
	Layout        Layout
	// Accumulate adds the convolution to what y holds (cuDNN's β = 1;
	// NVIDIA only: MIOpen's immediate mode has no β).
	Accumulate bool
	// Bias asks the plan to add a bias of K values as the convolution's
	// epilogue (the graph API, without Accumulate); Plan.AddsBias says
	// whether it does, and Conv3dForwardBias whether a call did.
	Bias bool
	// TwoD makes it a 2-D convolution: x (N, C, H, W), w (K, C, kH, kW),
	// y (N, K, Ho, Wo), in NCHW or (Layout NDHWC) NHWC, described to the
	// library as 4-d tensors and a 2-d convolution, so that only its 2-D
	// solvers (the well-tuned ones on RDNA) are asked. D, KD and the depth
	// entries of Stride, Pad and Dilation are ignored (taken as 1, 1, 1, 0, 1).
	TwoD bool
}

func (d ConvDesc) String() string {
	d = d.norm()
	var s string
	if d.TwoD {
		l := "NCHW"
		if d.Layout == NDHWC {
			l = "NHWC"
		}
		s = fmt.Sprintf("conv2d %v %s x(%d,%d,%d,%d) k=%d kernel %dx%d stride %v pad %v",
			d.DType, l, d.N, d.C, d.H, d.W, d.K, d.KH, d.KW, d.Stride[1:], d.Pad[1:])
	} else {
		s = fmt.Sprintf("conv3d %v %v x(%d,%d,%d,%d,%d) k=%d kernel %dx%dx%d stride %v pad %v",
			d.DType, d.Layout, d.N, d.C, d.D, d.H, d.W, d.K, d.KD, d.KH, d.KW, d.Stride, d.Pad)
	}
	if d.Dilation != [3]int{1, 1, 1} {
		s += fmt.Sprintf(" dilation %v", d.Dilation)
	}
	if d.Accumulate {
		s += " accumulated"
	}
	if d.Bias {
		s += " +bias"
	}
	return s
}

// norm fills the defaults, so equal convolutions have equal keys.
func (d ConvDesc) norm() ConvDesc {
	for i := range 3 {
		if d.Stride[i] == 0 {
			d.Stride[i] = 1
		}
		if d.Dilation[i] == 0 {
			d.Dilation[i] = 1
		}
	}
	if d.TwoD {
		d.D, d.KD, d.Stride[0], d.Pad[0], d.Dilation[0] = 1, 1, 1, 0, 1
	}
	return d
}

// OutDims is the output's spatial size (Do, Ho, Wo).
func (d ConvDesc) OutDims() (do, ho, wo int) {
	d = d.norm()
	in := [3]int{d.D, d.H, d.W}
	k := [3]int{d.KD, d.KH, d.KW}
	var o [3]int
	for i := range 3 {
		o[i] = (in[i]+2*d.Pad[i]-d.Dilation[i]*(k[i]-1)-1)/d.Stride[i] + 1
	}
	return o[0], o[1], o[2]
}

// Elements of input, weight and output.
func (d ConvDesc) XElems() int64 {
	d = d.norm()
	return int64(d.N) * int64(d.C) * int64(d.D) * int64(d.H) * int64(d.W)
}
func (d ConvDesc) WElems() int64 {
	d = d.norm()
	return int64(d.K) * int64(d.C) * int64(d.KD) * int64(d.KH) * int64(d.KW)
}
func (d ConvDesc) YElems() int64 {
	do, ho, wo := d.OutDims()
	return int64(d.N) * int64(d.K) * int64(do) * int64(ho) * int64(wo)
}

// FLOPs is 2·N·K·Do·Ho·Wo·C·kD·kH·kW.
func (d ConvDesc) FLOPs() float64 {
	return 2 * float64(d.YElems()) * float64(d.C) * float64(d.KD*d.KH*d.KW)
}

// Validate checks the description before any library sees it.
func (d ConvDesc) Validate() error {
	n := d.norm()
	if n.N <= 0 || n.C <= 0 || n.D <= 0 || n.H <= 0 || n.W <= 0 || n.K <= 0 {
		return fmt.Errorf("miopen: %v: sizes must be positive", d)
	}
	if n.KD <= 0 || n.KH <= 0 || n.KW <= 0 {
		return fmt.Errorf("miopen: %v: kernel sizes must be positive", d)
	}
	for i := range 3 {
		if n.Stride[i] <= 0 || n.Dilation[i] <= 0 || n.Pad[i] < 0 {
			return fmt.Errorf("miopen: %v: strides and dilations must be positive, padding not negative", d)
		}
	}
	if n.DType != F32 && n.DType != F16 && n.DType != BF16 {
		return fmt.Errorf("miopen: %v: unsupported dtype", d)
	}
	if n.Layout != NCDHW && n.Layout != NDHWC {
		return fmt.Errorf("miopen: %v: unsupported layout", d)
	}
	if do, ho, wo := n.OutDims(); do <= 0 || ho <= 0 || wo <= 0 {
		return fmt.Errorf("miopen: %v: kernel larger than the padded input (output %dx%dx%d)", d, do, ho, wo)
	}
	// Both APIs take int strides: every tensor must index in 32 bits.
	for _, t := range []struct {
		name string
		n    int64
	}{{"input", n.XElems()}, {"weight", n.WElems()}, {"output", n.YElems()}} {
		if t.n > math.MaxInt32 {
			return fmt.Errorf("miopen: %v: %s has %d elements, more than the vendor API indexes (2^31-1); split the convolution", d, t.name, t.n)
		}
	}
	return nil
}

// dims5 is a tensor's sizes in (N, C, D, H, W) order and its element
// strides for the layout, the form both libraries take.
func dims5(n, c, d, h, w int, l Layout) (dims, strides [5]int32) {
	dims = [5]int32{int32(n), int32(c), int32(d), int32(h), int32(w)}
	if l == NDHWC {
		strides = [5]int32{int32(d * h * w * c), 1, int32(h * w * c), int32(w * c), int32(c)}
	} else {
		strides = [5]int32{int32(c * d * h * w), int32(d * h * w), int32(h * w), int32(w), 1}
	}
	return
}

// nd is the rank of d's tensors: 4 for a 2-D convolution, else 5.
func (d ConvDesc) nd() int {
	if d.TwoD {
		return 4
	}
	return 5
}

// tensorDims is a tensor of d in (N, C, D, H, W) sizes as the library
// takes it: dims5's, less the depth for a 2-D convolution.
func (d ConvDesc) tensorDims(n, c, dd, h, w int) (dims, strides []int32) {
	dm, st := dims5(n, c, dd, h, w, d.Layout)
	if d.TwoD {
		return []int32{dm[0], dm[1], dm[3], dm[4]}, []int32{st[0], st[1], st[3], st[4]}
	}
	return dm[:], st[:]
}

// spatial is a (D, H, W) triple as the convolution descriptor takes it:
// (H, W) for a 2-D convolution.
func (d ConvDesc) spatial(v [3]int) []int {
	if d.TwoD {
		return v[1:]
	}
	return v[:]
}

// Plan is the algorithm chosen for one ConvDesc.
type Plan struct {
	Desc ConvDesc
	// Algo is cuDNN's cudnnConvolutionFwdAlgo_t (graphAlgoBase plus its
	// place in the heuristics' list for a graph-API engine), or MIOpen's
	// miopenConvAlgorithm_t family (0 GEMM, 1 direct, 2 FFT, 3 Winograd,
	// 5 implicit GEMM).
	Algo int
	// SolutionID is MIOpen's solver id (0 on NVIDIA).
	SolutionID uint64
	// Name is the solver's or algorithm's name, for logs and records.
	Name           string
	WorkspaceBytes int64
	// IsNaive marks MIOpen's naive direct solver (ConvDirectNaiveConvFwd),
	// chosen only when MIOpen offers nothing else. Callers with a better
	// fallback should refuse it.
	IsNaive bool
	// TimeMs is the library's estimate or measurement; <= 0 when unknown.
	TimeMs float32
	// Source says how the plan was made: "graph" (cuDNN's graph API: the
	// first engine configuration its heuristics rank that the handle's
	// rules allow; Name names the engine), "heuristic" (cuDNN _v7),
	// "immediate" (MIOpen immediate mode: its find-db record for the shape
	// if it has one, else its fallback heuristic), "search" or "given"
	// (PlanWith).
	Source string
	// AddsBias: the plan adds the bias (Desc.Bias on the graph API).
	AddsBias bool
	// Fallback says why a cuDNN plan is not the graph API's when the
	// handle wanted it (ConvAPIAuto); empty otherwise.
	Fallback string
	// mathType is cuDNN's cudnnMathType_t for the algorithm.
	mathType int
}

func (p Plan) String() string {
	s := fmt.Sprintf("%s (%s, workspace %d B)", p.Name, p.Source, p.WorkspaceBytes)
	if p.IsNaive {
		s += " [naive]"
	}
	return s
}

// Error is a status returned by the vendor library.
type Error = dynlib.CallError

func solverName(id uint64) string {
	if n, ok := solverNames[id]; ok {
		return n
	}
	return fmt.Sprintf("solver#%d", id)
}

var cudnnAlgoNames = []string{
	"IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT",
	"FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED",
}

func cudnnAlgoName(a int) string {
	if a >= 0 && a < len(cudnnAlgoNames) {
		return "CUDNN_CONVOLUTION_FWD_ALGO_" + cudnnAlgoNames[a]
	}
	return fmt.Sprintf("cudnn algo %d", a)
}
