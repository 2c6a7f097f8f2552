package miopen

import (
	"errors"
	"fmt"
)

// ErrNoFusedAttention: the library offers no fused attention for the
// call: MIOpen, cuDNN older than 9.13 (no SDPA operation), or a shape or
// dtype none of cuDNN's engines takes. Callers use their own kernel.
var ErrNoFusedAttention = errors.New("miopen: no fused attention in this library for this call")

// AttnDesc is one unmasked scaled-dot-product attention: q and o are
// (B, Lq, Hq, D), k and v (B, Lk, Hkv, D), each contiguous in that order
// (the layout a linear projection writes); Hq is a multiple of Hkv.
// The scale is given per call.
type AttnDesc struct {
	B, Lq, Lk, Hq, Hkv, D int
	DType                 DType // F16 or BF16 (without FP8)
	// FP8: q, k, v and o are FP8 E4M3 codes with per-tensor scales, and the
	// probabilities are rounded to E4M3 (scaled by 448) before the second
	// product (cuDNN's FP8 attention, Hopper and newer; Hopper's engines
	// write o in FP8 only). DType is then unused.
	FP8 bool
}

func (d AttnDesc) String() string {
	dt := d.DType.String()
	if d.FP8 {
		dt = "fp8"
	}
	return fmt.Sprintf("attention %s B=%d Lq=%d Lk=%d heads %d/%d×%d", dt, d.B, d.Lq, d.Lk, d.Hq, d.Hkv, d.D)
}

// Validate reports a description no engine could take.
func (d AttnDesc) Validate() error {
	if d.B <= 0 || d.Lq <= 0 || d.Lk <= 0 || d.Hq <= 0 || d.Hkv <= 0 || d.D <= 0 || d.Hq%d.Hkv != 0 {
		return fmt.Errorf("miopen: invalid %v", d)
	}
	if !d.FP8 && d.DType != F16 && d.DType != BF16 {
		return fmt.Errorf("miopen: %v: %w", d, ErrNoFusedAttention)
	}
	if d.FP8 && d.Hq != d.Hkv {
		return fmt.Errorf("miopen: %v: grouped heads in FP8: %w", d, ErrNoFusedAttention)
	}
	return nil
}

// FLOPs counts the two products' multiply-adds twice.
func (d AttnDesc) FLOPs() float64 {
	return 4 * float64(d.B) * float64(d.Hq) * float64(d.Lq) * float64(d.Lk) * float64(d.D)
}

// AttnPlan is the engine cuDNN chose for one AttnDesc.
type AttnPlan struct {
	Desc           AttnDesc
	WorkspaceBytes int64
	// Engine names the engine configuration (cuDNN's global engine index).
	Engine string
}

// attnPlan is a built plan (or why none could be built) and the
// descriptors it keeps alive.
type attnPlan struct {
	plan  AttnPlan
	exec  uintptr
	descs []uintptr
	err   error
}

// FP8Scales are an FP8 attention's scale factors, one f32 on the device
// each: the descales of q, k and v (a value is its code times its
// descale), the descale and scale of the probabilities (1/448 and 448: P
// lies in [0, 1]) and o's scale (o's code is its value times it). AmaxS
// and AmaxO are two f32 the graph writes, the largest probability and |o|
// (cuDNN's FP8 attention computes them; nothing here reads them).
type FP8Scales struct {
	DescaleQ, DescaleK, DescaleV uintptr
	DescaleS, ScaleS, ScaleO     uintptr
	AmaxS, AmaxO                 uintptr
}

// E4M3Max is the largest finite FP8 E4M3 value.
const E4M3Max = 448
