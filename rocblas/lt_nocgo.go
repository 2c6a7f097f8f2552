//go:build !cgo

package rocblas

// NewHandle fails: this build cannot load GPU libraries.
func (l *LtLib) NewHandle(stream, workspace uintptr, wsBytes int64) (*LtHandle, error) {
	return nil, errNoCgo
}

// Close does nothing in this build.
func (h *LtHandle) Close() error { return nil }

// Linear fails: this build cannot load GPU libraries.
func (h *LtHandle) Linear(LtLinear) error { return errNoCgo }
