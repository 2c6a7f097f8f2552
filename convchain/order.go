package convchain

import (
	"fmt"
	"slices"
	"strings"
)

// TierNames are the tiers a chain may hold, in the order a GPU's chain
// lists them when every one is present.
var TierNames = []string{"optimized", Conv2dTierName, "gemm", "naive", "cpu"}

// Order is the tiers a chain tries, in order, and why that order.
type Order struct {
	Tiers []string
	// Why says what chose the order: the architecture's facts, or the
	// setting that overrode them.
	Why string
	// SearchFirst: the vendor library's 3-D tier (optimized) plans only
	// from its search in a child process under the search deadline, never
	// from the library's heuristics in process (gfx11, where its find and
	// its 3-D solvers are what fails).
	SearchFirst bool
}

func (o Order) String() string { return strings.Join(o.Tiers, " → ") }

// The orders.
var (
	libraryFirst = []string{"optimized", "gemm", "naive", "cpu"}
	conv2dFirst  = []string{Conv2dTierName, "gemm", "naive", "cpu"}
)

// RDNA3 reports whether arch is an RDNA3 or RDNA3.5 GPU (gfx110x, gfx115x:
// the 7000 series, the 780M and 890M, Strix Halo).
func RDNA3(arch string) bool {
	a := archBase(arch)
	return strings.HasPrefix(a, "gfx110") || strings.HasPrefix(a, "gfx115")
}

// archBase is arch without its target features ("gfx1100:xnack-" →
// "gfx1100").
func archBase(arch string) string {
	a, _, _ := strings.Cut(strings.ToLower(strings.TrimSpace(arch)), ":")
	return a
}

// DefaultOrder is the chain's order for a GPU of architecture arch
// (hipDeviceProp's gcnArchName on AMD, "sm_XX" on NVIDIA), and why:
//
//   - gfx11 (gfx110x, gfx115x): conv2d → gemm → naive → cpu. MIOpen has no
//     tuned 3-D solvers for RDNA3 and falls to naive kernels
//     (rocm-libraries#1329), or to none since MIOpen 3.5.2 skips those
//     (TheRock#2591); its find can lock up gfx1151 (TheRock#5581); its 2-D
//     solvers are the tuned ones, and splitting a video VAE's 3×3×3
//     convolutions into 2-D ones made a gfx1100 decode 1.66× faster
//     (SeedVR2 PR #634). MIOpen's 3-D convolution runs only when asked
//     (--conv-search on, or FRAMEPACK_CONV3D), and then first, from its
//     search under the deadline (SearchFirst).
//   - everything else (gfx12, Instinct gfx9, NVIDIA, older Radeon):
//     optimized → gemm → naive → cpu, the vendor library's 3-D convolution
//     first, until measurements say otherwise.
func DefaultOrder(arch string, search bool) Order {
	if RDNA3(arch) {
		a, gen, find := archBase(arch), "RDNA3", "can hang the run"
		if strings.HasPrefix(a, "gfx115") {
			gen, find = "RDNA3.5", "can lock the GPU up (TheRock#5581) and large 3-D tiles abort (TheRock#5845)"
		}
		o := Order{Tiers: slices.Clone(conv2dFirst), SearchFirst: true,
			Why: a + " (" + gen + "): 3-D convolutions run as 2-D ones, MIOpen's tuned path; MIOpen has no tuned 3-D solvers here " +
				"(rocm-libraries#1329) and skips its naive ones since 3.5.2 (TheRock#2591); its find " + find +
				"; so its 3-D convolution runs only with --conv-search on or FRAMEPACK_CONV3D, from a search under the deadline"}
		if search {
			o.Tiers = append([]string{"optimized"}, o.Tiers...)
			o.Why += "; --conv-search on: MIOpen's 3-D convolution first, searched under the deadline"
		}
		return o
	}
	why := "the vendor library's 3-D convolution first"
	switch a := archBase(arch); {
	case strings.HasPrefix(a, "gfx12"):
		why = a + " (RDNA4): MIOpen's 3-D convolution first, as before; no measurement yet says the 2-D split is faster here"
	case strings.HasPrefix(a, "gfx9"):
		why = a + " (Instinct): MIOpen's 3-D convolution first; its composable-kernel 3-D solvers are built for these GPUs"
	case strings.HasPrefix(a, "sm_"):
		why = a + " (NVIDIA): cuDNN's 3-D convolution first; its 3-D kernels are fast"
	case a != "":
		why = a + ": the vendor library's 3-D convolution first"
	}
	return Order{Tiers: slices.Clone(libraryFirst), Why: why}
}

// ParseOrder reads a tier order setting (FRAMEPACK_CONV3D): tier names,
// comma separated, each at most once ("conv2d" runs every convolution as
// 2-D ones and nothing else; "optimized,conv2d,gemm,naive,cpu"). "" and
// "auto" are nil: the architecture's order.
func ParseOrder(s string) ([]string, error) {
	s = strings.TrimSpace(strings.ToLower(s))
	if s == "" || s == "auto" {
		return nil, nil
	}
	var out []string
	for _, name := range strings.Split(s, ",") {
		name = strings.TrimSpace(name)
		if !slices.Contains(TierNames, name) {
			return nil, fmt.Errorf("conv3d tier order %q: unknown tier %q (want tiers of %s, comma separated, or auto)", s, name, strings.Join(TierNames, ", "))
		}
		if slices.Contains(out, name) {
			return nil, fmt.Errorf("conv3d tier order %q: %s given twice", s, name)
		}
		out = append(out, name)
	}
	return out, nil
}

// OrderFor is the order a chain on arch uses: tiers when given (a setting;
// an empty list is the default), else DefaultOrder. search is whether
// searches were asked for explicitly (--conv-search on).
func OrderFor(arch string, tiers []string, search bool) Order {
	def := DefaultOrder(arch, search)
	if len(tiers) == 0 {
		return def
	}
	return Order{Tiers: slices.Clone(tiers), SearchFirst: def.SearchFirst,
		Why: "set by FRAMEPACK_CONV3D (" + archBase(arch) + "'s own: " + strings.Join(def.Tiers, " → ") + ")"}
}
