//go:build !cgo

package miopen

import "github.com/framepack-go/framepack/internal/dynlib"

var errNoCgo = dynlib.ErrNoCgo

// NewHandle fails: this build cannot load GPU libraries.
func (l *Lib) NewHandle(uintptr) (*Handle, error) { return nil, errNoCgo }

// SetStream fails: this build cannot load GPU libraries.
func (h *Handle) SetStream(uintptr) error { return errNoCgo }

// Close does nothing in this build.
func (h *Handle) Close() error { return nil }

func (h *Handle) forget() {}

// Plan fails: this build cannot load GPU libraries.
func (h *Handle) Plan(ConvDesc) (Plan, error) { return Plan{}, errNoCgo }

// PlanWith fails: this build cannot load GPU libraries.
func (h *Handle) PlanWith(ConvDesc, uint64) (Plan, error) { return Plan{}, errNoCgo }

// Conv3dForward fails: this build cannot load GPU libraries.
func (h *Handle) Conv3dForward(ConvDesc, uintptr, uintptr, uintptr, uintptr) error { return errNoCgo }

// Conv3dForwardBias fails: this build cannot load GPU libraries.
func (h *Handle) Conv3dForwardBias(ConvDesc, uintptr, uintptr, uintptr, uintptr, uintptr) (bool, error) {
	return false, errNoCgo
}

// Search fails: this build cannot load GPU libraries.
func (h *Handle) Search(ConvDesc, uintptr, uintptr, uintptr, uintptr, int64) ([]Plan, error) {
	return nil, errNoCgo
}

// PlanAttention fails: this build cannot load GPU libraries.
func (h *Handle) PlanAttention(AttnDesc) (AttnPlan, error) { return AttnPlan{}, errNoCgo }

// Attention fails: this build cannot load GPU libraries.
func (h *Handle) Attention(AttnDesc, uintptr, uintptr, uintptr, uintptr, float32, uintptr) error {
	return errNoCgo
}

// HasFusedAttention is false in this build.
func (l *Lib) HasFusedAttention() bool { return false }

// AttentionFP8 fails: this build cannot load GPU libraries.
func (h *Handle) AttentionFP8(AttnDesc, uintptr, uintptr, uintptr, uintptr, float32, FP8Scales, uintptr) error {
	return errNoCgo
}
