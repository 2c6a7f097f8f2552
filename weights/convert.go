package weights

import (
	"math"
	"runtime"
	"sync"
	"unsafe"

	"github.com/framepack-go/framepack/tensor"
)

// convertible reports whether a stored dtype loads as dt.
func convertible(from, to tensor.DType) bool {
	if from == to {
		return true
	}
	fromFloat := from == tensor.F32 || from == tensor.F16 || from == tensor.BF16 || from == tensor.F64 || from == tensor.F8E4M3
	toFloat := to == tensor.F32 || to == tensor.F16 || to == tensor.BF16
	return fromFloat && toFloat
}

func aligned(b []byte, size int) bool {
	return len(b) == 0 || uintptr(unsafe.Pointer(&b[0]))%uintptr(size) == 0
}

// parallelMin is the element count above which conversion is split over
// the CPUs; below it goroutines cost more than they save.
const parallelMin = 1 << 18

// convert writes the elements of src (dtype from) into dst as dtype to; both
// hold the same element count and convertible(from, to) holds. Large tensors
// are converted in parallel chunks.
func convert(dst []byte, to tensor.DType, src []byte, from tensor.DType) {
	if !aligned(src, from.Size()) {
		// Misaligned data (a file with odd offsets): typed access needs a copy.
		src = append(tensor.NewHostBuffer(int64(len(src))).Data()[:0], src...)
	}
	n := len(src) / from.Size()
	workers := runtime.GOMAXPROCS(0)
	if n < parallelMin || workers < 2 {
		convertRange(dst, to, src, from, 0, n)
		return
	}
	// Chunks are multiples of 64 elements, so no two workers share a
	// cache line of the output.
	chunk := (n/workers + 63) &^ 63
	var wg sync.WaitGroup
	for lo := 0; lo < n; lo += chunk {
		hi := min(lo+chunk, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			convertRange(dst, to, src, from, lo, hi)
		}()
	}
	wg.Wait()
}

// convertRange converts elements [lo, hi).
func convertRange(dst []byte, to tensor.DType, src []byte, from tensor.DType, lo, hi int) {
	if from == to {
		s := from.Size()
		copy(dst[lo*s:hi*s], src[lo*s:hi*s])
		return
	}
	if hi <= lo {
		return
	}
	switch from {
	case tensor.F32:
		in := tensor.ViewAs[float32](src)[lo:hi]
		switch to {
		case tensor.F16:
			tensor.NarrowF16(tensor.ViewAs[uint16](dst)[lo:hi], in)
		case tensor.BF16:
			tensor.NarrowBF16(tensor.ViewAs[uint16](dst)[lo:hi], in)
		}
	case tensor.F16, tensor.BF16:
		in := tensor.ViewAs[uint16](src)[lo:hi]
		if to == tensor.F32 {
			widen16(tensor.ViewAs[float32](dst)[lo:hi], in, from)
			return
		}
		// f16 ↔ bf16 through f32: widening is exact, so the one rounding
		// is the narrowing.
		var tmp [1024]float32
		out := tensor.ViewAs[uint16](dst)[lo:hi]
		for i := 0; i < len(in); i += len(tmp) {
			j := min(i+len(tmp), len(in))
			widen16(tmp[:j-i], in[i:j], from)
			narrow16(out[i:j], tmp[:j-i], to)
		}
	case tensor.F8E4M3: // exact in every float dtype (a scale is applied before: fp8.go)
		in := src[lo:hi]
		if to == tensor.F32 {
			tensor.WidenF8E4M3(tensor.ViewAs[float32](dst)[lo:hi], in)
			return
		}
		var tmp [1024]float32
		out := tensor.ViewAs[uint16](dst)[lo:hi]
		for i := 0; i < len(in); i += len(tmp) {
			j := min(i+len(tmp), len(in))
			tensor.WidenF8E4M3(tmp[:j-i], in[i:j])
			narrow16(out[i:j], tmp[:j-i], to)
		}
	case tensor.F64:
		in := tensor.ViewAs[float64](src)[lo:hi]
		if to == tensor.F32 {
			out := tensor.ViewAs[float32](dst)[lo:hi]
			for i, v := range in {
				out[i] = float32(v) // round to nearest even
			}
			return
		}
		// Rounding to f32 first and then to 16 bits could round twice;
		// rounding to odd in f32 keeps the final rounding exact.
		out := tensor.ViewAs[uint16](dst)[lo:hi]
		for i, v := range in {
			f := toOddF32(v)
			if to == tensor.F16 {
				out[i] = tensor.F16FromF32(f)
			} else {
				out[i] = tensor.BF16FromF32(f)
			}
		}
	}
}

func widen16(dst []float32, src []uint16, from tensor.DType) {
	if from == tensor.F16 {
		tensor.WidenF16(dst, src)
	} else {
		tensor.WidenBF16(dst, src)
	}
}

func narrow16(dst []uint16, src []float32, to tensor.DType) {
	if to == tensor.F16 {
		tensor.NarrowF16(dst, src)
	} else {
		tensor.NarrowBF16(dst, src)
	}
}

// toOddF32 rounds v to float32 by truncation, setting the last mantissa bit
// when the result is inexact ("round to odd"). A later round-to-nearest-even
// to a format at least two bits narrower then equals a direct rounding of v.
func toOddF32(v float64) float32 {
	f := float32(v)
	if math.IsInf(float64(f), 0) || math.IsNaN(v) || float64(f) == v {
		return f
	}
	b := math.Float32bits(f)
	if math.Abs(float64(f)) > math.Abs(v) {
		b-- // step toward zero: the truncated value
	}
	return math.Float32frombits(b | 1)
}
