// Package backendtest is one op suite for every tensor.Backend: each op on
// random inputs of several shapes, odd ones included, in every dtype it
// supports, compared with the CPU backend (the reference, itself tested
// against float64 math). The CPU posing as a device, the GPU in each of
// its configurations and the wrapping backends (memory's budget, the conv3d
// chain) all run it from their tests.
package backendtest

import (
	"bytes"
	"fmt"
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/framepack-go/framepack/backend/cpu"
	"github.com/framepack-go/framepack/tensor"
)

// Env runs one op on the reference and on the backend under test and
// compares the results.
type Env struct {
	T   *testing.T
	Ref tensor.Backend // the CPU backend
	Got tensor.Backend // the backend under test
	Rng *rand.Rand
}

// Case is one entry of the suite.
type Case struct {
	Name string
	Fn   func(*Env)
}

// Cases is every op of tensor.Backend and the optional ones (fused
// kernels, the padded conv3d), which skip on a backend without them.
var Cases = []Case{
	{"fill", Fill},
	{"cast", Cast},
	{"copy", Copy},
	{"unary", Unary},
	{"binary", Binary},
	{"group_norm", GroupNorm},
	{"layer_norm", LayerNorm},
	{"rms_norm", RMSNorm},
	{"softmax", Softmax},
	{"reduce", Reduce},
	{"attention", Attention},
	{"rope", RoPE},
	{"pad", Pad},
	{"upsample", Upsample},
	{"avg_pool3d", AvgPool},
	{"embedding", Embedding},
	{"matmul", MatMul},
	{"linear", Linear},
	{"conv3d", Conv3d},
	{"fused", Fused},
	{"conv3d_padded", PaddedConv},
	{"conv3d_last", ChannelsLastConv},
	{"fp8_compute", FP8Compute},
}

// Select is the cases of Cases with these names, in the order given;
// an unknown name panics (a typo in a test).
func Select(names ...string) []Case {
	var out []Case
	for _, n := range names {
		found := false
		for _, c := range Cases {
			if c.Name == n {
				out = append(out, c)
				found = true
			}
		}
		if !found {
			panic("backendtest: no case " + n)
		}
	}
	return out
}

// Run runs cases (all of Cases when none is given) on be, each a subtest,
// against a CPU backend.
func Run(t *testing.T, be tensor.Backend, cases ...Case) {
	if len(cases) == 0 {
		cases = Cases
	}
	ref := cpu.New()
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			c.Fn(&Env{T: t, Ref: ref, Got: be, Rng: rand.New(rand.NewSource(int64(len(c.Name))))})
		})
	}
}

var floats = []tensor.DType{tensor.F32, tensor.F16, tensor.BF16}

// HostOf makes a host tensor of dt from values (rounded to dt).
func HostOf(dt tensor.DType, vals []float64, shape ...int) *tensor.Tensor {
	h := tensor.New(dt, shape...)
	switch dt {
	case tensor.F32:
		for i, v := range vals {
			h.Float32s()[i] = float32(v)
		}
	case tensor.F16:
		for i, v := range vals {
			h.Uint16s()[i] = tensor.F16FromF32(float32(v))
		}
	case tensor.BF16:
		for i, v := range vals {
			h.Uint16s()[i] = tensor.BF16FromF32(float32(v))
		}
	case tensor.I64:
		for i, v := range vals {
			h.Int64s()[i] = int64(v)
		}
	case tensor.I32:
		for i, v := range vals {
			h.Int32s()[i] = int32(v)
		}
	case tensor.U8, tensor.Bool:
		for i, v := range vals {
			h.Uint8s()[i] = uint8(int64(v))
		}
	}
	return h
}

// Rand makes random values in [lo, hi) (integers for integer dtypes).
func (e *Env) Rand(dt tensor.DType, lo, hi float64, shape ...int) *tensor.Tensor {
	n := tensor.Numel(shape)
	vals := make([]float64, n)
	for i := range vals {
		v := lo + (hi-lo)*e.Rng.Float64()
		switch dt {
		case tensor.I64, tensor.I32, tensor.U8:
			v = math.Floor(v)
		case tensor.Bool:
			v = float64(e.Rng.Intn(2))
		}
		vals[i] = v
	}
	return HostOf(dt, vals, shape...)
}

// On copies a host tensor onto a backend.
func (e *Env) On(be tensor.Backend, h *tensor.Tensor) *tensor.Tensor {
	if h == nil {
		return nil
	}
	t, err := tensor.Alloc(be, h.DType(), h.Shape()...)
	if err != nil {
		e.T.Fatal(err)
	}
	if err := be.Upload(t.Buffer(), 0, h.HostBytes()); err != nil {
		e.T.Fatal(err)
	}
	e.T.Cleanup(func() { tensor.Release(t) })
	return t
}

// Pair is a host tensor on both backends.
func (e *Env) Pair(h *tensor.Tensor) [2]*tensor.Tensor {
	return [2]*tensor.Tensor{e.On(e.Ref, h), e.On(e.Got, h)}
}

// Out allocates a poisoned output on both backends (NaN for floats), so an
// element a kernel fails to write shows.
func (e *Env) Out(dt tensor.DType, shape ...int) [2]*tensor.Tensor {
	var r [2]*tensor.Tensor
	for i, be := range []tensor.Backend{e.Ref, e.Got} {
		t, err := tensor.Alloc(be, dt, shape...)
		if err != nil {
			e.T.Fatal(err)
		}
		e.T.Cleanup(func() { tensor.Release(t) })
		poison := math.NaN()
		if !dt.IsFloat() {
			poison = 77
		}
		if dt == tensor.F8E4M3 && t.Numel() > 0 { // a storage type: no Fill; NaN codes
			if err := be.Upload(t.Buffer(), 0, bytes.Repeat([]byte{0x7f}, t.Numel())); err != nil {
				e.T.Fatal(err)
			}
		} else if t.Numel() > 0 {
			if err := be.Fill(t, poison); err != nil {
				e.T.Fatal(err)
			}
		}
		r[i] = t
	}
	return r
}

// tol is the relative tolerance of one output element: about two units in
// the last place of f16/bf16 (both backends compute in f32 and round once,
// so they differ by a rounding at most), plus f32 rounding error that
// scale widens for long accumulations. Integers must match exactly.
func tol(dt tensor.DType, scale float64) float64 {
	f32 := 2e-5 * scale
	switch dt {
	case tensor.F16:
		return 2e-3 + f32
	case tensor.BF16:
		return 1.6e-2 + f32
	case tensor.F32:
		return f32
	}
	return 0
}

// tiny is an absolute floor of two of the dtype's smallest subnormals.
func tiny(dt tensor.DType) float64 {
	if dt == tensor.F16 {
		return 1.2e-7
	}
	return 1e-38
}

