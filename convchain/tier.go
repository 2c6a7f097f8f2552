package convchain

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"github.com/framepack-go/framepack/tensor"
)

// Key identifies a convolution for the chain: device, dtype, layout and
// shapes. What works is remembered per key.
type Key struct {
	// Device names the device and, where it matters, the library versions
	// ("gfx1100 MIOpen 3.4.0", "NVIDIA H100 sm_90 cuDNN 9.14").
	Device  string `json:"device"`
	DType   string `json:"dtype"`
	Layout  string `json:"layout"` // "ncdhw", or "ndhwc" for channels-last operands
	X       [5]int `json:"x"`      // B, Cin, T, H, W (in either layout)
	W       [5]int `json:"w"`      // Cout, Cin, kT, kH, kW
	Bias    bool   `json:"bias"`
	Stride  [3]int `json:"stride"`
	Padding [3]int `json:"padding"`
}

// KeyOf is the key of a Conv3d call on device.
func KeyOf(device string, x, w, bias *tensor.Tensor, p tensor.ConvParams) Key {
	k := Key{Device: device, DType: x.DType().String(), Layout: "ncdhw", Bias: bias != nil, Stride: p.Stride, Padding: p.Padding}
	copy(k.X[:], x.Shape())
	copy(k.W[:], w.Shape())
	for i := range k.Stride {
		k.Stride[i] = max(k.Stride[i], 1)
	}
	return k
}

// KeyOfLast is the key of a Conv3dLast call on device: x (B, T, H, W, Cin).
func KeyOfLast(device string, x, w, bias *tensor.Tensor, p tensor.ConvParams) Key {
	k := KeyOf(device, x, w, bias, p)
	k.Layout = "ndhwc"
	xs := x.Shape()
	k.X = [5]int{xs[0], xs[4], xs[1], xs[2], xs[3]}
	if ws := w.Shape(); p.WeightLast { // (Cout, kT, kH, kW, Cin): the same key as checkpoints' order
		k.W = [5]int{ws[0], ws[4], ws[1], ws[2], ws[3]}
	}
	return k
}

func dims(v []int) string {
	s := make([]string, len(v))
	for i, d := range v {
		s[i] = fmt.Sprint(d)
	}
	return strings.Join(s, "x")
}

// String is the key's canonical form, used in the cache file:
// "gfx1100|bf16|ncdhw|x1x512x7x34x34|w512x512x3x3x3|s1x1x1|p0x1x1|bias".
func (k Key) String() string {
	b := "nobias"
	if k.Bias {
		b = "bias"
	}
	return strings.Join([]string{k.Device, k.DType, k.Layout, "x" + dims(k.X[:]), "w" + dims(k.W[:]),
		"s" + dims(k.Stride[:]), "p" + dims(k.Padding[:]), b}, "|")
}

// Plan is how a tier runs one convolution. The exported fields are
// remembered on disk; Live holds what the tier keeps in process (a compiled
// kernel, a loaded solution).
type Plan struct {
	// Algorithm is a readable name of what the tier chose, for the log and
	// `framepack doctor` ("miopen solver ConvHipImplicitGemm3DGroupFwdXdlops (id 128)").
	Algorithm string `json:"algorithm,omitempty"`
	// Naive is true when the tier resolved to the vendor's naive direct
	// solver (MIOpen's ConvDirectNaiveConvFwd): the chain skips the tier.
	Naive bool `json:"naive,omitempty"`
	// Workspace is the scratch memory it needs, in bytes.
	Workspace int64 `json:"workspace,omitempty"`
	// Data is tier-specific (a solution id, a serialized solution).
	Data json.RawMessage `json:"data,omitempty"`
	// Searched: the plan came from the tier's search. A choice remembered
	// without one is planned again, searched, when searches are on.
	Searched bool `json:"searched,omitempty"`

	Live any `json:"-"`
}

// Tier is one way to run a convolution. backend/gpu provides the optimized
// (MIOpen/cuDNN), GEMM (rocBLAS/cuBLAS) and naive GPU tiers; CPUTier is the
// last resort.
type Tier interface {
	// Name is the tier's name in logs, the cache and FRAMEPACK_FAULTS:
	// "optimized", "gemm", "naive", "cpu".
	Name() string
	// Plan readies the tier for a convolution, in process and without
	// benchmarking. searched is the result of the tier's algorithm search
	// when it registered one (RegisterSearch; the search runs in a child
	// process under the chain's deadline) or a remembered plan; nil
	// otherwise. An error skips the tier for this key.
	Plan(k Key, searched *Plan) (*Plan, error)
	// Run computes dst from x, w and bias (nil when absent) as the plan
	// says. An error (one wrapping tensor.ErrOutOfMemory included) skips the
	// tier for this key; dst may have been partly written.
	Run(plan *Plan, dst, x, w, bias *tensor.Tensor, p tensor.ConvParams) error
}

// SearchRequest is what a child process gets to search for.
type SearchRequest struct {
	Tier       string `json:"tier"`
	Key        Key    `json:"key"`
	Exhaustive bool   `json:"exhaustive,omitempty"`
	// Fault is an injected fault for the search (hang).
	Fault Fault `json:"fault,omitempty"`
}

// SearchFunc runs a tier's algorithm search (MIOpen Find, cuDNN
// heuristics with benchmarking) for one key, in a child process of its own:
// it sets up the device from scratch, allocates the convolution's
// buffers, searches and returns the plan to remember. It is never
// exhaustive unless req.Exhaustive.
type SearchFunc func(ctx context.Context, req SearchRequest) (*Plan, error)

var (
	searchMu sync.Mutex
	searches = map[string]SearchFunc{}
)

// RegisterSearch makes fn the search of the tier named tier. Register in an
// init function (or before MaybeRunChild), so that the child process that
// runs the search, a fresh start of the same binary, has it too.
func RegisterSearch(tier string, fn SearchFunc) {
	searchMu.Lock()
	defer searchMu.Unlock()
	searches[tier] = fn
}

func searchFor(tier string) SearchFunc {
	searchMu.Lock()
	defer searchMu.Unlock()
	return searches[tier]
}
