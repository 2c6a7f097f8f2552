// Package memory keeps framepack inside a device memory budget: a hard cap
// that the engine's allocations never exceed (Budgeted), memory preserved
// for activations while weights stream, model residency with complete
// unload and eviction (Manager), an out-of-memory policy that
// evicts, trims, shrinks and falls back to the CPU (Manager.Run), and
// budgets for integrated GPUs drawn from system memory (UnifiedBudget).
package memory

import (
	"fmt"
)

// DefaultPreserve is FramePack's "GPU inference preserved memory" default:
// memory kept free for activations while the transformer's weights stream.
const DefaultPreserve = 6 * GiB

// runtimeHeadroom is left out of a device's measured free memory for the
// runtime's own allocations (kernels, MIOpen/cuDNN handles, ROCr's 2 MiB
// block allocator), which do not pass through the engine's allocator.
const runtimeHeadroom = 512 * MiB

// MinCap is the smallest --vram-limit accepted. The real models' VAE
// decoder alone holds about 0.5 GiB of weights and the built-in tiny model
// runs out of memory near 8 MiB, so a cap in MiB is a unit slip ("8M" for
// "8G") to report before anything runs, not a budget to plan with.
const MinCap = 64 * MiB

// Budget is what the engine may use on one device.
type Budget struct {
	Device string
	// Total is the memory the device offers: its own memory on a discrete
	// GPU, carve-out plus GTT (or system memory) on an integrated one.
	Total int64
	// Cap is the hard limit on the engine's live device allocations.
	Cap int64
	// Preserve is kept free for activations when weights stream: a model
	// that does not fit beside it is streamed rather than made resident.
	Preserve int64
	// Integrated is true when device memory is system memory (APUs such
	// as Strix Halo, gfx1151).
	Integrated bool
	// Source says where Total came from, for the log and `framepack doctor`.
	Source string
}

// DefaultCap is the cap for a device of total bytes when the user sets
// none: total less a reserve of max(2 GiB, total/6), the reserve at most half
// of total. A 24 GiB card gets 20 GiB, 16 GiB gets 13.3 GiB, 80 GiB gets
// 66.7 GiB, 8 GiB gets 6 GiB. The reserve covers what the runtime, the
// display and other processes hold outside the engine's allocator, and the
// fragmentation of the device's pools.
func DefaultCap(total int64) int64 {
	if total <= 0 {
		return 0
	}
	reserve := max(2*GiB, total/6)
	reserve = min(reserve, total/2)
	return total - reserve
}

// NewBudget is the default budget of a discrete device with total bytes of
// memory of which free are free now (free ≤ 0: unknown): DefaultCap(total),
// lowered to what is free less a headroom for the runtime when other
// processes already hold memory; preserve DefaultPreserve, at most half the
// cap.
func NewBudget(device string, total, free int64) Budget {
	cp := DefaultCap(total)
	if free > 0 {
		cp = min(cp, max(free-runtimeHeadroom, free/2))
	}
	return Budget{
		Device:   device,
		Total:    total,
		Cap:      cp,
		Preserve: min(DefaultPreserve, cp/2),
		Source:   "device memory reported by the runtime",
	}
}

// With applies the --vram-limit and --preserve flags (unset: keep the
// default); fractions are of Total.
func (b Budget) With(vramLimit, preserve Size) (Budget, error) {
	if vramLimit.IsSet() {
		v, err := vramLimit.Of(b.Total)
		if err != nil {
			return b, fmt.Errorf("--vram-limit: %w", err)
		}
		if b.Total > 0 && v > b.Total {
			return b, fmt.Errorf("--vram-limit %s (%s) is more than the %s that %s has", vramLimit, FormatBytes(v), FormatBytes(b.Total), b.name())
		}
		if v < MinCap {
			return b, fmt.Errorf("--vram-limit %w", capBelowMin(vramLimit, v))
		}
		b.Cap = v
		if !preserve.IsSet() {
			b.Preserve = min(DefaultPreserve, b.Cap/2)
		}
	}
	if preserve.IsSet() {
		v, err := preserve.Of(b.Total)
		if err != nil {
			return b, fmt.Errorf("--preserve: %w", err)
		}
		b.Preserve = v
	}
	return b, b.Validate()
}

// Validate checks that the cap is positive and the preserved amount leaves
// room under it.
func (b Budget) Validate() error {
	if b.Cap <= 0 {
		return fmt.Errorf("memory budget of %s: the cap must be above 0 (have %s)", b.name(), FormatBytes(b.Cap))
	}
	if b.Preserve < 0 || b.Preserve >= b.Cap {
		return fmt.Errorf("memory budget of %s: preserved memory %s must be below the %s cap (lower --preserve or raise --vram-limit)",
			b.name(), FormatBytes(b.Preserve), FormatBytes(b.Cap))
	}
	return nil
}

func (b Budget) name() string {
	if b.Device == "" {
		return "the device"
	}
	return b.Device
}

func (b Budget) String() string {
	kind := "discrete"
	if b.Integrated {
		kind = "integrated, unified memory"
	}
	return fmt.Sprintf("device %s (%s): total %s (%s), cap %s, preserve %s",
		b.name(), kind, FormatBytes(b.Total), b.Source, FormatBytes(b.Cap), FormatBytes(b.Preserve))
}
