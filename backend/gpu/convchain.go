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
	"strings"
	"time"

	"github.com/framepack-go/framepack/convchain"
	"github.com/framepack-go/framepack/hip"
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
	// Profile, when set, times the optimized tier's phases.
	Profile *Profile
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
	search, err := searchOn(o.Search, be.Device().Vendor)
	if err != nil {
		return nil, err
	}
	opt := &o
	var tiers []convchain.Tier
	device := be.Device().Name + " " + be.Device().Arch
	if t, err := newOptimized(be, opt); err == nil {
		tiers = append(tiers, t)
		device += " " + t.h.Lib().Name() + " " + t.h.Lib().Version()
	} else {
		o.Log.Info("conv3d: no vendor convolution library; the chain starts at the GEMM tier", "why", err)
	}
	tiers = append(tiers, be.ConvTiers()...)
	tiers = append(tiers, convchain.CPUTier(cpu))
	chain, err := convchain.New(tiers, convchain.Options{Device: device, CachePath: o.CachePath,
		SearchDeadline: o.SearchDeadline, Exhaustive: o.Exhaustive, NoSearch: !search, Faults: faults, Log: o.Log})
	if err != nil {
		return nil, err
	}
	return convchain.Wrap(faults.WrapBackend(be), chain), nil
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