// Compare checks the backend under test against the reference
// elementwise: |g−c| ≤ r·(|c| + abs·rms(c))
// with r = tol(dtype, scale); abs = 0 is purely relative, 1 measures
// against the output's scale (for sums that cancel). Integers must match
// exactly; NaN never passes.
func (e *Env) Compare(what string, o [2]*tensor.Tensor, scale, abs float64) {
	e.T.Helper()
	if err := e.Got.Sync(); err != nil {
		e.T.Fatalf("%s: %v", what, err)
	}
	c := tensor.ToHost(o[0]).ToFloat32()
	g := tensor.ToHost(o[1]).ToFloat32()
	var ss float64
	for _, v := range c {
		ss += float64(v) * float64(v)
	}
	rms := math.Sqrt(ss / float64(max(len(c), 1)))
	r := tol(o[0].DType(), scale)
	worst, at := 0.0, -1
	for i := range c {
		cv, gv := float64(c[i]), float64(g[i])
		if math.IsNaN(cv) || math.IsNaN(gv) {
			e.T.Errorf("%s: NaN at %d (cpu %v, %s %v)", what, i, cv, e.Got.Name(), gv)
			return
		}
		if math.IsInf(cv, 0) || math.IsInf(gv, 0) {
			if cv != gv {
				e.T.Errorf("%s: element %d: cpu %v, %s %v", what, i, cv, e.Got.Name(), gv)
				return
			}
			continue
		}
		d := math.Abs(gv - cv)
		lim := r * (math.Abs(cv) + abs*rms)
		if r > 0 {
			lim += tiny(o[0].DType())
		}
		if d > lim && (worst < 0 || d/math.Max(lim, 1e-300) > worst) {
			worst, at = d/math.Max(lim, 1e-300), i
		}
	}
	if at >= 0 {
		e.T.Errorf("%s: element %d: cpu %v, %s %v (%.1f× the tolerance %.2g relative, %d elements, rms %.3g)",
			what, at, c[at], e.Got.Name(), g[at], worst, r, len(c), rms)
	}
}

// Run runs fn on the reference (i = 0) and on the backend under test (i = 1).
func (e *Env) Run(name string, fn func(be int) error) {
	e.T.Helper()
	for i := range 2 {
		if err := fn(i); err != nil {
			e.T.Fatalf("%s on %s: %v", name, e.Backend(i).Name(), err)
		}
	}
}

// Backend is the reference for i = 0, the backend under test for 1.
func (e *Env) Backend(i int) tensor.Backend {
	if i == 0 {
		return e.Ref
	}
	return e.Got
}

func shapeName(s []int) string {
	return strings.Trim(strings.ReplaceAll(fmt.Sprint(s), " ", "x"), "[]")
}

// broadcast strides of a tensor of shape from read through shape out.
func bstrides(from, out []int) []int {
	st := make([]int, len(out))
	cs := tensor.ContiguousStrides(from)
	off := len(out) - len(from)
	for i := range from {
		if from[i] != 1 {
			st[off+i] = cs[i]
		}
	}
	return st
}

// The cases below, one an op, are the entries of Cases; a backend's own
// test may run one alone (backend/gpu runs Attention under each of its
// attention paths).

var allTypes = []tensor.DType{tensor.F32, tensor.F16, tensor.BF16, tensor.I64, tensor.I32, tensor.U8, tensor.Bool}

func Fill(e *Env) {
	for _, dt := range allTypes {
		for _, shape := range [][]int{{1}, {7}, {129}, {3, 33}} {
			for _, v := range []float64{1.5, -2.75, 0} {
				o := e.Out(dt, shape...)
				e.Run("fill", func(i int) error { return e.Backend(i).Fill(o[i], v) })
				e.Compare(fmt.Sprintf("fill %s %s %v", dt, shapeName(shape), v), o, 1, 0.01)
			}
		}
	}
}

func Cast(e *Env) {
	for _, src := range allTypes {
		lo, hi := -300.0, 300.0
		if src == tensor.U8 {
			lo, hi = 0, 256
		}
		x := e.Pair(e.Rand(src, lo, hi, 3, 129))
		for _, dst := range allTypes {
			o := e.Out(dst, 3, 129)
			e.Run("cast", func(i int) error { return e.Backend(i).Cast(o[i], x[i]) })
			e.Compare(fmt.Sprintf("cast %s→%s", src, dst), o, 1, 0.01)
		}
	}
}

func Copy(e *Env) {
	for _, dt := range []tensor.DType{tensor.F32, tensor.BF16, tensor.I64, tensor.U8} {
		// transpose (3, 7, 33) → (33, 3, 7)
		x := e.Pair(e.Rand(dt, -50, 50, 3, 7, 33))
		o := e.Out(dt, 33, 3, 7)
		e.Run("copy", func(i int) error {
			return e.Backend(i).Copy(o[i], 0, []int{21, 7, 1}, x[i], 0, []int{1, 231, 33}, []int{33, 3, 7})
		})
		e.Compare("copy permute "+dt.String(), o, 1, 0.01)
		// a slice of axis 1 into the middle of a bigger tensor
		o = e.Out(dt, 3, 9, 33)
		e.Run("copy", func(i int) error {
			if err := e.Backend(i).Fill(o[i], 0); err != nil {
				return err
			}
			return e.Backend(i).Copy(o[i], 2*33, []int{297, 33, 1}, x[i], 33, []int{231, 33, 1}, []int{3, 5, 33})
		})
		e.Compare("copy slice "+dt.String(), o, 1, 0.01)
		// broadcast (expand) a row
		r := e.Pair(e.Rand(dt, -50, 50, 1, 129))
		o = e.Out(dt, 7, 129)
		e.Run("copy", func(i int) error {
			return e.Backend(i).Copy(o[i], 0, []int{129, 1}, r[i], 0, []int{0, 1}, []int{7, 129})
		})
		e.Compare("copy expand "+dt.String(), o, 1, 0.01)
		// rank 7, reversed axes: more axes than one launch takes
		shape := []int{2, 3, 2, 3, 2, 2, 3}
		x7 := e.Pair(e.Rand(dt, -50, 50, shape...))
		rev := make([]int, 7)
		cs := tensor.ContiguousStrides(shape)
		rs := make([]int, 7)
		for j := range rev {
			rev[j] = shape[6-j]
			rs[j] = cs[6-j]
		}
		o = e.Out(dt, rev...)
		e.Run("copy", func(i int) error {
			return e.Backend(i).Copy(o[i], 0, tensor.ContiguousStrides(rev), x7[i], 0, rs, rev)
		})
		e.Compare("copy rank7 "+dt.String(), o, 1, 0.01)
		// Contiguous runs that a backend may move in wide words (16 bytes
		// for 2-byte types), 8 bytes, or single elements when an offset or
		// a stride is odd: a head split, columns at an even and at an odd
		// offset.
		h := e.Pair(e.Rand(dt, -50, 50, 2, 5, 8, 16))
		o = e.Out(dt, 2, 5, 4, 16)
		e.Run("copy", func(i int) error {
			return e.Backend(i).Copy(o[i], 0, []int{320, 64, 16, 1}, h[i], 2*16, []int{640, 128, 16, 1}, []int{2, 5, 4, 16})
		})
		e.Compare("copy heads "+dt.String(), o, 1, 0.01)
		c := e.Pair(e.Rand(dt, -50, 50, 3, 6))
		for _, col := range []int{2, 1} {
			o = e.Out(dt, 3, 10)
			e.Run("copy", func(i int) error {
				if err := e.Backend(i).Fill(o[i], 0); err != nil {
					return err
				}
				return e.Backend(i).Copy(o[i], col, []int{10, 1}, c[i], 0, []int{6, 1}, []int{3, 6})
			})
			e.Compare(fmt.Sprintf("copy columns at %d %s", col, dt), o, 1, 0.01)
		}
	}
}

