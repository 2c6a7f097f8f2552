// The GPU's 3-D convolutions on the conv3d fallback chain (package
// convchain, the device-independent policy), with the real tiers, fastest
// first:
//
//   - optimized: the vendor library (cuDNN on NVIDIA, MIOpen on AMD) through
//     package miopen, channels-last (NDHWC) where the channel counts suit the
//     tensor cores, packed from and unpacked into the engine's NCDHW tensors
//     a chunk of frames at a time (the bias added in the unpack); a plan that
//     resolves to MIOpen's naive solver is skipped;
//   - gemm: im2col chunks bounded in memory, each a vendor BLAS GEMM (the GPU
//     backend's tier);
//   - naive: the GPU backend's direct kernel;
//   - cpu: the CPU backend on host copies.
//
// Searches (MIOpen Find, cuDNN's benchmarking) run in a child process under
// the chain's deadline; by default only on AMD, whose heuristics often end
// in the naive solver, while cuDNN's heuristics are used as they are. What
// works for each shape is remembered on disk by the chain.

package gpu

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/framepack-go/framepack/convchain"
	"github.com/framepack-go/framepack/hip"
	"github.com/framepack-go/framepack/internal/envconfig"
	"github.com/framepack-go/framepack/tensor"
)

// Layout is the optimized tier's memory order for the vendor library.
type Layout string

const (
	// LayoutAuto is channels-last when both channel counts are multiples of
	// 8, else NCDHW; the other layout is tried when the first has no
	// usable plan.
	LayoutAuto  Layout = ""
	LayoutNCDHW Layout = "ncdhw"
	LayoutNDHWC Layout = "ndhwc"
)

// ParseLayout reads "auto", "ncdhw" or "ndhwc".
func ParseLayout(s string) (Layout, error) {
	switch strings.ToLower(s) {
	case "", "auto":
		return LayoutAuto, nil
	case "ncdhw":
		return LayoutNCDHW, nil
	case "ndhwc":
		return LayoutNDHWC, nil
	}
	return "", fmt.Errorf("conv3d layout %q: want auto, ncdhw or ndhwc", s)
}

// Search modes.
const (
	SearchAuto = "" // on AMD (MIOpen), not on NVIDIA (cuDNN's heuristics)
	SearchOn   = "on"
	SearchOff  = "off"
)

// DefaultChunkBytes bounds the optimized tier's scratch memory.
const DefaultChunkBytes = 512 << 20

// ConvOptions configure Wrap.
type ConvOptions struct {
	// Layout of the optimized tier (LayoutAuto by default).
	Layout Layout
	// ChunkBytes bounds the channels-last scratch tensors and the
	// library's workspace (0: DefaultChunkBytes).
	ChunkBytes int64
	// Search is SearchAuto, SearchOn or SearchOff.
	Search string
	// CachePath is the chain's file of remembered choices ("" default,
	// "off" none).
	CachePath string
	// SearchDeadline bounds each search (0: 30 s).
	SearchDeadline time.Duration
	// Exhaustive asks the searches to try every algorithm.
	Exhaustive bool
	// Faults to inject (nil: FRAMEPACK_FAULTS).
	Faults *convchain.Faults
	// Log receives the chain's lines (nil: slog.Default()).
	Log *slog.Logger
	// Profile, when set, times the optimized and conv2d tiers' phases.
	Profile *Profile
	// Order is the chain's tiers, in order (convchain.ParseOrder's names);
	// nil reads FRAMEPACK_CONV3D, and without it the architecture's order
	// (convchain.DefaultOrder).
	Order []string

	// conv2dAdds makes the conv2d tier sum its taps as on AMD (scratch and
	// one add, no β), to test that path on NVIDIA.
	conv2dAdds bool
}

func (o *ConvOptions) chunkBytes() int64 {
	if o.ChunkBytes > 0 {
		return o.ChunkBytes
	}
	return DefaultChunkBytes
}

// WithConvChain returns be with its Conv3d (and Conv3dPadded) on the conv3d
// chain; every other kernel is be's. cpu is the last tier's backend. Chain
// on the result reaches the chain, for its summary.
func (be *Backend) WithConvChain(cpu tensor.Backend, o ConvOptions) (*convchain.Backend, error) {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	faults := o.Faults
	if faults == nil {
		f, err := convchain.FaultsFromEnv()
		if err != nil {
			return nil, err
		}
		faults = f
	}
	if _, err := ParseLayout(string(o.Layout)); err != nil {
		return nil, err
	}
	order, err := ConvOrder(be.Device().Arch, o)
	if err != nil {
		return nil, err
	}
	search, err := searchOn(o.Search, be.Device().Vendor)
	if err != nil {
		return nil, err
	}
	if order.SearchFirst && slices.Contains(order.Tiers, "optimized") {
		// Here the library's 3-D convolution plans only from its search,
		// in a child process under the deadline.
		search = true
	}
	opt := &o
	device := be.Device().Name + " " + be.Device().Arch
	avail := map[string]convchain.Tier{}
	why := map[string]string{}
	if t, err := newOptimized(be, opt); err == nil {
		avail["optimized"] = t
		device += " " + t.h.Lib().Name() + " " + t.h.Lib().Version()
		if ct, err := newConv2dTier(be, opt); err == nil {
			avail[convchain.Conv2dTierName] = ct
		}
	} else {
		why["optimized"], why[convchain.Conv2dTierName] = "no vendor convolution library: "+err.Error(), "no vendor convolution library"
	}
	for _, t := range be.ConvTiers() {
		avail[t.Name()] = t
	}
	if be.blas == nil {
		why["gemm"] = "no vendor BLAS"
	}
	avail["cpu"] = convchain.CPUTier(cpu)
	var tiers []convchain.Tier
	for _, name := range order.Tiers {
		if t, ok := avail[name]; ok {
			tiers = append(tiers, t)
		} else {
			o.Log.Info(fmt.Sprintf("conv3d: tier %s is not available here (%s)", name, why[name]))
		}
	}
	if len(tiers) == 0 {
		return nil, fmt.Errorf("conv3d tier order %s: none of its tiers is available here", order)
	}
	o.Log.Info(fmt.Sprintf("conv3d: tiers %s: %s", order, order.Why))
	chain, err := convchain.New(tiers, convchain.Options{Device: device, CachePath: o.CachePath,
		SearchDeadline: o.SearchDeadline, Exhaustive: o.Exhaustive, NoSearch: !search, Faults: faults, Log: o.Log})
	if err != nil {
		return nil, err
	}
	return convchain.Wrap(faults.WrapBackend(be), chain), nil
}

// ConvOrder is the conv3d chain's tier order on a GPU of architecture
// arch: o.Order, else FRAMEPACK_CONV3D, else the architecture's
// (convchain.DefaultOrder), with the library's 3-D tier first on gfx11
// when o.Search is on.
func ConvOrder(arch string, o ConvOptions) (convchain.Order, error) {
	tiers := o.Order
	if tiers == nil {
		t, err := convchain.ParseOrder(envconfig.Read().Conv3d)
		if err != nil {
			return convchain.Order{}, fmt.Errorf("%s: %w", envconfig.Conv3d, err)
		}
		tiers = t
	}
	return convchain.OrderFor(arch, tiers, o.Search == SearchOn), nil
}

func searchOn(mode string, v hip.Vendor) (bool, error) {
	switch mode {
	case SearchAuto, "auto":
		return v == hip.AMD, nil
	case SearchOn:
		return true, nil
	case SearchOff:
		return false, nil
	}
	return false, fmt.Errorf("conv3d search %q: want auto, on or off", mode)
}
