package tiles

import (
	"errors"
	"fmt"

	"github.com/framepack-go/framepack/tensor"
)

// Choose is the first tiling of ladder (largest tiles first) whose
// predicted peak fits budget, or the one of smallest peak when none does,
// with that peak.
func Choose[T any](ladder []T, peak func(T) int64, budget int64) (T, int64) {
	var best T
	bestPeak := int64(-1)
	for _, t := range ladder {
		p := peak(t)
		if p <= budget {
			return t, p
		}
		if bestPeak < 0 || p < bestPeak {
			best, bestPeak = t, p
		}
	}
	return best, bestPeak
}

// Smaller is the first tiling of ladder predicted to need less memory than
// cur, for a retry after an out-of-memory failure.
func Smaller[T any](ladder []T, peak func(T) int64, cur T) (T, bool) {
	now := peak(cur)
	for _, t := range ladder {
		if peak(t) < now {
			return t, true
		}
	}
	var none T
	return none, false
}

// Shrinking runs once at tiling til. When it runs out of memory it runs
// again at smaller(til), and so on, unless noRetry; logf (when set) hears
// of each retry, as what (say "vae: decode") ran out of memory. It returns
// the tiling that succeeded and the number of retries. Any other failure,
// or one at the smallest tiling, panics as an *tensor.OpError of op.
func Shrinking[T fmt.Stringer](op, what string, til T, noRetry bool, logf func(string, ...any), once func(T), smaller func(T) (T, bool)) (T, int) {
	for retries := 0; ; retries++ {
		err := tensor.Catch(func() { once(til) })
		if err == nil {
			return til, retries
		}
		if !errors.Is(err, tensor.ErrOutOfMemory) || noRetry {
			panic(err)
		}
		next, ok := smaller(til)
		if !ok {
			panic(&tensor.OpError{Op: op, Err: fmt.Errorf("out of memory at the smallest tiling (%s): %w", til, err)})
		}
		if logf != nil {
			logf("%s ran out of memory at %s (%v); retrying at %s", what, til, err, next)
		}
		til = next
	}
}