// unary ops with the input range each is tested on.
var unaryRanges = []struct {
	op     tensor.UnaryOp
	lo, hi float64
	a, b   float32
	abs    float64 // absolute floor, as a fraction of the outputs' rms
}{
	{tensor.OpNeg, -5, 5, 0, 0, 0},
	{tensor.OpExp, -20, 20, 0, 0, -1},
	{tensor.OpLog, 1e-3, 1e3, 0, 0, 0},
	{tensor.OpSin, -30, 30, 0, 0, 0.01},
	{tensor.OpCos, -30, 30, 0, 0, 0.01},
	{tensor.OpSqrt, 0, 100, 0, 0, 0},
	{tensor.OpRsqrt, 0.01, 100, 0, 0, 0},
	{tensor.OpAbs, -5, 5, 0, 0, 0},
	{tensor.OpSquare, -5, 5, 0, 0, 0},
	{tensor.OpSiLU, -12, 12, 0, 0, 0},
	{tensor.OpGELU, -8, 8, 0, 0, 0},
	{tensor.OpGELUTanh, -8, 8, 0, 0, 0},
	{tensor.OpQuickGELU, -8, 8, 0, 0, 0},
	{tensor.OpSigmoid, -12, 12, 0, 0, 0},
	{tensor.OpTanh, -6, 6, 0, 0, 0},
	{tensor.OpTanh, -0.7, 0.7, 0, 0, 0},
	{tensor.OpScale, -5, 5, -1.5, 0, 0},
	{tensor.OpAddScalar, -5, 5, 0.25, 0, 0},
	{tensor.OpClamp, -5, 5, -1, 2, 0},
	{tensor.OpPow, 0.01, 10, 2.5, 0, -1},
	{tensor.OpPow, -4, 4, 3, 0, 0},
	{tensor.OpRecip, 0.1, 5, 0, 0, 0},
}

func Unary(e *Env) {
	for _, u := range unaryRanges {
		for _, dt := range floats {
			for _, shape := range [][]int{{1}, {7}, {129}, {33, 65}} {
				x := e.Pair(e.Rand(dt, u.lo, u.hi, shape...))
				o := e.Out(dt, shape...)
				e.Run(u.op.String(), func(i int) error { return e.Backend(i).Unary(u.op, o[i], x[i], u.a, u.b) })
				abs := u.abs
				if abs == 0 {
					abs = 1e-3
				}
				if abs < 0 {
					abs = 0
				}
				e.Compare(fmt.Sprintf("%s [%g,%g] %s %s", u.op, u.lo, u.hi, dt, shapeName(shape)), o, 1, abs)
			}
		}
	}
}

func Binary(e *Env) {
	pairs := [][2][]int{{{129}, {129}}, {{7, 33}, {33}}, {{7, 1}, {1, 33}}, {{3, 1, 5}, {3, 4, 1}}, {{1}, {1}}, {{2, 3, 65}, {2, 1, 65}}, {{1000}, {1}}}
	for op := tensor.OpAdd; op <= tensor.OpMin; op++ {
		for _, dt := range []tensor.DType{tensor.F32, tensor.F16, tensor.BF16, tensor.I64, tensor.I32} {
			for _, p := range pairs {
				shape, err := tensor.BroadcastShape(p[0], p[1])
				if err != nil {
					e.T.Fatal(err)
				}
				lo := -5.0
				if op == tensor.OpDiv && dt.IsFloat() {
					lo = 0.5 // keep divisors away from zero
				}
				if !dt.IsFloat() {
					lo = -50
				}
				hi := 5.0
				if !dt.IsFloat() {
					hi = 50
				}
				x := e.Pair(e.Rand(dt, -hi, hi, p[0]...))
				y := e.Pair(e.Rand(dt, lo, hi, p[1]...))
				o := e.Out(dt, shape...)
				e.Run(op.String(), func(i int) error {
					return e.Backend(i).Binary(op, o[i], x[i], bstrides(p[0], shape), y[i], bstrides(p[1], shape))
				})
				e.Compare(fmt.Sprintf("%s %s %s·%s", op, dt, shapeName(p[0]), shapeName(p[1])), o, 1, 0.01)
			}
		}
	}
}

func b2i(v bool) int {
	if v {
		return 1
	}
	return 0
}

func GroupNorm(e *Env) {
	cases := []struct {
		shape  []int
		groups int
	}{{[]int{1, 4, 7}, 2}, {[]int{2, 32, 3, 5, 7}, 8}, {[]int{1, 4, 5, 64, 64}, 2}, {[]int{3, 6, 1}, 3}}
	for _, c := range cases {
		for _, dt := range floats {
			for _, affine := range []bool{true, false} {
				for _, silu := range []bool{false, true} {
					x := e.Pair(e.Rand(dt, 1, 4, c.shape...))
					var w, b [2]*tensor.Tensor
					if affine {
						w = e.Pair(e.Rand(dt, 0.5, 1.5, c.shape[1]))
						b = e.Pair(e.Rand(dt, -1, 1, c.shape[1]))
					}
					o := e.Out(dt, c.shape...)
					e.Run("group_norm", func(i int) error { return e.Backend(i).GroupNorm(o[i], x[i], w[i], b[i], c.groups, 1e-6, silu) })
					e.Compare(fmt.Sprintf("group_norm %s %s G=%d affine=%v silu=%v", dt, shapeName(c.shape), c.groups, affine, silu), o, 5, 1)
				}
			}
		}
	}
}

