package memory

import (
	"fmt"
	"sync/atomic"

	"github.com/framepack-go/framepack/tensor"
)

// FailingAlloc is a tensor.Backend whose Nth allocation fails with an
// out-of-memory error, for fault-injection tests (FRAMEPACK_FAULTS
// alloc.nth=N). Everything else is the inner backend's.
type FailingAlloc struct {
	tensor.Backend
	nth   int64
	count atomic.Int64
}

// FailNth wraps be so that its nth allocation (1-based) fails; n ≤ 0 fails
// none, which makes the wrapper an allocation counter.
func FailNth(be tensor.Backend, n int) *FailingAlloc {
	return &FailingAlloc{Backend: be, nth: int64(n)}
}

// Alloc counts the allocation and fails the nth.
func (f *FailingAlloc) Alloc(n int64) (tensor.Buffer, error) {
	if c := f.count.Add(1); c == f.nth {
		return nil, &OOMError{Device: f.Backend.Name(), Requested: n, Injected: fmt.Sprintf("alloc.nth=%d", f.nth)}
	}
	return f.Backend.Alloc(n)
}

// Allocs is the number of allocations asked for so far, the failed one
// included.
func (f *FailingAlloc) Allocs() int { return int(f.count.Load()) }

// Unwrap is the inner backend.
func (f *FailingAlloc) Unwrap() tensor.Backend { return f.Backend }
