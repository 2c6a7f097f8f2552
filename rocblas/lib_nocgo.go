//go:build !cgo

package rocblas

import "github.com/framepack-go/framepack/internal/dynlib"

var errNoCgo = dynlib.ErrNoCgo

// NewHandle fails: this build cannot load GPU libraries.
func (l *Lib) NewHandle(uintptr) (*Handle, error) { return nil, errNoCgo }

// SetStream fails: this build cannot load GPU libraries.
func (h *Handle) SetStream(uintptr) error { return errNoCgo }

// Close does nothing in this build.
func (h *Handle) Close() error { return nil }

// GemmStridedBatched fails: this build cannot load GPU libraries.
func (h *Handle) GemmStridedBatched(Gemm) error { return errNoCgo }

// MatMul fails: this build cannot load GPU libraries.
func (h *Handle) MatMul(MatMul) error { return errNoCgo }