func LayerNorm(e *Env) {
	for _, shape := range [][]int{{7, 33}, {3, 129}, {2, 3, 1000}, {1, 1}, {5, 3000}} {
		for _, dt := range floats {
			for _, affine := range []bool{true, false} {
				d := shape[len(shape)-1]
				x := e.Pair(e.Rand(dt, 2, 5, shape...))
				var w, b [2]*tensor.Tensor
				if affine {
					w = e.Pair(e.Rand(dt, 0.5, 1.5, d))
					b = e.Pair(e.Rand(dt, -1, 1, d))
				}
				o := e.Out(dt, shape...)
				e.Run("layer_norm", func(i int) error { return e.Backend(i).LayerNorm(o[i], x[i], w[i], b[i], 1e-5) })
				e.Compare(fmt.Sprintf("layer_norm %s %s affine=%v", dt, shapeName(shape), affine), o, 5, 1)
			}
		}
	}
}

func RMSNorm(e *Env) {
	for _, shape := range [][]int{{7, 33}, {5, 3072}, {1, 1}} {
		for _, dt := range floats {
			for _, affine := range []bool{true, false} {
				d := shape[len(shape)-1]
				x := e.Pair(e.Rand(dt, -3, 3, shape...))
				var w [2]*tensor.Tensor
				if affine {
					w = e.Pair(e.Rand(dt, 0.5, 1.5, d))
				}
				o := e.Out(dt, shape...)
				e.Run("rms_norm", func(i int) error { return e.Backend(i).RMSNorm(o[i], x[i], w[i], 1e-6) })
				e.Compare(fmt.Sprintf("rms_norm %s %s affine=%v", dt, shapeName(shape), affine), o, 2, 1)
			}
		}
	}
}

func Softmax(e *Env) {
	for _, shape := range [][]int{{7, 33}, {3, 1000}, {1, 1}, {2, 3, 129}, {3, 2500}} {
		for _, dt := range floats {
			x := e.Pair(e.Rand(dt, -10, 10, shape...))
			o := e.Out(dt, shape...)
			e.Run("softmax", func(i int) error { return e.Backend(i).Softmax(o[i], x[i]) })
			e.Compare(fmt.Sprintf("softmax %s %s", dt, shapeName(shape)), o, 5, 1)
		}
	}
}

func Reduce(e *Env) {
	for op := tensor.ReduceSum; op <= tensor.ReduceAbsMean; op++ {
		for _, shape := range [][]int{{7, 33}, {3, 1000}, {5, 1}, {1, 129}} {
			if shape[1] == 1 && op == tensor.ReduceVarU {
				continue // NaN by definition
			}
			for _, dt := range floats {
				x := e.Pair(e.Rand(dt, -3, 5, shape...))
				o := e.Out(dt, shape[0])
				e.Run("reduce", func(i int) error { return e.Backend(i).Reduce(op, o[i], x[i]) })
				e.Compare(fmt.Sprintf("reduce %d %s %s", op, dt, shapeName(shape)), o, 20, 1)
			}
		}
	}
}

func Attention(e *Env) {
	type ac struct {
		B, Lq, Lk, Hq, Hkv, D int
		causal                bool
		frame                 int
		keyMask, mask         bool
		maskBatch             int
	}
	cases := []ac{
		{B: 1, Lq: 33, Lk: 33, Hq: 2, Hkv: 2, D: 64},
		{B: 2, Lq: 7, Lk: 129, Hq: 4, Hkv: 2, D: 128, keyMask: true},
		{B: 1, Lq: 65, Lk: 65, Hq: 1, Hkv: 1, D: 32, causal: true},
		{B: 1, Lq: 40, Lk: 40, Hq: 3, Hkv: 1, D: 80, causal: true},
		{B: 1, Lq: 33, Lk: 33, Hq: 2, Hkv: 2, D: 16, frame: 5},
		{B: 2, Lq: 9, Lk: 17, Hq: 2, Hkv: 2, D: 24, mask: true, maskBatch: 2},
		{B: 2, Lq: 9, Lk: 17, Hq: 2, Hkv: 1, D: 24, mask: true, maskBatch: 1},
		{B: 1, Lq: 40, Lk: 40, Hq: 1, Hkv: 1, D: 512},
		{B: 1, Lq: 19, Lk: 21, Hq: 2, Hkv: 2, D: 3},
		{B: 3, Lq: 1, Lk: 77, Hq: 4, Hkv: 4, D: 256},
		{B: 1, Lq: 130, Lk: 257, Hq: 2, Hkv: 2, D: 128, causal: true},
		// Unmasked, several key tiles and query blocks with tails, GQA: the
		// flash kernel on NVIDIA.
		{B: 2, Lq: 200, Lk: 300, Hq: 4, Hkv: 2, D: 128},
		{B: 1, Lq: 129, Lk: 128, Hq: 2, Hkv: 2, D: 64},
	}
	for _, c := range cases {
		for _, dt := range floats {
			q := e.Pair(e.Rand(dt, -2, 2, c.B, c.Lq, c.Hq, c.D))
			k := e.Pair(e.Rand(dt, -2, 2, c.B, c.Lk, c.Hkv, c.D))
			v := e.Pair(e.Rand(dt, -2, 2, c.B, c.Lk, c.Hkv, c.D))
			var p [2]tensor.AttnParams
			var km, mk [2]*tensor.Tensor
			if c.keyMask {
				h := e.Rand(tensor.F32, 0, 1, c.B, c.Lk)
				for i, f := range h.Float32s() {
					h.Float32s()[i] = float32(b2i(f < 0.7 || i%c.Lk == 0))
				}
				km = e.Pair(h)
			}
			if c.mask {
				h := e.Rand(tensor.F32, -3, 1, c.maskBatch, c.Lq, c.Lk)
				for i, f := range h.Float32s() {
					if f < -2 && i%c.Lk != 0 {
						h.Float32s()[i] = float32(math.Inf(-1))
					}
				}
				mk = e.Pair(h)
			}
			for i := range p {
				p[i] = tensor.AttnParams{Causal: c.causal, FrameLen: c.frame, KeyMask: km[i], Mask: mk[i]}
			}
			o := e.Out(dt, c.B, c.Lq, c.Hq, c.D)
			e.Run("attention", func(i int) error { return e.Backend(i).Attention(o[i], q[i], k[i], v[i], p[i]) })
			e.Compare(fmt.Sprintf("attention %s %+v", dt, c), o, 20, 1)
		}
	}
}

func RoPE(e *Env) {
	for _, dt := range floats {
		for _, shape := range [][]int{{2, 7, 3, 16}, {1, 33, 1, 2}} {
			x := e.Pair(e.Rand(dt, -3, 3, shape...))
			cs := e.Pair(e.Rand(tensor.F32, -1, 1, shape[1], shape[3]))
			sn := e.Pair(e.Rand(tensor.F32, -1, 1, shape[1], shape[3]))
			o := e.Out(dt, shape...)
			e.Run("rope", func(i int) error { return e.Backend(i).RoPE(o[i], x[i], cs[i], sn[i]) })
			e.Compare(fmt.Sprintf("rope %s %s", dt, shapeName(shape)), o, 1, 0.01)
		}
	}
}

