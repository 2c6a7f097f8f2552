//go:build !cgo

package dynlib

// Open fails: this build has no loader.
func Open(string, []Symbol) (*Table, error) { return nil, ErrNoCgo }
