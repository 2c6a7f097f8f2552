//go:build !cgo

package hip

// Without cgo there is no driver table: Load and Open report that GPU
// support needs cgo.