func Pad(e *Env) {
	for _, dt := range []tensor.DType{tensor.F32, tensor.BF16, tensor.I64, tensor.U8} {
		for _, mode := range []tensor.PadMode{tensor.PadZeros, tensor.PadReplicate} {
			for _, c := range []struct{ shape, before, after []int }{
				{[]int{2, 3, 5, 7}, []int{1, 2, 0}, []int{0, 1, 3}},
				{[]int{3, 7}, []int{2}, []int{1}},
				{[]int{1, 2, 3, 4, 5}, []int{2, 0, 1}, []int{0, 0, 1}},
			} {
				x := e.Pair(e.Rand(dt, -50, 50, c.shape...))
				out := append([]int(nil), c.shape...)
				off := len(out) - len(c.before)
				for i := range c.before {
					out[off+i] += c.before[i] + c.after[i]
				}
				o := e.Out(dt, out...)
				e.Run("pad", func(i int) error { return e.Backend(i).Pad(o[i], x[i], c.before, mode) })
				e.Compare(fmt.Sprintf("pad %s mode %d %s %v", dt, mode, shapeName(c.shape), c.before), o, 1, 0.01)
			}
		}
	}
}

func Upsample(e *Env) {
	for _, dt := range []tensor.DType{tensor.F32, tensor.F16, tensor.U8} {
		for _, sc := range [][3]int{{2, 2, 2}, {1, 3, 2}} {
			shape := []int{1, 2, 3, 4, 5}
			x := e.Pair(e.Rand(dt, -50, 50, shape...))
			o := e.Out(dt, 1, 2, 3*sc[0], 4*sc[1], 5*sc[2])
			e.Run("upsample", func(i int) error { return e.Backend(i).UpsampleNearest(o[i], x[i], sc) })
			e.Compare(fmt.Sprintf("upsample %s %v", dt, sc), o, 1, 0.01)
		}
		// Channels-last frames (B, T, H, W, C): H and W doubled, C moved
		// whole (in 16-byte units on a GPU when C's bytes allow).
		for _, c := range []int{16, 24, 5} {
			x := e.Pair(e.Rand(dt, -50, 50, 1, 2, 3, 4, c))
			o := e.Out(dt, 1, 2, 6, 8, c)
			e.Run("upsample", func(i int) error { return e.Backend(i).UpsampleNearest(o[i], x[i], [3]int{2, 2, 1}) })
			e.Compare(fmt.Sprintf("upsample %s channels-last C=%d", dt, c), o, 1, 0.01)
		}
	}
}

func AvgPool(e *Env) {
	for _, dt := range floats {
		for _, k := range [][3]int{{2, 2, 2}, {1, 3, 3}, {3, 1, 1}} {
			shape := []int{2, 3, 6, 12, 6}
			x := e.Pair(e.Rand(dt, -3, 3, shape...))
			o := e.Out(dt, 2, 3, 6/k[0], 12/k[1], 6/k[2])
			e.Run("avg_pool3d", func(i int) error { return e.Backend(i).AvgPool3d(o[i], x[i], k) })
			e.Compare(fmt.Sprintf("avg_pool3d %s %v", dt, k), o, 2, 1)
		}
	}
}

func Embedding(e *Env) {
	for _, dt := range []tensor.DType{tensor.F32, tensor.BF16, tensor.I64} {
		for _, it := range []tensor.DType{tensor.I64, tensor.I32} {
			table := e.Pair(e.Rand(dt, -5, 5, 50, 33))
			ids := e.Pair(e.Rand(it, 0, 50, 7))
			o := e.Out(dt, 7, 33)
			e.Run("embedding", func(i int) error { return e.Backend(i).Embedding(o[i], table[i], ids[i]) })
			e.Compare(fmt.Sprintf("embedding %s ids %s", dt, it), o, 1, 0.01)
			bad := e.Pair(HostOf(it, []float64{3, 50}, 2))
			o = e.Out(dt, 2, 33)
			if err := e.Got.Embedding(o[1], table[1], bad[1]); err == nil {
				e.T.Errorf("embedding with id 50 of 50 rows: no error")
			}
		}
	}
}

func MatMul(e *Env) {
	for _, c := range []struct {
		B, M, N, K     int
		ta, tb, shareB bool
		alpha          float32
	}{
		{1, 7, 33, 129, false, false, false, 1},
		{3, 65, 17, 33, true, false, false, 0.5},
		{2, 33, 65, 7, false, true, false, 1},
		{4, 9, 11, 13, true, true, true, 2},
		{1, 1, 1, 1, false, false, false, 1},
		{2, 130, 70, 257, false, false, true, 1},
	} {
		for _, dt := range floats {
			as := []int{c.B, c.M, c.K}
			if c.ta {
				as = []int{c.B, c.K, c.M}
			}
			bs := []int{c.K, c.N}
			if c.tb {
				bs = []int{c.N, c.K}
			}
			if !c.shareB {
				bs = append([]int{c.B}, bs...)
			}
			x := e.Pair(e.Rand(dt, -1, 1, as...))
			y := e.Pair(e.Rand(dt, -1, 1, bs...))
			o := e.Out(dt, c.B, c.M, c.N)
			p := tensor.MatMulParams{Batch: c.B, M: c.M, N: c.N, K: c.K, TransA: c.ta, TransB: c.tb, Alpha: c.alpha}
			e.Run("matmul", func(i int) error { return e.Backend(i).MatMul(o[i], x[i], y[i], p) })
			e.Compare(fmt.Sprintf("matmul %s %+v", dt, c), o, 20, 1)
		}
	}
}

func Linear(e *Env) {
	// K = 0: no products, every row the bias (or zeros).
	for _, c := range []struct{ M, K, N int }{{33, 129, 65}, {1, 7, 3}, {200, 64, 96}, {3, 0, 5}} {
		for _, dt := range floats {
			for _, withBias := range []bool{true, false} {
				x := e.Pair(e.Rand(dt, -1, 1, c.M, c.K))
				w := e.Pair(e.Rand(dt, -1, 1, c.N, c.K))
				var b [2]*tensor.Tensor
				if withBias {
					b = e.Pair(e.Rand(dt, -1, 1, c.N))
				}
				o := e.Out(dt, c.M, c.N)
				e.Run("linear", func(i int) error { return e.Backend(i).Linear(o[i], x[i], w[i], b[i]) })
				e.Compare(fmt.Sprintf("linear %s %+v bias=%v", dt, c, withBias), o, 20, 1)
			}
		}
	}
}

// ConvCase is one convolution of the conv3d cases.
type ConvCase struct {
	X, W        []int
	Stride, Pad [3]int
	WithBias    bool
}

