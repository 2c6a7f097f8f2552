package sampler

import "math"

// TorchGenerator reproduces torch.Generator("cpu").manual_seed(seed) and the
// float32 torch.randn it feeds, so a seed gives the same noise — section
// after section — as the PyTorch reference.
//
// The engine is MT19937 (32-bit). torch.randn fills a float32 tensor of 16 or
// more elements with 24-bit uniforms, then turns each block of 16 into
// normals with Box–Muller (pairs j, j+8); a tail shorter than 16 is handled
// by redrawing the last 16 slots and transforming them as one block. Smaller
// tensors take torch's scalar path instead: double-precision Box–Muller on
// 53-bit uniforms, whose second value is cached in the generator for the
// next draw.
type TorchGenerator struct {
	mt       [mtN]uint32
	idx      int
	cached   float64 // the spare normal of the scalar path
	hasCache bool
}

const (
	mtN = 624
	mtM = 397
)

// NewTorchGenerator returns a generator in the state of
// torch.Generator("cpu").manual_seed(seed). Torch seeds MT19937 with the low
// 32 bits of the seed.
func NewTorchGenerator(seed uint64) *TorchGenerator {
	g := &TorchGenerator{}
	g.Seed(seed)
	return g
}

// Seed resets the generator as manual_seed does (the cached normal is
// dropped too).
func (g *TorchGenerator) Seed(seed uint64) {
	g.mt[0] = uint32(seed)
	for i := 1; i < mtN; i++ {
		prev := g.mt[i-1]
		g.mt[i] = 1812433253*(prev^(prev>>30)) + uint32(i)
	}
	g.idx = mtN
	g.hasCache = false
	g.cached = 0
}

// Uint32 is the next raw MT19937 output.
func (g *TorchGenerator) Uint32() uint32 {
	if g.idx >= mtN {
		g.twist()
	}
	y := g.mt[g.idx]
	g.idx++
	y ^= y >> 11
	y ^= (y << 7) & 0x9d2c5680
	y ^= (y << 15) & 0xefc60000
	y ^= y >> 18
	return y
}

func (g *TorchGenerator) twist() {
	const upper, lower, matrixA = 0x80000000, 0x7fffffff, 0x9908b0df
	for i := 0; i < mtN; i++ {
		y := (g.mt[i] & upper) | (g.mt[(i+1)%mtN] & lower)
		v := g.mt[(i+mtM)%mtN] ^ (y >> 1)
		if y&1 != 0 {
			v ^= matrixA
		}
		g.mt[i] = v
	}
	g.idx = 0
}

// uint64 is torch's random64: two draws, the first in the high word.
func (g *TorchGenerator) uint64() uint64 {
	hi := g.Uint32()
	lo := g.Uint32()
	return uint64(hi)<<32 | uint64(lo)
}

// uniform32 is a float32 in [0, 1) with 24 random bits.
func (g *TorchGenerator) uniform32() float32 {
	return float32(g.Uint32()&(1<<24-1)) * (1.0 / (1 << 24))
}

// uniform64 is a float64 in [0, 1) with 53 random bits.
func (g *TorchGenerator) uniform64() float64 {
	return float64(g.uint64()&(1<<53-1)) * (1.0 / (1 << 53))
}

// normal64 is torch's scalar normal_distribution<double>: Box–Muller on two
// uniforms, returning r·cos θ and keeping r·sin θ for the next call.
func (g *TorchGenerator) normal64() float64 {
	if g.hasCache {
		g.hasCache = false
		return g.cached
	}
	u1 := g.uniform64()
	u2 := g.uniform64()
	r := math.Sqrt(-2 * math.Log1p(-u2))
	theta := 2 * math.Pi * u1
	g.cached, g.hasCache = r*math.Sin(theta), true
	return r * math.Cos(theta)
}

// Randn draws a float32 tensor of the given shape (row-major) from the
// standard normal, as torch.randn(shape, generator=g) does on the CPU.
func (g *TorchGenerator) Randn(shape ...int) []float32 {
	n := 1
	for _, d := range shape {
		if d < 0 {
			panic("sampler: Randn of a negative dimension")
		}
		n *= d
	}
	out := make([]float32, n)
	g.Fill(out)
	return out
}

// Fill fills dst with standard normals as torch.randn fills a contiguous
// float32 tensor of len(dst) elements.
func (g *TorchGenerator) Fill(dst []float32) {
	n := len(dst)
	if n < 16 {
		for i := range dst {
			dst[i] = float32(g.normal64())
		}
		return
	}
	for i := range dst {
		dst[i] = g.uniform32()
	}
	for i := 0; i+16 <= n; i += 16 {
		boxMuller16(dst[i : i+16])
	}
	if n%16 != 0 {
		tail := dst[n-16:]
		for i := range tail {
			tail[i] = g.uniform32()
		}
		boxMuller16(tail)
	}
}

