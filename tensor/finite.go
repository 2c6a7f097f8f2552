package tensor

import (
	"fmt"
	"math"
	"runtime"
	"sync"
)

// NonFinite counts the NaN and the ±Inf elements of t (0, 0 for integer
// dtypes). A device tensor is downloaded first, so it is meant for tensors
// on the host already or small ones: the engine checks the latents and
// pixels it copies to the host anyway, once per stage.
func NonFinite(t *Tensor) (nan, inf int) {
	if t == nil || t.buf == nil {
		return 0, 0
	}
	h := ToHost(t)
	count := func(isNaN bool) {
		if isNaN {
			nan++
		} else {
			inf++
		}
	}
	switch t.dtype {
	case F32:
		// Exponent all ones: Inf with a zero mantissa, NaN otherwise. On
		// the bits, in parallel: the pixels of a 640 section are 42 M values.
		nan, inf = nonFinite32(h.Float32s())
	case F64:
		for _, x := range ViewAs[float64](h.HostBytes()) {
			if x-x != 0 {
				count(x != x)
			}
		}
	case F16, BF16:
		// Exponent all ones: Inf with a zero mantissa, NaN otherwise.
		expMask, manMask := uint16(0x7c00), uint16(0x03ff)
		if t.dtype == BF16 {
			expMask, manMask = 0x7f80, 0x007f
		}
		for _, b := range h.Uint16s() {
			if b&expMask == expMask {
				count(b&manMask != 0)
			}
		}
	}
	return nan, inf
}

// NonFiniteError is nil when t holds only finite values, else an error
// saying how many NaN and Inf it holds, prefixed with what.
func NonFiniteError(what string, t *Tensor) error {
	nan, inf := NonFinite(t)
	if nan == 0 && inf == 0 {
		return nil
	}
	return fmt.Errorf("%s: %d NaN and %d Inf of %d values %v", what, nan, inf, t.Numel(), t.shape)
}

// nonFinite32 counts NaN and Inf in v from the bits, over the cores for
// long slices.
func nonFinite32(v []float32) (nan, inf int) {
	const chunk = 1 << 20
	count := func(v []float32) (nan, inf int) {
		for _, x := range v {
			if u := math.Float32bits(x); u&0x7f800000 == 0x7f800000 {
				if u&0x007fffff != 0 {
					nan++
				} else {
					inf++
				}
			}
		}
		return nan, inf
	}
	parts := min(runtime.GOMAXPROCS(0), (len(v)+chunk-1)/chunk)
	if parts <= 1 {
		return count(v)
	}
	type result struct{ nan, inf int }
	out := make([]result, parts)
	var wg sync.WaitGroup
	for i := range parts {
		lo, hi := i*len(v)/parts, (i+1)*len(v)/parts
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i].nan, out[i].inf = count(v[lo:hi])
		}()
	}
	wg.Wait()
	for _, r := range out {
		nan += r.nan
		inf += r.inf
	}
	return nan, inf
}