// ConvCases are odd shapes, strides, paddings and 1×1×1 kernels.
var ConvCases = []ConvCase{
	{[]int{1, 3, 5, 7, 9}, []int{4, 3, 3, 3, 3}, [3]int{1, 1, 1}, [3]int{1, 1, 1}, true},
	{[]int{2, 2, 3, 9, 8}, []int{5, 2, 1, 3, 3}, [3]int{1, 2, 2}, [3]int{0, 1, 1}, false},
	{[]int{1, 4, 2, 5, 5}, []int{3, 4, 1, 1, 1}, [3]int{1, 1, 1}, [3]int{0, 0, 0}, true},
	{[]int{1, 16, 3, 17, 19}, []int{8, 16, 3, 3, 3}, [3]int{1, 1, 1}, [3]int{1, 1, 1}, true},
}

// Inputs are c's input, weight and bias (or nil) in dt on both backends,
// its output (poisoned) and its parameters.
func (c ConvCase) Inputs(e *Env, dt tensor.DType) (x, w, b, o [2]*tensor.Tensor, p tensor.ConvParams) {
	x = e.Pair(e.Rand(dt, -1, 1, c.X...))
	w = e.Pair(e.Rand(dt, -1, 1, c.W...))
	if c.WithBias {
		b = e.Pair(e.Rand(dt, -1, 1, c.W[0]))
	}
	out := []int{c.X[0], c.W[0], 0, 0, 0}
	for i := 0; i < 3; i++ {
		out[2+i] = (c.X[2+i]+2*c.Pad[i]-c.W[2+i])/c.Stride[i] + 1
	}
	return x, w, b, e.Out(dt, out...), tensor.ConvParams{Stride: c.Stride, Padding: c.Pad}
}

func Conv3d(e *Env) {
	for _, c := range ConvCases {
		for _, dt := range floats {
			x, w, b, o, p := c.Inputs(e, dt)
			e.Run("conv3d", func(i int) error { return e.Backend(i).Conv3d(o[i], x[i], w[i], b[i], p) })
			e.Compare(fmt.Sprintf("conv3d %s x%v w%v %+v", dt, c.X, c.W, p), o, 20, 1)
		}
	}
}

// Fused compares the backend's fused kernels with their CPU reference,
// cpu.Fused, at a small head layout with row offsets, per-batch and shared
// RoPE tables and both activations; it skips on a backend without them.
func Fused(e *Env) {
	f, ok := tensor.As[tensor.FusedKernels](e.Got)
	if !ok {
		e.T.Skipf("%s has no fused kernels", e.Got.Name())
	}
	ks := [2]tensor.FusedKernels{cpu.Fused{}, f}
	zeros := func(dt tensor.DType, shape ...int) [2]*tensor.Tensor {
		o := e.Out(dt, shape...)
		e.Run("fill", func(i int) error { return e.Backend(i).Fill(o[i], 0) })
		return o
	}
	for _, dt := range floats {
		const b, l, h, dh = 2, 7, 3, 32
		d := h * dh
		x, y := e.Pair(e.Rand(dt, -2, 2, b, l, d)), e.Pair(e.Rand(dt, -1, 1, b, l, d))
		shift, scale := e.Pair(e.Rand(dt, -1, 1, b, 1, d)), e.Pair(e.Rand(dt, -1, 1, b, 1, d))
		o := e.Out(dt, b, l, d)
		e.Run("layer_norm_modulate", func(i int) error { return ks[i].LayerNormModulate(o[i], x[i], shift[i], scale[i], 1e-6) })
		e.Compare("layer_norm_modulate "+dt.String(), o, 5, 1)
		bias := e.Pair(e.Rand(dt, -0.5, 0.5, d))
		for _, bs := range [][2]*tensor.Tensor{{}, bias} {
			o := e.Out(dt, b, l, d)
			e.Run("gated_add", func(i int) error { return ks[i].GatedAdd(o[i], x[i], y[i], bs[i], scale[i]) })
			e.Compare(fmt.Sprintf("gated_add %s bias=%v", dt, bs[0] != nil), o, 2, 1)
		}

		const ls, off, extra = 5, 2, 16
		lj := ls + off + 1
		src := e.Pair(e.Rand(dt, -3, 3, b, ls, 3*d+extra))
		srcBias := e.Pair(e.Rand(dt, -0.5, 0.5, 3*d+extra))
		wq, wk := e.Pair(e.Rand(dt, 0.5, 1.5, dh)), e.Pair(e.Rand(dt, 0.5, 1.5, dh))
		for _, rows := range []int{0, 1, b} {
			bs := srcBias
			if rows == 1 {
				bs = [2]*tensor.Tensor{}
			}
			var cs, sn [2]*tensor.Tensor
			if rows > 0 {
				cs, sn = e.Pair(e.Rand(tensor.F32, -1, 1, rows, lj, dh)), e.Pair(e.Rand(tensor.F32, -1, 1, rows, lj, dh))
			}
			q, k, v := zeros(dt, b, lj, h, dh), zeros(dt, b, lj, h, dh), zeros(dt, b, lj, h, dh)
			e.Run("qk_norm_rope", func(i int) error {
				return ks[i].QKNormRoPE(q[i], k[i], v[i], src[i], bs[i], off, [3]int{0, d, 2 * d}, wq[i], wk[i], cs[i], sn[i], 1e-6)
			})
			for j, out := range [][2]*tensor.Tensor{q, k, v} {
				e.Compare(fmt.Sprintf("qk_norm_rope %s %s rope rows %d", []string{"q", "k", "v"}[j], dt, rows), out, 5, 1)
			}
		}

		g, gb := e.Pair(e.Rand(dt, -4, 4, b*l, 7*16)), e.Pair(e.Rand(dt, -0.5, 0.5, 7*16))
		for _, op := range []tensor.UnaryOp{tensor.OpGELUTanh, tensor.OpSiLU} {
			for _, bs := range [][2]*tensor.Tensor{{}, gb} {
				o := zeros(dt, b*l, 5*16)
				e.Run("activate_columns", func(i int) error { return ks[i].ActivateColumns(op, o[i], 16, g[i], bs[i], 3*16, 4*16) })
				e.Compare(fmt.Sprintf("activate_columns %s %s bias=%v", op, dt, bs[0] != nil), o, 2, 1)
			}
		}

		// Wan's channels-last RMS norm: 5 frames of 7×9 (rows not a multiple
		// of a block), with and without weight and SiLU, for channel counts
		// that take each kernel variant: 40 and 96 in registers, 37 (not a
		// whole number of vectors) and 2000 (more than the registers hold)
		// element by element.
		for _, c := range []int{40, 96, 37, 2000} {
			cx := e.Pair(e.Rand(dt, -3, 3, b, 5, 7, 9, c))
			cw := e.Pair(e.Rand(dt, 0.5, 1.5, c))
			for _, ws := range [][2]*tensor.Tensor{{}, cw} {
				for _, silu := range []bool{false, true} {
					o := e.Out(dt, b, 5, 7, 9, c)
					e.Run("channels_last_rms_norm", func(i int) error { return ks[i].ChannelsLastRMSNorm(o[i], cx[i], ws[i], 1e-6, silu) })
					e.Compare(fmt.Sprintf("channels_last_rms_norm %s C=%d weight=%v silu=%v", dt, c, ws[0] != nil, silu), o, 3, 1)
				}
			}
			// Into the last 5 of 7 frames: the first two are left as they are.
			o := zeros(dt, b, 7, 7, 9, c)
			e.Run("channels_last_rms_norm", func(i int) error { return ks[i].ChannelsLastRMSNorm(o[i], cx[i], cw[i], 1e-6, true) })
			e.Compare(fmt.Sprintf("channels_last_rms_norm %s C=%d behind two frames", dt, c), o, 3, 1)
		}
	}
}

