//go:build !cgo

package miopen

import "errors"

var errNoCgo = errors.New("built without cgo: GPU libraries cannot be loaded")

func symbols(Vendor) ([]string, []bool) { return nil, nil }

func load(Vendor, string) (*Lib, error) { return nil, errNoCgo }

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

// Search fails: this build cannot load GPU libraries.
func (h *Handle) Search(ConvDesc, uintptr, uintptr, uintptr, uintptr, int64) ([]Plan, error) {
	return nil, errNoCgo
}
