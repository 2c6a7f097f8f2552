package weights

import (
	"hash/fnv"
	"math"
	"runtime"
	"strings"
	"sync"

	"github.com/framepack-go/framepack/tensor"
)

// RandomChunk is how many values of a tensor FillRandom draws from one
// seed: the values of a chunk depend only on the seed, the tensor's name and
// the chunk's index, so they can be drawn in parallel, in any order, by any
// number of workers.
const RandomChunk = 1 << 21

// initStd is transformers' initializer_range for every model here (LLaMA,
// CLIP and SigLIP configs all say 0.02); diffusers' linears get the same.
const initStd = 0.02

// initOf is how a tensor's values are drawn, from its name and shape, as
// Hugging Face's _init_weights and PyTorch's module defaults initialise
// them: convolutions (rank ≥ 3) uniform in ±1/√fan_in (kaiming_uniform with
// a = √5); linears and embeddings (rank 2) normal(0, 0.02); biases 0; norm
// weights 1. This keeps a 32-layer fp16 LLaMA and the 60-block transformer
// finite.
func initOf(sp Spec) (normal bool, scale, constant float32) {
	switch {
	case len(sp.Shape) >= 3:
		return false, float32(1 / math.Sqrt(float64(Spec{Shape: sp.Shape[1:]}.Numel()))), 0
	case len(sp.Shape) == 2:
		return true, initStd, 0
	case len(sp.Shape) == 1 && !strings.HasSuffix(sp.Name, "bias"):
		return false, 0, 1
	}
	return false, 0, 0
}

// FillRandom writes chunk c (values c·RandomChunk onwards, as many as dst
// holds) of tensor sp's seeded random values into dst, as dtype dt (F32,
// F16 or BF16).
func FillRandom(dst []byte, dt tensor.DType, sp Spec, seed uint64, c int64) {
	fillRandom(dst, dt, tensor.Invalid, sp, seed, c)
}

func fillRandom(dst []byte, dt, round tensor.DType, sp Spec, seed uint64, c int64) {
	n := len(dst) / dt.Size()
	normal, scale, constant := initOf(sp)
	var buf [1024]float32
	if scale == 0 {
		for i := range buf {
			buf[i] = constant
		}
	}
	h := fnv.New64a()
	h.Write([]byte(sp.Name))
	x := seed ^ h.Sum64() ^ uint64(c)*0xd1342543de82ef95
	const golden = 0x9e3779b97f4a7c15
	for lo := 0; lo < n; lo += len(buf) {
		v := buf[:min(len(buf), n-lo)]
		switch {
		case scale == 0:
		case normal:
			// The sum of four 16-bit uniforms (Irwin–Hall): mean 2,
			// variance 1/3, so (sum − 2)·√3 has the normal's mean and
			// variance, its tails cut at ±3.46σ; one random word a value.
			k := float32(math.Sqrt(3)) * scale / 65536
			for i := range v {
				x += golden
				z := splitmix(x)
				s := int64(z&0xffff) + int64(z>>16&0xffff) + int64(z>>32&0xffff) + int64(z>>48) - 2*65535
				v[i] = float32(s) * k
			}
		default:
			k := scale / (1 << 23)
			for i := range v {
				x += golden
				v[i] = float32(int64(splitmix(x)>>40)-(1<<23)) * k
			}
		}
		switch {
		case round == tensor.BF16 && dt == tensor.F32:
			for i, f := range v {
				v[i] = tensor.RoundBF16(f)
			}
		case round == tensor.F16 && dt == tensor.F32:
			for i, f := range v {
				v[i] = tensor.RoundF16(f)
			}
		}
		out := dst[lo*dt.Size() : (lo+len(v))*dt.Size()]
		switch dt {
		case tensor.F32:
			copy(tensor.ViewAs[float32](out), v)
		case tensor.BF16:
			u := tensor.ViewAs[uint16](out)
			for i, f := range v {
				u[i] = halfBF16(f)
			}
		case tensor.F16:
			u := tensor.ViewAs[uint16](out)
			for i, f := range v {
				u[i] = halfF16(f)
			}
		}
	}
}

// splitmix is splitmix64's output function.
func splitmix(z uint64) uint64 {
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// fillRandomParallel fills the whole of tensor sp into dst, its chunks in
// parallel.
func fillRandomParallel(dst []byte, dt, round tensor.DType, sp Spec, seed uint64) {
	n := int64(len(dst) / dt.Size())
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	for c := int64(0); c*RandomChunk < n; c++ {
		lo, hi := c*RandomChunk, min(n, (c+1)*RandomChunk)
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			fillRandom(dst[lo*int64(dt.Size()):hi*int64(dt.Size())], dt, round, sp, seed, c)
		}()
	}
	wg.Wait()
}

// halfBF16 rounds a finite f32 to bfloat16 (nearest even), without the
// NaN handling of tensor.BF16FromF32: random values are finite.
func halfBF16(f float32) uint16 {
	b := math.Float32bits(f)
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}

// halfF16 rounds f to IEEE half (nearest even): the normal range by bit
// arithmetic, the rest (subnormals, overflow) through the exact converter.
func halfF16(f float32) uint16 {
	b := math.Float32bits(f)
	a := b & 0x7fffffff
	if a < 0x38800000 || a >= 0x477ff000 { // below 2⁻¹⁴, or rounds to ∞
		return tensor.F16FromF32(f)
	}
	a -= 112 << 23 // rebias the exponent from 127 to 15
	return uint16(b>>16)&0x8000 | uint16((a+0xfff+(a>>13)&1)>>13)
}