// PaddedConv compares the backend's Conv3dPadded with the CPU's Conv3d of
// the padded (and upsampled) input; it skips on a backend without it.
func PaddedConv(e *Env) {
	pc, ok := tensor.As[tensor.PaddedConv](e.Got)
	if !ok {
		e.T.Skipf("%s does not convolve through a padding", e.Got.Name())
	}
	causal := tensor.Padding{Before: [3]int{2, 1, 1}, After: [3]int{0, 1, 1}, Mode: tensor.PadReplicate}
	up := causal
	up.Upsample, up.CausalFirst = [3]int{2, 2, 2}, true
	zeros := tensor.Padding{Before: [3]int{1, 2, 0}, After: [3]int{2, 0, 1}, Mode: tensor.PadZeros}
	for _, c := range []struct {
		name   string
		x, w   []int
		pad    tensor.Padding
		stride [3]int
	}{
		{"causal", []int{1, 8, 5, 9, 11}, []int{16, 8, 3, 3, 3}, causal, [3]int{1, 1, 1}},
		{"causal_stride2", []int{1, 8, 5, 12, 12}, []int{8, 8, 3, 3, 3}, causal, [3]int{2, 2, 2}},
		{"zeros", []int{2, 4, 4, 7, 9}, []int{8, 4, 3, 3, 3}, zeros, [3]int{1, 1, 1}},
		{"causal_upsample", []int{1, 8, 4, 5, 7}, []int{8, 8, 3, 3, 3}, up, [3]int{1, 1, 1}},
	} {
		for _, dt := range floats {
			x := e.Pair(e.Rand(dt, -1, 1, c.x...))
			w := e.Pair(e.Rand(dt, -1, 1, c.w...))
			b := e.Pair(e.Rand(dt, -1, 1, c.w[0]))
			in := c.pad.Shape(c.x)
			out := []int{c.x[0], c.w[0], 0, 0, 0}
			for i := 0; i < 3; i++ {
				out[2+i] = (in[2+i]-c.w[2+i])/c.stride[i] + 1
			}
			o := e.Out(dt, out...)
			p := tensor.ConvParams{Stride: c.stride}
			e.Run("conv3d_padded", func(i int) error {
				if i == 1 {
					return pc.Conv3dPadded(o[1], x[1], w[1], b[1], p, c.pad)
				}
				px, err := c.pad.Materialize(e.Ref, x[0])
				if err != nil {
					return err
				}
				defer tensor.Release(px)
				return e.Ref.Conv3d(o[0], px, w[0], b[0], p)
			})
			e.Compare(fmt.Sprintf("conv3d_padded %s %s", c.name, dt), o, 20, 1)
		}
	}
}

// ChannelsLastConv compares the backend's Conv3dLast with the CPU's Conv3d
// of the same input moved channels-first, its output moved back; it skips
// on a backend without it.
func ChannelsLastConv(e *Env) {
	cl, ok := tensor.As[tensor.ChannelsLastConv](e.Got)
	if !ok {
		e.T.Skipf("%s does not convolve channels-last", e.Got.Name())
	}
	for _, c := range []struct {
		name        string
		x, w        []int // x (B, T, H, W, Cin)
		pad, stride [3]int
		bias        bool
	}{
		{"k3_spatial_pad", []int{1, 5, 9, 11, 8}, []int{16, 8, 3, 3, 3}, [3]int{0, 1, 1}, [3]int{1, 1, 1}, true},
		{"k3_stride2_pad", []int{2, 5, 12, 12, 8}, []int{8, 8, 3, 3, 3}, [3]int{1, 1, 1}, [3]int{2, 2, 2}, true},
		{"pointwise", []int{2, 3, 5, 7, 24}, []int{40, 24, 1, 1, 1}, [3]int{}, [3]int{1, 1, 1}, true},
		{"frame_k3x3", []int{1, 2, 9, 7, 16}, []int{12, 16, 1, 3, 3}, [3]int{0, 1, 1}, [3]int{1, 1, 1}, false},
		{"time_k3", []int{1, 4, 5, 6, 16}, []int{32, 16, 3, 1, 1}, [3]int{}, [3]int{1, 1, 1}, true},
		{"rgb_out", []int{1, 3, 8, 8, 24}, []int{3, 24, 3, 3, 3}, [3]int{0, 1, 1}, [3]int{1, 1, 1}, true},
	} {
		for _, dt := range floats {
			x := e.Pair(e.Rand(dt, -1, 1, c.x...))
			w := e.Pair(e.Rand(dt, -1, 1, c.w...))
			var b [2]*tensor.Tensor
			if c.bias {
				b = e.Pair(e.Rand(dt, -1, 1, c.w[0]))
			}
			out := []int{c.x[0], 0, 0, 0, c.w[0]}
			for i := 0; i < 3; i++ {
				out[1+i] = (c.x[1+i]+2*c.pad[i]-c.w[2+i])/c.stride[i] + 1
			}
			// Into a new output, then added to one holding values; the
			// weight as checkpoints hold it, then packed channels-last.
			for _, v := range []struct{ acc, packed bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
				acc := v.acc
				o := e.Out(dt, out...)
				name := "conv3d_last"
				if acc {
					o = e.Pair(e.Rand(dt, -1, 1, out...))
					name += " accumulated"
				}
				wg := w[1]
				if v.packed {
					name += " packed"
					wg = packed(e.Got, w[1])
				}
				p := tensor.ConvParams{Stride: c.stride, Padding: c.pad, Accumulate: acc, WeightLast: v.packed}
				e.Run("conv3d_last", func(i int) error {
					if i == 1 {
						return cl.Conv3dLast(o[1], x[1], wg, b[1], p)
					}
					return tensor.Catch(func() {
						s := tensor.NewScope(e.Ref)
						defer s.Close()
						y := s.Permute(s.Conv3d(s.Permute(x[0], 0, 4, 1, 2, 3), w[0], b[0], c.stride, c.pad), 0, 2, 3, 4, 1)
						st := tensor.ContiguousStrides(out)
						var err error
						if acc {
							err = e.Ref.Binary(tensor.OpAdd, o[0], o[0], st, y, st)
						} else {
							err = e.Ref.Copy(o[0], 0, st, y, 0, st, out)
						}
						if err != nil {
							panic(&tensor.OpError{Op: "copy", Err: err})
						}
					})
				})
				e.Compare(fmt.Sprintf("%s %s %s", name, c.name, dt), o, 20, 1)
				if wg != w[1] {
					tensor.Release(wg)
				}
			}
		}
	}
}

