package gpu

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/framepack-go/framepack/backend/cpu"
	"github.com/framepack-go/framepack/convchain"
	"github.com/framepack-go/framepack/hip"
	"github.com/framepack-go/framepack/kernels"
	"github.com/framepack-go/framepack/tensor"
)

// newGPU opens the GPU backend or skips the test with the reason there is
// none.
func newGPU(t testing.TB, o Options) *Backend {
	t.Helper()
	b, err := New(o)
	if err != nil {
		if errors.Is(err, hip.ErrNoGPU) {
			t.Skipf("no GPU: %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// env runs one op on the CPU backend (the reference) and on the GPU and
// compares the results.
type env struct {
	t   *testing.T
	cpu tensor.Backend
	gpu tensor.Backend
	rng *rand.Rand
}

var floats = []tensor.DType{tensor.F32, tensor.F16, tensor.BF16}

// hostOf makes a host tensor of dt from values (rounded to dt).
func hostOf(dt tensor.DType, vals []float64, shape ...int) *tensor.Tensor {
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

// rand makes random values in [lo, hi) (integers for integer dtypes).
func (e *env) rand(dt tensor.DType, lo, hi float64, shape ...int) *tensor.Tensor {
	n := tensor.Numel(shape)
	vals := make([]float64, n)
	for i := range vals {
		v := lo + (hi-lo)*e.rng.Float64()
		switch dt {
		case tensor.I64, tensor.I32, tensor.U8:
			v = math.Floor(v)
		case tensor.Bool:
			v = float64(e.rng.Intn(2))
		}
		vals[i] = v
	}
	return hostOf(dt, vals, shape...)
}

// on copies a host tensor onto a backend.
func (e *env) on(be tensor.Backend, h *tensor.Tensor) *tensor.Tensor {
	if h == nil {
		return nil
	}
	t, err := tensor.Alloc(be, h.DType(), h.Shape()...)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := be.Upload(t.Buffer(), 0, h.HostBytes()); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { tensor.Release(t) })
	return t
}

// pair is a host tensor on both backends.
func (e *env) pair(h *tensor.Tensor) [2]*tensor.Tensor {
	return [2]*tensor.Tensor{e.on(e.cpu, h), e.on(e.gpu, h)}
}

// out allocates a poisoned output on both backends (NaN for floats), so an
// element a kernel fails to write shows.
func (e *env) out(dt tensor.DType, shape ...int) [2]*tensor.Tensor {
	var r [2]*tensor.Tensor
	for i, be := range []tensor.Backend{e.cpu, e.gpu} {
		t, err := tensor.Alloc(be, dt, shape...)
		if err != nil {
			e.t.Fatal(err)
		}
		e.t.Cleanup(func() { tensor.Release(t) })
		poison := math.NaN()
		if !dt.IsFloat() {
			poison = 77
		}
		if t.Numel() > 0 {
			if err := be.Fill(t, poison); err != nil {
				e.t.Fatal(err)
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

// compare checks gpu against cpu elementwise: |g−c| ≤ r·(|c| + abs·rms(c))
// with r = tol(dtype, scale); abs = 0 is purely relative, 1 measures
// against the output's scale (for sums that cancel). Integers must match
// exactly; NaN never passes.
func (e *env) compare(what string, o [2]*tensor.Tensor, scale, abs float64) {
	e.t.Helper()
	if err := e.gpu.Sync(); err != nil {
		e.t.Fatalf("%s: %v", what, err)
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
			e.t.Errorf("%s: NaN at %d (cpu %v, gpu %v)", what, i, cv, gv)
			return
		}
		if math.IsInf(cv, 0) || math.IsInf(gv, 0) {
			if cv != gv {
				e.t.Errorf("%s: element %d: cpu %v, gpu %v", what, i, cv, gv)
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
		e.t.Errorf("%s: element %d: cpu %v, gpu %v (%.1f× the tolerance %.2g relative, %d elements, rms %.3g)",
			what, at, c[at], g[at], worst, r, len(c), rms)
	}
}

func (e *env) run(name string, fn func(be int) error) {
	e.t.Helper()
	for i, be := range []string{"cpu", "gpu"} {
		if err := fn(i); err != nil {
			e.t.Fatalf("%s on %s: %v", name, be, err)
		}
	}
}

func (e *env) be(i int) tensor.Backend {
	if i == 0 {
		return e.cpu
	}
	return e.gpu
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

// TestOps runs every op of tensor.Backend on random inputs of several
// shapes, odd ones included, in every dtype the op supports, on the GPU and
// on the CPU backend, and compares.
func TestOps(t *testing.T) {
	g := newGPU(t, Options{})
	t.Logf("GPU: %v; BLAS: %s", g.Device(), g.BLAS())
	if err := g.Warmup(); err != nil {
		t.Fatal(err)
	}
	ref := cpu.New()
	for _, c := range opCases {
		t.Run(c.name, func(t *testing.T) {
			c.fn(&env{t: t, cpu: ref, gpu: g, rng: rand.New(rand.NewSource(int64(len(c.name))))})
		})
	}
	// framepack's own math functions (the AMD code path), GEMM kernel and
	// generic attention kernel on this GPU.
	own := newGPU(t, Options{OwnMath: true, NoBLAS: true, GenericAttention: true})
	t.Run("own_math", func(t *testing.T) {
		e := &env{t: t, cpu: ref, gpu: own, rng: rand.New(rand.NewSource(9))}
		testUnary(e)
		testAttention(e)
		testSoftmax(e)
		testMatMul(e)
		testLinear(e)
	})
	// The kernels as the run-time compiler builds them (hiprtc / NVRTC, the
	// vendor's math on NVIDIA), where the default loads precompiled ones.
	rt := newGPU(t, Options{RuntimeCompile: true, CacheDir: "-"})
	t.Run("runtime_compiled", func(t *testing.T) {
		e := &env{t: t, cpu: ref, gpu: rt, rng: rand.New(rand.NewSource(10))}
		testUnary(e)
		testAttention(e)
		testSoftmax(e)
	})
	t.Logf("memory after the ops: %v", g.Stats())
}

// TestPrecompiledKernels loads every kernel module on this GPU with the disk
// cache off and checks that none was compiled at run time where the binary
// ships the GPU's architecture.
func TestPrecompiledKernels(t *testing.T) {
	var log bytes.Buffer
	g := newGPU(t, Options{CacheDir: "-", Log: slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	start := time.Now()
	if err := g.Warmup(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: every module loaded in %.2f s; precompiled kernels: %s", g.Device(), time.Since(start).Seconds(), kernels.Summary())
	shipped := false
	for _, m := range kernels.Modules() {
		if g.dev.Vendor == hip.AMD {
			_, _, ok, _ := kernels.Precompiled(m, kernels.AMDTarget(g.dev.Arch))
			shipped = ok
		} else {
			_, shipped = kernels.NVIDIATarget(m, g.dev.ComputeMajor, g.dev.ComputeMinor)
		}
		if !shipped {
			break
		}
	}
	if !shipped {
		t.Skipf("this binary ships no kernels for %s", g.dev.Arch)
	}
	if strings.Contains(log.String(), "compiled kernels") {
		t.Errorf("kernels were compiled at run time although %s is shipped:\n%s", g.dev.Arch, log.String())
	}
}

var opCases = []struct {
	name string
	fn   func(*env)
}{
	{"fill", testFill},
	{"cast", testCast},
	{"copy", testCopy},
	{"unary", testUnary},
	{"binary", testBinary},
	{"group_norm", testGroupNorm},
	{"layer_norm", testLayerNorm},
	{"rms_norm", testRMSNorm},
	{"softmax", testSoftmax},
	{"reduce", testReduce},
	{"attention", func(e *env) {
		// cuDNN's fused attention takes the unmasked bf16/f16 calls where
		// the library has it.
		g := e.gpu.(*Backend)
		before := g.FusedAttentionCalls()
		testAttention(e)
		n := g.FusedAttentionCalls() - before
		e.t.Logf("cuDNN fused attention ran %d calls", n)
		if h := g.dnn; h != nil && h.Lib().HasFusedAttention() && n == 0 {
			e.t.Errorf("%v has fused attention but ran none", h.Lib())
		}
	}},
	{"attention_flash", func(e *env) {
		// framepack's tensor-core kernels where cuDNN would run.
		defer func(f bool) { attnNoFused = f }(attnNoFused)
		attnNoFused = true
		testAttention(e)
	}},
	{"attention_mma", func(e *env) {
		// The masked tensor-core kernel on the unmasked cases too.
		defer func(f, g bool) { attnNoFlash, attnNoFused = f, g }(attnNoFlash, attnNoFused)
		attnNoFlash, attnNoFused = true, true
		testAttention(e)
	}},
	{"rope", testRoPE},
	{"pad", testPad},
	{"upsample", testUpsample},
	{"avg_pool3d", testAvgPool},
	{"embedding", testEmbedding},
	{"matmul", testMatMul},
	{"linear", testLinear},
	{"conv3d", testConv3d},
	{"conv3d_tiers", testConvTiers},
}

var allTypes = []tensor.DType{tensor.F32, tensor.F16, tensor.BF16, tensor.I64, tensor.I32, tensor.U8, tensor.Bool}

func testFill(e *env) {
	for _, dt := range allTypes {
		for _, shape := range [][]int{{1}, {7}, {129}, {3, 33}} {
			for _, v := range []float64{1.5, -2.75, 0} {
				o := e.out(dt, shape...)
				e.run("fill", func(i int) error { return e.be(i).Fill(o[i], v) })
				e.compare(fmt.Sprintf("fill %s %s %v", dt, shapeName(shape), v), o, 1, 0.01)
			}
		}
	}
}

func testCast(e *env) {
	for _, src := range allTypes {
		lo, hi := -300.0, 300.0
		if src == tensor.U8 {
			lo, hi = 0, 256
		}
		x := e.pair(e.rand(src, lo, hi, 3, 129))
		for _, dst := range allTypes {
			o := e.out(dst, 3, 129)
			e.run("cast", func(i int) error { return e.be(i).Cast(o[i], x[i]) })
			e.compare(fmt.Sprintf("cast %s→%s", src, dst), o, 1, 0.01)
		}
	}
}

func testCopy(e *env) {
	for _, dt := range []tensor.DType{tensor.F32, tensor.BF16, tensor.I64, tensor.U8} {
		// transpose (3, 7, 33) → (33, 3, 7)
		x := e.pair(e.rand(dt, -50, 50, 3, 7, 33))
		o := e.out(dt, 33, 3, 7)
		e.run("copy", func(i int) error {
			return e.be(i).Copy(o[i], 0, []int{21, 7, 1}, x[i], 0, []int{1, 231, 33}, []int{33, 3, 7})
		})
		e.compare("copy permute "+dt.String(), o, 1, 0.01)
		// a slice of axis 1 into the middle of a bigger tensor
		o = e.out(dt, 3, 9, 33)
		e.run("copy", func(i int) error {
			if err := e.be(i).Fill(o[i], 0); err != nil {
				return err
			}
			return e.be(i).Copy(o[i], 2*33, []int{297, 33, 1}, x[i], 33, []int{231, 33, 1}, []int{3, 5, 33})
		})
		e.compare("copy slice "+dt.String(), o, 1, 0.01)
		// broadcast (expand) a row
		r := e.pair(e.rand(dt, -50, 50, 1, 129))
		o = e.out(dt, 7, 129)
		e.run("copy", func(i int) error {
			return e.be(i).Copy(o[i], 0, []int{129, 1}, r[i], 0, []int{0, 1}, []int{7, 129})
		})
		e.compare("copy expand "+dt.String(), o, 1, 0.01)
		// rank 7, reversed axes: more axes than one launch takes
		shape := []int{2, 3, 2, 3, 2, 2, 3}
		x7 := e.pair(e.rand(dt, -50, 50, shape...))
		rev := make([]int, 7)
		cs := tensor.ContiguousStrides(shape)
		rs := make([]int, 7)
		for j := range rev {
			rev[j] = shape[6-j]
			rs[j] = cs[6-j]
		}
		o = e.out(dt, rev...)
		e.run("copy", func(i int) error {
			return e.be(i).Copy(o[i], 0, tensor.ContiguousStrides(rev), x7[i], 0, rs, rev)
		})
		e.compare("copy rank7 "+dt.String(), o, 1, 0.01)
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

func testUnary(e *env) {
	for _, u := range unaryRanges {
		for _, dt := range floats {
			for _, shape := range [][]int{{1}, {7}, {129}, {33, 65}} {
				x := e.pair(e.rand(dt, u.lo, u.hi, shape...))
				o := e.out(dt, shape...)
				e.run(u.op.String(), func(i int) error { return e.be(i).Unary(u.op, o[i], x[i], u.a, u.b) })
				abs := u.abs
				if abs == 0 {
					abs = 1e-3
				}
				if abs < 0 {
					abs = 0
				}
				e.compare(fmt.Sprintf("%s [%g,%g] %s %s", u.op, u.lo, u.hi, dt, shapeName(shape)), o, 1, abs)
			}
		}
	}
}

func testBinary(e *env) {
	pairs := [][2][]int{{{129}, {129}}, {{7, 33}, {33}}, {{7, 1}, {1, 33}}, {{3, 1, 5}, {3, 4, 1}}, {{1}, {1}}, {{2, 3, 65}, {2, 1, 65}}, {{1000}, {1}}}
	for op := tensor.OpAdd; op <= tensor.OpMin; op++ {
		for _, dt := range []tensor.DType{tensor.F32, tensor.F16, tensor.BF16, tensor.I64, tensor.I32} {
			for _, p := range pairs {
				shape, err := tensor.BroadcastShape(p[0], p[1])
				if err != nil {
					e.t.Fatal(err)
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
				x := e.pair(e.rand(dt, -hi, hi, p[0]...))
				y := e.pair(e.rand(dt, lo, hi, p[1]...))
				o := e.out(dt, shape...)
				e.run(op.String(), func(i int) error {
					return e.be(i).Binary(op, o[i], x[i], bstrides(p[0], shape), y[i], bstrides(p[1], shape))
				})
				e.compare(fmt.Sprintf("%s %s %s·%s", op, dt, shapeName(p[0]), shapeName(p[1])), o, 1, 0.01)
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

func testGroupNorm(e *env) {
	cases := []struct {
		shape  []int
		groups int
	}{{[]int{1, 4, 7}, 2}, {[]int{2, 32, 3, 5, 7}, 8}, {[]int{1, 4, 5, 64, 64}, 2}, {[]int{3, 6, 1}, 3}}
	for _, c := range cases {
		for _, dt := range floats {
			for _, affine := range []bool{true, false} {
				for _, silu := range []bool{false, true} {
					x := e.pair(e.rand(dt, 1, 4, c.shape...))
					var w, b [2]*tensor.Tensor
					if affine {
						w = e.pair(e.rand(dt, 0.5, 1.5, c.shape[1]))
						b = e.pair(e.rand(dt, -1, 1, c.shape[1]))
					}
					o := e.out(dt, c.shape...)
					e.run("group_norm", func(i int) error { return e.be(i).GroupNorm(o[i], x[i], w[i], b[i], c.groups, 1e-6, silu) })
					e.compare(fmt.Sprintf("group_norm %s %s G=%d affine=%v silu=%v", dt, shapeName(c.shape), c.groups, affine, silu), o, 5, 1)
				}
			}
		}
	}
}

func testLayerNorm(e *env) {
	for _, shape := range [][]int{{7, 33}, {3, 129}, {2, 3, 1000}, {1, 1}, {5, 3000}} {
		for _, dt := range floats {
			for _, affine := range []bool{true, false} {
				d := shape[len(shape)-1]
				x := e.pair(e.rand(dt, 2, 5, shape...))
				var w, b [2]*tensor.Tensor
				if affine {
					w = e.pair(e.rand(dt, 0.5, 1.5, d))
					b = e.pair(e.rand(dt, -1, 1, d))
				}
				o := e.out(dt, shape...)
				e.run("layer_norm", func(i int) error { return e.be(i).LayerNorm(o[i], x[i], w[i], b[i], 1e-5) })
				e.compare(fmt.Sprintf("layer_norm %s %s affine=%v", dt, shapeName(shape), affine), o, 5, 1)
			}
		}
	}
}

func testRMSNorm(e *env) {
	for _, shape := range [][]int{{7, 33}, {5, 3072}, {1, 1}} {
		for _, dt := range floats {
			for _, affine := range []bool{true, false} {
				d := shape[len(shape)-1]
				x := e.pair(e.rand(dt, -3, 3, shape...))
				var w [2]*tensor.Tensor
				if affine {
					w = e.pair(e.rand(dt, 0.5, 1.5, d))
				}
				o := e.out(dt, shape...)
				e.run("rms_norm", func(i int) error { return e.be(i).RMSNorm(o[i], x[i], w[i], 1e-6) })
				e.compare(fmt.Sprintf("rms_norm %s %s affine=%v", dt, shapeName(shape), affine), o, 2, 1)
			}
		}
	}
}

func testSoftmax(e *env) {
	for _, shape := range [][]int{{7, 33}, {3, 1000}, {1, 1}, {2, 3, 129}, {3, 2500}} {
		for _, dt := range floats {
			x := e.pair(e.rand(dt, -10, 10, shape...))
			o := e.out(dt, shape...)
			e.run("softmax", func(i int) error { return e.be(i).Softmax(o[i], x[i]) })
			e.compare(fmt.Sprintf("softmax %s %s", dt, shapeName(shape)), o, 5, 1)
		}
	}
}

func testReduce(e *env) {
	for op := tensor.ReduceSum; op <= tensor.ReduceAbsMean; op++ {
		for _, shape := range [][]int{{7, 33}, {3, 1000}, {5, 1}, {1, 129}} {
			if shape[1] == 1 && op == tensor.ReduceVarU {
				continue // NaN by definition
			}
			for _, dt := range floats {
				x := e.pair(e.rand(dt, -3, 5, shape...))
				o := e.out(dt, shape[0])
				e.run("reduce", func(i int) error { return e.be(i).Reduce(op, o[i], x[i]) })
				e.compare(fmt.Sprintf("reduce %d %s %s", op, dt, shapeName(shape)), o, 20, 1)
			}
		}
	}
}

func testAttention(e *env) {
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
			q := e.pair(e.rand(dt, -2, 2, c.B, c.Lq, c.Hq, c.D))
			k := e.pair(e.rand(dt, -2, 2, c.B, c.Lk, c.Hkv, c.D))
			v := e.pair(e.rand(dt, -2, 2, c.B, c.Lk, c.Hkv, c.D))
			var p [2]tensor.AttnParams
			var km, mk [2]*tensor.Tensor
			if c.keyMask {
				h := e.rand(tensor.F32, 0, 1, c.B, c.Lk)
				for i, f := range h.Float32s() {
					h.Float32s()[i] = float32(b2i(f < 0.7 || i%c.Lk == 0))
				}
				km = e.pair(h)
			}
			if c.mask {
				h := e.rand(tensor.F32, -3, 1, c.maskBatch, c.Lq, c.Lk)
				for i, f := range h.Float32s() {
					if f < -2 && i%c.Lk != 0 {
						h.Float32s()[i] = float32(math.Inf(-1))
					}
				}
				mk = e.pair(h)
			}
			for i := range p {
				p[i] = tensor.AttnParams{Causal: c.causal, FrameLen: c.frame, KeyMask: km[i], Mask: mk[i]}
			}
			o := e.out(dt, c.B, c.Lq, c.Hq, c.D)
			e.run("attention", func(i int) error { return e.be(i).Attention(o[i], q[i], k[i], v[i], p[i]) })
			e.compare(fmt.Sprintf("attention %s %+v", dt, c), o, 20, 1)
		}
	}
}

func testRoPE(e *env) {
	for _, dt := range floats {
		for _, shape := range [][]int{{2, 7, 3, 16}, {1, 33, 1, 2}} {
			x := e.pair(e.rand(dt, -3, 3, shape...))
			cs := e.pair(e.rand(tensor.F32, -1, 1, shape[1], shape[3]))
			sn := e.pair(e.rand(tensor.F32, -1, 1, shape[1], shape[3]))
			o := e.out(dt, shape...)
			e.run("rope", func(i int) error { return e.be(i).RoPE(o[i], x[i], cs[i], sn[i]) })
			e.compare(fmt.Sprintf("rope %s %s", dt, shapeName(shape)), o, 1, 0.01)
		}
	}
}

func testPad(e *env) {
	for _, dt := range []tensor.DType{tensor.F32, tensor.BF16, tensor.I64, tensor.U8} {
		for _, mode := range []tensor.PadMode{tensor.PadZeros, tensor.PadReplicate} {
			for _, c := range []struct{ shape, before, after []int }{
				{[]int{2, 3, 5, 7}, []int{1, 2, 0}, []int{0, 1, 3}},
				{[]int{3, 7}, []int{2}, []int{1}},
				{[]int{1, 2, 3, 4, 5}, []int{2, 0, 1}, []int{0, 0, 1}},
			} {
				x := e.pair(e.rand(dt, -50, 50, c.shape...))
				out := append([]int(nil), c.shape...)
				off := len(out) - len(c.before)
				for i := range c.before {
					out[off+i] += c.before[i] + c.after[i]
				}
				o := e.out(dt, out...)
				e.run("pad", func(i int) error { return e.be(i).Pad(o[i], x[i], c.before, mode) })
				e.compare(fmt.Sprintf("pad %s mode %d %s %v", dt, mode, shapeName(c.shape), c.before), o, 1, 0.01)
			}
		}
	}
}

func testUpsample(e *env) {
	for _, dt := range []tensor.DType{tensor.F32, tensor.F16, tensor.U8} {
		for _, sc := range [][3]int{{2, 2, 2}, {1, 3, 2}} {
			shape := []int{1, 2, 3, 4, 5}
			x := e.pair(e.rand(dt, -50, 50, shape...))
			o := e.out(dt, 1, 2, 3*sc[0], 4*sc[1], 5*sc[2])
			e.run("upsample", func(i int) error { return e.be(i).UpsampleNearest(o[i], x[i], sc) })
			e.compare(fmt.Sprintf("upsample %s %v", dt, sc), o, 1, 0.01)
		}
	}
}

func testAvgPool(e *env) {
	for _, dt := range floats {
		for _, k := range [][3]int{{2, 2, 2}, {1, 3, 3}, {3, 1, 1}} {
			shape := []int{2, 3, 6, 12, 6}
			x := e.pair(e.rand(dt, -3, 3, shape...))
			o := e.out(dt, 2, 3, 6/k[0], 12/k[1], 6/k[2])
			e.run("avg_pool3d", func(i int) error { return e.be(i).AvgPool3d(o[i], x[i], k) })
			e.compare(fmt.Sprintf("avg_pool3d %s %v", dt, k), o, 2, 1)
		}
	}
}

func testEmbedding(e *env) {
	for _, dt := range []tensor.DType{tensor.F32, tensor.BF16, tensor.I64} {
		for _, it := range []tensor.DType{tensor.I64, tensor.I32} {
			table := e.pair(e.rand(dt, -5, 5, 50, 33))
			ids := e.pair(e.rand(it, 0, 50, 7))
			o := e.out(dt, 7, 33)
			e.run("embedding", func(i int) error { return e.be(i).Embedding(o[i], table[i], ids[i]) })
			e.compare(fmt.Sprintf("embedding %s ids %s", dt, it), o, 1, 0.01)
			bad := e.pair(hostOf(it, []float64{3, 50}, 2))
			o = e.out(dt, 2, 33)
			if err := e.gpu.Embedding(o[1], table[1], bad[1]); err == nil {
				e.t.Errorf("embedding with id 50 of 50 rows: no error")
			}
		}
	}
}

func testMatMul(e *env) {
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
			x := e.pair(e.rand(dt, -1, 1, as...))
			y := e.pair(e.rand(dt, -1, 1, bs...))
			o := e.out(dt, c.B, c.M, c.N)
			p := tensor.MatMulParams{Batch: c.B, M: c.M, N: c.N, K: c.K, TransA: c.ta, TransB: c.tb, Alpha: c.alpha}
			e.run("matmul", func(i int) error { return e.be(i).MatMul(o[i], x[i], y[i], p) })
			e.compare(fmt.Sprintf("matmul %s %+v", dt, c), o, 20, 1)
		}
	}
}

func testLinear(e *env) {
	for _, c := range []struct{ M, K, N int }{{33, 129, 65}, {1, 7, 3}, {200, 64, 96}} {
		for _, dt := range floats {
			for _, withBias := range []bool{true, false} {
				x := e.pair(e.rand(dt, -1, 1, c.M, c.K))
				w := e.pair(e.rand(dt, -1, 1, c.N, c.K))
				var b [2]*tensor.Tensor
				if withBias {
					b = e.pair(e.rand(dt, -1, 1, c.N))
				}
				o := e.out(dt, c.M, c.N)
				e.run("linear", func(i int) error { return e.be(i).Linear(o[i], x[i], w[i], b[i]) })
				e.compare(fmt.Sprintf("linear %s %+v bias=%v", dt, c, withBias), o, 20, 1)
			}
		}
	}
}

var convCases = []struct {
	x, w        []int
	stride, pad [3]int
	withBias    bool
}{
	{[]int{1, 3, 5, 7, 9}, []int{4, 3, 3, 3, 3}, [3]int{1, 1, 1}, [3]int{1, 1, 1}, true},
	{[]int{2, 2, 3, 9, 8}, []int{5, 2, 1, 3, 3}, [3]int{1, 2, 2}, [3]int{0, 1, 1}, false},
	{[]int{1, 4, 2, 5, 5}, []int{3, 4, 1, 1, 1}, [3]int{1, 1, 1}, [3]int{0, 0, 0}, true},
	{[]int{1, 16, 3, 17, 19}, []int{8, 16, 3, 3, 3}, [3]int{1, 1, 1}, [3]int{1, 1, 1}, true},
}

// testConvTiers runs every conv3d tier of the chain (vendor library, GEMM,
// naive kernel) directly.
func testConvTiers(e *env) {
	g := e.gpu.(*Backend)
	for _, tier := range g.ConvTiers() {
		for _, c := range convCases {
			for _, dt := range floats {
				x := e.pair(e.rand(dt, -1, 1, c.x...))
				w := e.pair(e.rand(dt, -1, 1, c.w...))
				var b [2]*tensor.Tensor
				if c.withBias {
					b = e.pair(e.rand(dt, -1, 1, c.w[0]))
				}
				out := []int{c.x[0], c.w[0], 0, 0, 0}
				for i := 0; i < 3; i++ {
					out[2+i] = (c.x[2+i]+2*c.pad[i]-c.w[2+i])/c.stride[i] + 1
				}
				o := e.out(dt, out...)
				p := tensor.ConvParams{Stride: c.stride, Padding: c.pad}
				if err := e.cpu.Conv3d(o[0], x[0], w[0], b[0], p); err != nil {
					e.t.Fatal(err)
				}
				k := convchain.KeyOf("test", x[1], w[1], b[1], p)
				plan, err := tier.Plan(k, nil)
				if err != nil {
					e.t.Logf("tier %s skips %v: %v", tier.Name(), k, err)
					continue
				}
				if err := tier.Run(plan, o[1], x[1], w[1], b[1], p); err != nil {
					e.t.Errorf("tier %s (%s) on %v: %v", tier.Name(), plan.Algorithm, k, err)
					continue
				}
				e.compare(fmt.Sprintf("conv3d tier %s (%s) %s x%v w%v", tier.Name(), plan.Algorithm, dt, c.x, c.w), o, 20, 1)
			}
		}
	}
}

func testConv3d(e *env) {
	for _, c := range []struct {
		x, w        []int
		stride, pad [3]int
		withBias    bool
	}{
		{[]int{1, 3, 5, 7, 9}, []int{4, 3, 3, 3, 3}, [3]int{1, 1, 1}, [3]int{1, 1, 1}, true},
		{[]int{2, 2, 3, 9, 8}, []int{5, 2, 1, 3, 3}, [3]int{1, 2, 2}, [3]int{0, 1, 1}, false},
		{[]int{1, 4, 2, 5, 5}, []int{3, 4, 1, 1, 1}, [3]int{1, 1, 1}, [3]int{0, 0, 0}, true},
	} {
		for _, dt := range floats {
			x := e.pair(e.rand(dt, -1, 1, c.x...))
			w := e.pair(e.rand(dt, -1, 1, c.w...))
			var b [2]*tensor.Tensor
			if c.withBias {
				b = e.pair(e.rand(dt, -1, 1, c.w[0]))
			}
			out := []int{c.x[0], c.w[0], 0, 0, 0}
			for i := 0; i < 3; i++ {
				out[2+i] = (c.x[2+i]+2*c.pad[i]-c.w[2+i])/c.stride[i] + 1
			}
			o := e.out(dt, out...)
			p := tensor.ConvParams{Stride: c.stride, Padding: c.pad}
			e.run("conv3d", func(i int) error { return e.be(i).Conv3d(o[i], x[i], w[i], b[i], p) })
			e.compare(fmt.Sprintf("conv3d %s x%v w%v %+v", dt, c.x, c.w, p), o, 20, 1)
		}
	}
}

// TestMemory checks the allocator: the hard cap refuses before the driver
// sees a request, use and peak are tracked, trimming works, and uploads
// and downloads of several staging chunks at odd offsets round-trip.
func TestMemory(t *testing.T) {
	g := newGPU(t, Options{Limit: 64 << 20})
	a, err := g.Alloc(40 << 20)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Alloc(30 << 20); !errors.Is(err, tensor.ErrOutOfMemory) {
		t.Fatalf("allocation over the 64 MiB cap: want ErrOutOfMemory, have %v", err)
	}
	s := g.Stats()
	if s.InUse < 40<<20 || s.Peak < s.InUse || s.Limit != 64<<20 {
		t.Errorf("stats %+v", s)
	}
	n := 20<<20 + 3
	src := make([]byte, n)
	rng := rand.New(rand.NewSource(1))
	rng.Read(src)
	if err := g.Upload(a, 5, src); err != nil {
		t.Fatal(err)
	}
	back := make([]byte, n)
	if err := g.Download(back, a, 5); err != nil {
		t.Fatal(err)
	}
	for i := range src {
		if src[i] != back[i] {
			t.Fatalf("round trip differs at byte %d", i)
		}
	}
	if err := g.Upload(a, 40<<20-2, src[:3]); err == nil {
		t.Error("upload past the end of a buffer: no error")
	}
	g.Free(a)
	if err := g.Trim(); err != nil {
		t.Fatal(err)
	}
	s = g.Stats()
	if s.InUse > 4096 || s.Peak < 40<<20 {
		t.Errorf("after free: %+v", s)
	}
	t.Logf("after trim: %v", s)
	b2, err := g.Alloc(60 << 20)
	if err != nil {
		t.Fatalf("60 MiB under a 64 MiB cap after freeing: %v", err)
	}
	g.Free(b2)
}