// boxMuller16 turns 16 uniforms into 16 normals in float32: slots j and j+8
// share one radius and angle. It follows torch's AVX2 kernel (the one x86
// builds run), whose log and sincos are Cephes polynomials in float32; they
// differ from libm in the last bits, so they are reproduced step by step.
func boxMuller16(d []float32) {
	const twoPi = float32(2 * math.Pi)
	for j := 0; j < 8; j++ {
		u1 := 1 - d[j] // [0, 1) → (0, 1] for the log
		u2 := d[j+8]
		radius := float32(math.Sqrt(float64(-2 * cephesLog(u1)))) // correctly rounded, as vsqrtps
		sin, cos := cephesSincos(float32(twoPi * u2))
		d[j] = float32(radius * cos)
		d[j+8] = float32(radius * sin)
	}
}

// Cephes single-precision coefficients (as in Pommier's sse_mathfun, which
// torch's avx_mathfun follows); polynomials from the highest power down.
const (
	cephesSqrtHF = float32(0.707106781186547524)
	logQ1        = float32(-2.12194440e-4)
	logQ2        = float32(0.693359375)
	fourOverPi   = float32(1.27323954473516)
)

var (
	logP = [...]float32{7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1, 1.4249322787e-1,
		-1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1, 3.3333331174e-1}
	sinP = [...]float32{-1.9515295891e-4, 8.3321608736e-3, -1.6666654611e-1}
	cosP = [...]float32{2.443315711809948e-5, -1.388731625493765e-3, 4.166664568298827e-2}
	// π/4 in three parts, subtracted one after another.
	dp = [...]float32{-0.78515625, -2.4187564849853515625e-4, -3.77489497744594108e-8}
)

// horner is the polynomial p (highest power first) at x, one fused
// multiply-add a step, as the vector code evaluates it.
func horner(p []float32, x float32) float32 {
	y := p[0]
	for _, c := range p[1:] {
		y = fma32(y, x, c)
	}
	return y
}

// fma32 is a·b + c rounded once to float32. Torch's AVX2 kernels are built
// with FMA enabled and the compiler fuses their multiply-add pairs; which
// pairs it fuses was settled against torch's own output (bit-exact on 860k
// draws).
func fma32(a, b, c float32) float32 {
	// a·b is exact in float64; the sum is rounded to odd there so that the
	// final rounding to float32 is not a double rounding.
	p := float64(a) * float64(b)
	s := p + float64(c)
	bp := s - float64(c)
	err := (p - bp) + (float64(c) - (s - bp)) // TwoSum: s + err = p + c exactly
	if err != 0 && !math.IsInf(s, 0) {
		bits := math.Float64bits(s)
		if (err > 0) == (s > 0) {
			bits |= 1
		} else if bits&1 == 0 {
			bits--
		}
		s = math.Float64frombits(bits)
	}
	return float32(s)
}

// cephesLog is ln x for x > 0, operation by operation as the vector code
// runs (explicit conversions keep Go from fusing anything else).
func cephesLog(x float32) float32 {
	if x < 0x1p-126 {
		x = 0x1p-126 // flush denormals as the vector code does
	}
	bits := math.Float32bits(x)
	e := float32(int32(bits>>23)-0x7f) + 1
	m := math.Float32frombits(bits&^0x7f800000 | math.Float32bits(0.5)) // mantissa in [0.5, 1)
	if m < cephesSqrtHF {
		e--
		m = float32(m-1) + m
	} else {
		m = m - 1
	}
	z := float32(m * m)
	y := float32(horner(logP[:], m) * m)
	y = fma32(y, z, float32(e*logQ1))
	y = fma32(-z, 0.5, y)
	return fma32(e, logQ2, m+y)
}

// cephesSincos is sin x and cos x for x ≥ 0 (the angles here are in
// [0, 2π)), reduced by multiples of π/4 in three parts.
func cephesSincos(x float32) (sin, cos float32) {
	signSin := x < 0
	if signSin {
		x = -x
	}
	j := int32(float32(x * fourOverPi)) // truncation, as cvttps
	j = (j + 1) &^ 1
	y := float32(j)
	if j&4 != 0 {
		signSin = !signSin
	}
	signCos := (j-2)&4 == 0
	for _, d := range dp {
		x = fma32(y, d, x)
	}

	z := float32(x * x)
	pc := float32(horner(cosP[:], z) * z)
	pc = fma32(pc, z, -float32(z*0.5))
	pc = pc + 1

	ps := float32(horner(sinP[:], z) * z)
	ps = fma32(ps, x, x)

	if j&2 == 0 {
		sin, cos = ps, pc
	} else {
		sin, cos = pc, ps
	}
	if signSin {
		sin = -sin
	}
	if signCos {
		cos = -cos
	}
	return sin, cos
}