// packed is w (Cout, Cin, kT, kH, kW) packed channels-last, (Cout, kT, kH,
// kW, Cin): a copy on be, for the caller to release.
func packed(be tensor.Backend, w *tensor.Tensor) *tensor.Tensor {
	var out *tensor.Tensor
	if err := tensor.Catch(func() {
		s := tensor.NewScope(be)
		defer s.Close()
		out = s.Permute(w, 0, 2, 3, 4, 1)
		s.Keep(out)
	}); err != nil {
		panic(err)
	}
	return out
}

// FP8Compute checks the per-row E4M3 quantization (codes and scales equal
// to the CPU's bit for bit) and the scaled FP8 Linear, on shapes the FP8
// tensor cores take (K, N multiples of 16) and odd ones they do not.
func FP8Compute(e *Env) {
	f, ok := tensor.As[tensor.FP8Compute](e.Got)
	if !ok {
		e.T.Skipf("%s has no FP8 compute", e.Got.Name())
	}
	ks := [2]tensor.FP8Compute{cpu.New(), f}
	for _, c := range []struct{ M, K, N int }{{33, 128, 64}, {200, 256, 96}, {5, 33, 7}, {1, 3072, 48}} {
		for _, dt := range floats {
			xh := e.Rand(dt, -3, 3, c.M, c.K)
			if c.M > 2 { // a row of zeros (scale 1) and one of tiny values (subnormal codes)
				vals := make([]float64, c.M*c.K)
				for i := range vals {
					switch i / c.K {
					case 1:
						vals[i] = 0
					case 2:
						vals[i] = 1e-3 * (e.Rng.Float64() - 0.5)
					default:
						vals[i] = 6 * (e.Rng.Float64() - 0.5)
					}
				}
				xh = HostOf(dt, vals, c.M, c.K)
			}
			x := e.Pair(xh)
			q, qs := e.Out(tensor.F8E4M3, c.M, c.K), e.Out(tensor.F32, c.M)
			e.Run("quantize_rows_fp8", func(i int) error { return ks[i].QuantizeRowsFP8(q[i], qs[i], x[i]) })
			if err := e.Got.Sync(); err != nil {
				e.T.Fatal(err)
			}
			name := fmt.Sprintf("quantize_rows_fp8 %s %dx%d", dt, c.M, c.K)
			if rc, gc := tensor.ToHost(q[0]).HostBytes(), tensor.ToHost(q[1]).HostBytes(); string(rc) != string(gc) {
				for i := range rc {
					if rc[i] != gc[i] {
						e.T.Errorf("%s: code %d: cpu %#02x, %s %#02x", name, i, rc[i], e.Got.Name(), gc[i])
						break
					}
				}
			}
			if rs, gs := tensor.ToHost(qs[0]).Float32s(), tensor.ToHost(qs[1]).Float32s(); fmt.Sprint(rs) != fmt.Sprint(gs) {
				e.T.Errorf("%s: scales: cpu %v, %s %v", name, rs, e.Got.Name(), gs)
			}

			wq, ws := e.Out(tensor.F8E4M3, c.N, c.K), e.Out(tensor.F32, c.N)
			w := e.Pair(e.Rand(dt, -1, 1, c.N, c.K))
			e.Run("quantize_rows_fp8 w", func(i int) error { return ks[i].QuantizeRowsFP8(wq[i], ws[i], w[i]) })
			// Both sides multiply the reference's codes, so the products are the same.
			xq, xs := e.Pair(tensor.ToHost(q[0])), e.Pair(tensor.ToHost(qs[0]))
			wqq, wss := e.Pair(tensor.ToHost(wq[0])), e.Pair(tensor.ToHost(ws[0]))
			fp8Linears(e, ks, fmt.Sprintf("%s %+v", dt, c), x, xq, xs, wqq, wss)
		}
	}
	// K = 0: no products, every row the bias (or zeros).
	for _, dt := range floats {
		const M, N = 3, 16
		x := e.Pair(e.Rand(dt, -1, 1, M, 0))
		xq, wq := e.Pair(tensor.New(tensor.F8E4M3, M, 0)), e.Pair(tensor.New(tensor.F8E4M3, N, 0))
		xs, ws := e.Pair(e.Rand(tensor.F32, 0.5, 2, M)), e.Pair(e.Rand(tensor.F32, 0.5, 2, N))
		fp8Linears(e, ks, fmt.Sprintf("%s %dx0x%d", dt, M, N), x, xq, xs, wq, ws)
	}
}

// fp8Linears checks the scaled FP8 Linear of codes xq (M, K) and wq (N, K)
// with their row scales, and the weight-only one of x by wq where the
// backend has it, with a bias and without.
func fp8Linears(e *Env, ks [2]tensor.FP8Compute, what string, x, xq, xs, wq, ws [2]*tensor.Tensor) {
	dt, M, N := x[0].DType(), xq[0].Dim(0), wq[0].Dim(0)
	for _, withBias := range []bool{true, false} {
		var b [2]*tensor.Tensor
		if withBias {
			b = e.Pair(e.Rand(dt, -1, 1, N))
		}
		o := e.Out(dt, M, N)
		e.Run("linear_scaled_fp8", func(i int) error {
			return ks[i].LinearScaledFP8(o[i], xq[i], xs[i], wq[i], ws[i], b[i])
		})
		e.Compare(fmt.Sprintf("linear_scaled_fp8 %s bias=%v", what, withBias), o, 20, 1)
		if wo, ok := tensor.As[tensor.FP8Weights](e.Got); ok { // weight-only, on the unquantized input
			fw := [2]tensor.FP8Weights{cpu.New(), wo}
			o := e.Out(dt, M, N)
			e.Run("linear_fp8", func(i int) error { return fw[i].LinearFP8(o[i], x[i], wq[i], ws[i], b[i]) })
			e.Compare(fmt.Sprintf("linear_fp8 %s bias=%v", what, withBias), o, 20, 1)
		}
	}
}
