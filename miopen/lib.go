package miopen

import (
	"errors"
	"fmt"

	"github.com/framepack-go/framepack/internal/dynlib"
)

// Lib is a loaded convolution library. It stays loaded for the life of the
// process.
type Lib struct {
	vendor       Vendor
	path         string
	version      string
	cudnnVersion int  // cudnnGetVersion(), e.g. 91400; 0 on AMD
	graph        bool // cuDNN's graph API resolved (fused attention)
}

// Vendor is the library family: AMD (MIOpen) or NVIDIA (cuDNN).
func (l *Lib) Vendor() Vendor { return l.vendor }

// Path is the file that was loaded.
func (l *Lib) Path() string { return l.path }

// Version is the library's version.
func (l *Lib) Version() string { return l.version }

func (l *Lib) String() string { return fmt.Sprintf("%s %s (%s)", l.Name(), l.version, l.path) }

// Name is the library's name: MIOpen or cuDNN.
func (l *Lib) Name() string { return libs.Libraries[l.vendor].Name }

// Handle is a library handle bound to one stream, with its cache of plans.
// A Handle is not safe for concurrent use.
type Handle struct {
	lib     *Lib
	h       uintptr
	fast    bool
	wsLimit int64
	convAPI ConvAPI
	timer   Timer
	plans   map[ConvDesc]*entry
	attn    map[AttnDesc]*attnPlan
	closed  bool
}

// entry is a cached plan with the library descriptors it runs with: the
// legacy API's always (a graph plan falls back on them), and for a graph
// plan its execution plan and every backend descriptor it needs.
type entry struct {
	plan           Plan
	xd, wd, yd, cd uintptr
	exec           uintptr
	graph          []uintptr
	// legacy is the legacy algorithm a graph plan runs tensors off its
	// alignment with, chosen when first needed.
	legacy *Plan
}

// Lib is the library the handle belongs to.
func (h *Handle) Lib() *Lib { return h.lib }

// SetFastF32 lets f32 convolutions use TF32 tensor cores on NVIDIA (about
// 1e-3 relative error instead of 1e-6). Off by default. No effect on AMD.
// Changing it forgets the cached plans.
func (h *Handle) SetFastF32(on bool) {
	if h.fast != on {
		h.fast = on
		h.forget()
	}
}

// SetWorkspaceLimit makes plans choose only algorithms whose workspace fits
// in n bytes (0: no limit). Changing it forgets the cached plans.
func (h *Handle) SetWorkspaceLimit(n int64) {
	if h.wsLimit != n {
		h.wsLimit = n
		h.forget()
	}
}

// ConvAPI is the cuDNN API a handle plans convolutions with. It has no
// effect on AMD.
type ConvAPI int

const (
	// ConvAPIAuto: the graph API when the library has it, else, or when
	// none of its engines takes the convolution, the legacy API (the plan's
	// Fallback says why).
	ConvAPIAuto ConvAPI = iota
	// ConvAPILegacy: cudnnGetConvolutionForwardAlgorithm_v7 and
	// cudnnConvolutionForward only.
	ConvAPILegacy
	// ConvAPIGraph: the graph API only; Plan fails where it has no engine.
	ConvAPIGraph
)

func (a ConvAPI) String() string {
	switch a {
	case ConvAPIAuto:
		return "auto"
	case ConvAPILegacy:
		return "legacy"
	case ConvAPIGraph:
		return "graph"
	}
	return fmt.Sprintf("ConvAPI(%d)", int(a))
}

// ParseConvAPI reads a ConvAPI by name: "legacy", "graph" or "auto" ("" is
// auto).
func ParseConvAPI(s string) (ConvAPI, error) {
	for _, a := range []ConvAPI{ConvAPIAuto, ConvAPILegacy, ConvAPIGraph} {
		if s == a.String() {
			return a, nil
		}
	}
	if s == "" {
		return ConvAPIAuto, nil
	}
	return 0, fmt.Errorf("miopen: convolution API %q: want legacy, graph or auto", s)
}

// Timer times run on the handle's stream: the milliseconds one run takes,
// the device synchronized around the runs it makes.
type Timer func(run func() error) (ms float32, err error)

// SetTimer gives Search a timer for the graph API's engines (cuDNN's own
// search times only its legacy algorithms); without one Search times those
// alone.
func (h *Handle) SetTimer(t Timer) { h.timer = t }

// SetConvAPI chooses the cuDNN API convolutions are planned with (default
// ConvAPIAuto). Changing it forgets the cached plans. PlanWith takes
// legacy algorithms and graph plans alike; Search times the graph API's
// engines too when the handle has a timer and the API is not legacy.
func (h *Handle) SetConvAPI(a ConvAPI) {
	if h.convAPI != a {
		h.convAPI = a
		h.forget()
	}
}

// libs loads each vendor's library, found as Libraries says.
var libs = dynlib.NewLoader[*Lib]("miopen",
	dynlib.ROCm("MIOpen", "FRAMEPACK_MIOPEN", "libMIOpen.so.1"),
	dynlib.CUDA("cuDNN 9", "FRAMEPACK_CUDNN", []string{"libcudnn.so.9"},
		append([]string{"$CUDNN_PATH/lib"}, dynlib.CUDADirs("/usr/lib/x86_64-linux-gnu")...)...))

// EnvPath names the environment variable that points a vendor's loader at
// one library file, bypassing the search.
func EnvPath(v Vendor) string { return libs.EnvPath(v) }

// Open loads MIOpen, or cuDNN when MIOpen is absent. A caller that knows its
// platform should use OpenVendor.
func Open() (*Lib, error) { return dynlib.First([]Vendor{AMD, NVIDIA}, OpenVendor) }

// OpenVendor loads the given vendor's library. The error names every file
// tried and why each failed.
func OpenVendor(v Vendor) (*Lib, error) { return libs.Open(v) }

var errClosed = errors.New("miopen: handle is closed")
