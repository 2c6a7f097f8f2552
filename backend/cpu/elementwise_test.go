package cpu

import (
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/framepack-go/framepack/tensor"
)

func TestFill(t *testing.T) {
	be, s := scope(t)
	for _, dt := range []tensor.DType{tensor.F32, tensor.F16, tensor.BF16, tensor.F64, tensor.I64, tensor.I32, tensor.U8, tensor.Bool} {
		x := s.Empty(dt, 3, 7)
		if err := be.Fill(x, 2.5); err != nil {
			t.Fatal(dt, err)
		}
		y := s.Empty(tensor.F64, 3, 7)
		if err := be.Cast(y, x); err != nil {
			t.Fatal(dt, err)
		}
		want := 2.5
		switch dt {
		case tensor.I64, tensor.I32, tensor.U8:
			want = 2
		case tensor.Bool:
			want = 1
		}
		for i, v := range tensor.ViewAs[float64](y.HostBytes()) {
			if v != want {
				t.Fatalf("%s [%d] = %v, want %v", dt, i, v, want)
			}
		}
	}
	// A large fill takes the parallel path.
	x := s.Full(tensor.F32, -1.25, 1<<17+3)
	for i, v := range x.Float32s() {
		if v != -1.25 {
			t.Fatalf("[%d] = %v", i, v)
		}
	}
}

func TestCastRounding(t *testing.T) {
	_, s := scope(t)
	cases := []struct {
		in       float32
		bf16     float32 // round to nearest, ties to even
		f16      float32
		describe string
	}{
		{1, 1, 1, "exact"},
		{1 + 1.0/256, 1, 1 + 1.0/256, "bf16 tie rounds to even (down)"},
		{1 + 3.0/256, 1 + 4.0/256, 1 + 3.0/256, "bf16 tie rounds to even (up)"},
		{1 + 1.0/256 + 1.0/4096, 1 + 2.0/256, 1 + 1.0/256, "bf16 above tie rounds up"},
		{1 + 1.0/2048, 1, 1, "f16 tie rounds to even (down)"},
		{1 + 3.0/2048, 1, 1 + 4.0/2048, "f16 tie rounds to even (up)"},
		{0x1p-24, 0x1p-24, 0x1p-24, "smallest f16 subnormal"},
		{0x1p-25, 0x1p-25, 0, "f16 half of the smallest subnormal ties to zero"},
		{3 * 0x1p-25, 3 * 0x1p-25, 0x1p-23, "f16 subnormal tie to even (up)"},
		{5 * 0x1p-24, 5 * 0x1p-24, 5 * 0x1p-24, "f16 subnormal exact"},
		{70000, 70144, float32(math.Inf(1)), "f16 overflow"},
		{-65504, -65536, -65504, "f16 max"},
		{float32(math.Inf(-1)), float32(math.Inf(-1)), float32(math.Inf(-1)), "inf"},
	}
	in := make([]float32, len(cases))
	for i, c := range cases {
		in[i] = c.in
	}
	x := s.To(tensor.FromFloat32(in, len(in)))
	bf := values(s, s.Cast(x, tensor.BF16))
	hf := values(s, s.Cast(x, tensor.F16))
	for i, c := range cases {
		if bf[i] != c.bf16 {
			t.Errorf("%s: bf16(%v) = %v, want %v", c.describe, c.in, bf[i], c.bf16)
		}
		if hf[i] != c.f16 {
			t.Errorf("%s: f16(%v) = %v, want %v", c.describe, c.in, hf[i], c.f16)
		}
	}
	// NaN stays NaN both ways.
	nan := s.To(tensor.FromFloat32([]float32{float32(math.NaN())}, 1))
	for _, dt := range []tensor.DType{tensor.F16, tensor.BF16} {
		if v := values(s, s.Cast(nan, dt))[0]; !math.IsNaN(float64(v)) {
			t.Errorf("%s NaN became %v", dt, v)
		}
	}
}

func TestCastRoundTrips(t *testing.T) {
	_, s := scope(t)
	r := rng(1)
	for _, dt := range []tensor.DType{tensor.F16, tensor.BF16} {
		// Every half value survives half → f32 → half exactly.
		all := make([]uint16, 1<<16)
		for i := range all {
			all[i] = uint16(i)
		}
		h, err := tensor.FromBytes(dt, u16bytes(all), len(all))
		if err != nil {
			t.Fatal(err)
		}
		back := s.Cast(s.Cast(s.To(h), tensor.F32), dt).Uint16s()
		for i, v := range back {
			f := tensor.F32FromF16(uint16(i))
			if dt == tensor.BF16 {
				f = tensor.F32FromBF16(uint16(i))
			}
			if math.IsNaN(float64(f)) {
				continue // NaN payloads need not survive
			}
			if v != uint16(i) {
				t.Fatalf("%s %#04x came back as %#04x", dt, i, v)
			}
		}
		// f32 → half matches the scalar rounding for random values, on
		// the parallel path.
		vals := randVals(r, tensor.F32, 50003, -70000, 70000)
		got := values(s, s.Cast(input(s, tensor.F32, vals, len(vals)), dt))
		for i, v := range vals {
			if w := tensor.Rounder(dt)(v); got[i] != w && !(math.IsInf(float64(w), 0) && got[i] == w) {
				t.Fatalf("%s(%v) = %v, want %v", dt, v, got[i], w)
			}
		}
		// bf16 ↔ f16 goes through f32 with one rounding.
		other := tensor.F16
		if dt == tensor.F16 {
			other = tensor.BF16
		}
		small := randVals(r, dt, 999, -100, 100)
		got = values(s, s.Cast(input(s, dt, small, len(small)), other))
		for i, v := range small {
			if w := tensor.Rounder(other)(v); got[i] != w {
				t.Fatalf("%s→%s (%v) = %v, want %v", dt, other, v, got[i], w)
			}
		}
	}
	// Float → int truncates toward zero; int → float and bool.
	f := s.To(tensor.FromFloat32([]float32{-2.7, -0.5, 0, 0.5, 2.7, 1e9}, 6))
	for _, dt := range []tensor.DType{tensor.I64, tensor.I32} {
		got := values(s, s.Cast(s.Cast(f, dt), tensor.F32))
		want := []float32{-2, 0, 0, 0, 2, 1e9}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("%s: %v → %v, want %v", dt, f.Float32s()[i], got[i], want[i])
			}
		}
	}
	b := s.Cast(f, tensor.Bool).Uint8s()
	for i, w := range []uint8{1, 1, 0, 1, 1, 1} {
		if b[i] != w {
			t.Errorf("bool(%v) = %d", f.Float32s()[i], b[i])
		}
	}
	i64 := s.Cast(s.To(tensor.FromInt64([]int64{-3, 1 << 40, 7}, 3)), tensor.I32)
	if got := i64.Int32s(); got[0] != -3 || got[2] != 7 {
		t.Errorf("i64 → i32 = %v", got)
	}
}

func u16bytes(v []uint16) []byte {
	b := make([]byte, 2*len(v))
	for i, x := range v {
		b[2*i], b[2*i+1] = byte(x), byte(x>>8)
	}
	return b
}

// refView reads a strided view of src (as float64) in row-major order.
func refView(src []float32, off int, strides, shape []int) []float64 {
	n := tensor.Numel(shape)
	out := make([]float64, n)
	idx := make([]int, len(shape))
	for i := 0; i < n; i++ {
		o := off
		for ax := range shape {
			o += idx[ax] * strides[ax]
		}
		out[i] = float64(src[o])
		for ax := len(shape) - 1; ax >= 0; ax-- {
			if idx[ax]++; idx[ax] < shape[ax] {
				break
			}
			idx[ax] = 0
		}
	}
	return out
}

func TestPermuteSliceConcatExpand(t *testing.T) {
	_, s := scope(t)
	r := rng(2)
	for _, dt := range []tensor.DType{tensor.F32, tensor.BF16, tensor.I64, tensor.U8} {
		cdt := dt
		if !dt.IsFloat() {
			cdt = tensor.F32 // values are small integers either way
		}
		shape := []int{3, 1, 7, 17}
		vals := make([]float32, tensor.Numel(shape))
		for i := range vals {
			vals[i] = float32(r.IntN(200))
		}
		x := s.Cast(input(s, cdt, vals, shape...), dt)
		st := tensor.ContiguousStrides(shape)
		back := func(y *tensor.Tensor) []float32 { return values(s, s.Cast(y, tensor.F32)) }

		for _, perm := range [][]int{{0, 1, 2, 3}, {3, 2, 1, 0}, {0, 2, 3, 1}, {2, 0, 3, 1}} {
			var y *tensor.Tensor
			must(t, func() { y = s.Permute(x, perm...) })
			ps, pst := make([]int, 4), make([]int, 4)
			for i, p := range perm {
				ps[i], pst[i] = shape[p], st[p]
			}
			compare(t, name(dt, " permute ", perm), back(y), refView(vals, 0, pst, ps), exact)
		}
		var y *tensor.Tensor
		must(t, func() { y = s.Slice(x, 3, 5, -3) })
		compare(t, name(dt, " slice"), back(y), refView(vals, 5, st, []int{3, 1, 7, 9}), exact)
		must(t, func() { y = s.Slice(x, 0, 1, 2) })
		compare(t, name(dt, " slice axis 0"), back(y), refView(vals, st[0], st, []int{1, 1, 7, 17}), exact)

		// concat along axis 2 of x and a slice of x
		var z *tensor.Tensor
		must(t, func() { z = s.Concat(2, x, s.Slice(x, 2, 0, 3), x) })
		got := back(z)
		cs := tensor.ContiguousStrides([]int{3, 1, 17, 17})
		for a := 0; a < 3; a++ {
			for c := 0; c < 17; c++ {
				for d := 0; d < 17; d++ {
					src := c
					if c >= 10 {
						src = c - 10
					} else if c >= 7 {
						src = c - 7
					}
					if w := vals[a*st[0]+src*st[2]+d]; got[a*cs[0]+c*cs[2]+d] != w {
						t.Fatalf("%s concat [%d %d %d] = %v, want %v", dt, a, c, d, got[a*cs[0]+c*cs[2]+d], w)
					}
				}
			}
		}
		// expand a (3, 1, 7, 1) slice to (2, 3, 5, 7, 4)
		var e *tensor.Tensor
		must(t, func() { e = s.Expand(s.Slice(x, 3, 4, 5), 2, 3, 5, 7, 4) })
		compare(t, name(dt, " expand"), back(e), refView(vals, 4, []int{0, st[0], 0, st[2], 0}, []int{2, 3, 5, 7, 4}), exact)
	}
}

// TestCopyStrided drives the kernel directly with strided destinations,
// offsets, broadcast sources and long rows.
func TestCopyStrided(t *testing.T) {
	be, s := scope(t)
	r := rng(3)
	src := randVals(r, tensor.F32, 4000, -1, 1)
	x := s.To(tensor.FromFloat32(src, len(src)))
	cases := []struct {
		shape []int
		dOff  int
		dSt   []int
		sOff  int
		sSt   []int
		dstN  int
		note  string
	}{
		{[]int{5, 6}, 3, []int{10, 1}, 7, []int{1, 5}, 60, "transpose into a padded layout"},
		{[]int{4, 3, 2}, 1, []int{1, 8, 4}, 0, []int{6, 2, 1}, 40, "scattered destination"},
		{[]int{3, 33}, 0, []int{33, 1}, 100, []int{0, 1}, 99, "broadcast rows"},
		{[]int{3, 33}, 0, []int{33, 1}, 100, []int{1, 0}, 99, "broadcast columns"},
		{[]int{1, 1, 1}, 5, []int{1, 1, 1}, 9, []int{1, 1, 1}, 6, "one element"},
		{[]int{2, 1, 1500}, 0, []int{1500, 1500, 1}, 5, []int{2000, 7, 1}, 3000, "long rows with unit axis"},
		{[]int{3900}, 0, []int{1}, 50, []int{1}, 3900, "one long contiguous row"},
		{[]int{7, 3}, 18, []int{-3, 1}, 0, []int{3, 1}, 21, "negative destination stride"},
	}
	for _, c := range cases {
		want := make([]float64, c.dstN)
		view := refView(src, c.sOff, c.sSt, c.shape)
		// scatter the view into the reference destination
		idx := make([]int, len(c.shape))
		for i := range view {
			o := c.dOff
			for ax := range c.shape {
				o += idx[ax] * c.dSt[ax]
			}
			want[o] = view[i]
			for ax := len(c.shape) - 1; ax >= 0; ax-- {
				if idx[ax]++; idx[ax] < c.shape[ax] {
					break
				}
				idx[ax] = 0
			}
		}
		d := s.Zeros(tensor.F32, c.dstN)
		if err := be.Copy(d, c.dOff, c.dSt, x, c.sOff, c.sSt, c.shape); err != nil {
			t.Fatal(c.note, err)
		}
		compare(t, c.note, d.Float32s(), want, exact)
	}
	// A view leaving its tensor is an error, not a crash.
	d := s.Zeros(tensor.F32, 10)
	if err := be.Copy(d, 5, []int{1}, x, 0, []int{1}, []int{6}); err == nil {
		t.Error("copy past the destination's end succeeded")
	}
	if err := be.Copy(d, 0, []int{1}, x, 3999, []int{-1}, []int{10}); err != nil {
		t.Errorf("reversed source view: %v", err)
	}
	if err := be.Copy(d, 0, []int{1}, x, 5, []int{-1}, []int{10}); err == nil {
		t.Error("copy before the source's start succeeded")
	}
}

type unaryCase struct {
	op     tensor.UnaryOp
	lo, hi float64
	a, b   float32
	ref    func(x float64) float64
}

func unaryCases() []unaryCase {
	sig := func(x float64) float64 { return 1 / (1 + math.Exp(-x)) }
	return []unaryCase{
		{tensor.OpNeg, -5, 5, 0, 0, func(x float64) float64 { return -x }},
		{tensor.OpExp, -10, 10, 0, 0, math.Exp},
		{tensor.OpLog, 0.01, 100, 0, 0, math.Log},
		{tensor.OpSin, -10, 10, 0, 0, math.Sin},
		{tensor.OpCos, -10, 10, 0, 0, math.Cos},
		{tensor.OpSqrt, 0, 100, 0, 0, math.Sqrt},
		{tensor.OpRsqrt, 0.01, 100, 0, 0, func(x float64) float64 { return 1 / math.Sqrt(x) }},
		{tensor.OpAbs, -5, 5, 0, 0, math.Abs},
		{tensor.OpSquare, -5, 5, 0, 0, func(x float64) float64 { return x * x }},
		{tensor.OpSiLU, -20, 20, 0, 0, func(x float64) float64 { return x * sig(x) }},
		{tensor.OpGELU, -6, 6, 0, 0, func(x float64) float64 { return x / 2 * (1 + math.Erf(x/math.Sqrt2)) }},
		{tensor.OpGELUTanh, -6, 6, 0, 0, func(x float64) float64 {
			return x / 2 * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x)))
		}},
		{tensor.OpQuickGELU, -6, 6, 0, 0, func(x float64) float64 { return x * sig(1.702*x) }},
		{tensor.OpSigmoid, -30, 30, 0, 0, sig},
		{tensor.OpTanh, -5, 5, 0, 0, math.Tanh},
		{tensor.OpScale, -5, 5, -1.5, 0, func(x float64) float64 { return x * -1.5 }},
		{tensor.OpAddScalar, -5, 5, 0.25, 0, func(x float64) float64 { return x + 0.25 }},
		{tensor.OpClamp, -5, 5, -1, 2, func(x float64) float64 { return math.Min(math.Max(x, -1), 2) }},
		{tensor.OpPow, 0.1, 4, 2.5, 0, func(x float64) float64 { return math.Pow(x, 2.5) }},
		{tensor.OpRecip, 0.1, 4, 0, 0, func(x float64) float64 { return 1 / x }},
	}
}

func TestUnary(t *testing.T) {
	_, s := scope(t)
	r := rng(4)
	for _, c := range unaryCases() {
		for _, dt := range floatTypes {
			for _, n := range []int{1, 7, 33, 20001} {
				vals := randVals(r, dt, n, c.lo, c.hi)
				x := input(s, dt, vals, n)
				y := s.Empty(dt, n)
				if err := s.Backend().Unary(c.op, y, x, c.a, c.b); err != nil {
					t.Fatal(c.op, err)
				}
				want := make([]float64, n)
				for i, v := range vals {
					want[i] = c.ref(float64(v))
				}
				// Tiny absolute slack: outputs near zero (sin, silu)
				// are rounded relative to the input's size.
				compare(t, name(c.op, " ", dt, " n=", n), values(s, y), want, within(dt, constant(n, 1e-6)))
			}
		}
	}
}

func TestUnaryNaN(t *testing.T) {
	_, s := scope(t)
	x := s.To(tensor.FromFloat32([]float32{float32(math.NaN())}, 1))
	for _, c := range unaryCases() {
		y := s.Empty(tensor.F32, 1)
		if err := s.Backend().Unary(c.op, y, x, c.a, c.b); err != nil {
			t.Fatal(err)
		}
		if v := y.Float32s()[0]; !math.IsNaN(float64(v)) {
			t.Errorf("%s(NaN) = %v", c.op, v)
		}
	}
}

// broadcastRef computes a op b with numpy broadcasting in float64.
func broadcastRef(op tensor.BinaryOp, a []float32, as []int, b []float32, bs []int) ([]float64, []int) {
	shape, err := tensor.BroadcastShape(as, bs)
	if err != nil {
		panic(err)
	}
	st := func(from []int) []int {
		out := make([]int, len(shape))
		cs := tensor.ContiguousStrides(from)
		for i := range from {
			if from[i] != 1 {
				out[len(shape)-len(from)+i] = cs[i]
			}
		}
		return out
	}
	av := refView(a, 0, st(as), shape)
	bv := refView(b, 0, st(bs), shape)
	out := make([]float64, len(av))
	for i := range out {
		out[i] = binOne(op, av[i], bv[i])
	}
	return out, shape
}

func TestBinaryBroadcast(t *testing.T) {
	_, s := scope(t)
	r := rng(5)
	shapes := [][2][]int{
		{{3, 7}, {3, 7}},
		{{2, 5, 17}, {17}},           // bias vector
		{{2, 5, 17}, {5, 1}},         // per-row scale
		{{2, 1, 17}, {1, 5, 1}},      // outer product
		{{1}, {4, 33}},               // scalar on the left
		{{4, 33}, {1}},               // scalar on the right
		{{3, 1, 7, 1}, {3, 2, 1, 5}}, // both broadcast, interleaved
		{{1, 1}, {1}},
		{{2, 40000}, {40000}}, // long rows (split into pieces)
	}
	ops := []struct {
		op tensor.BinaryOp
		f  func(a, b *tensor.Tensor) *tensor.Tensor
	}{{tensor.OpAdd, s.Add}, {tensor.OpSub, s.Sub}, {tensor.OpMul, s.Mul}, {tensor.OpDiv, s.Div}, {tensor.OpMax, s.Maximum}, {tensor.OpMin, s.Minimum}}
	for _, sh := range shapes {
		for _, dt := range floatTypes {
			av := randVals(r, dt, tensor.Numel(sh[0]), -3, 3)
			bv := randVals(r, dt, tensor.Numel(sh[1]), 0.5, 3) // away from zero for div
			a := input(s, dt, av, sh[0]...)
			b := input(s, dt, bv, sh[1]...)
			for _, o := range ops {
				op := o.op
				var y *tensor.Tensor
				must(t, func() { y = o.f(a, b) })
				want, shape := broadcastRef(op, av, sh[0], bv, sh[1])
				if !slices.Equal(y.Shape(), shape) {
					t.Fatalf("%s %v %v: shape %v, want %v", op, sh[0], sh[1], y.Shape(), shape)
				}
				compare(t, name(op, " ", dt, " ", sh), values(s, y), want, within(dt, constant(len(want), 1e-7)))
			}
		}
	}
}

func TestBinaryIntsAndNaN(t *testing.T) {
	_, s := scope(t)
	a := s.To(tensor.FromInt64([]int64{7, -7, 3, 10}, 4))
	b := s.To(tensor.FromInt64([]int64{2}, 1))
	got := s.Div(a, b).Int64s()
	for i, w := range []int64{3, -3, 1, 5} {
		if got[i] != w {
			t.Errorf("i64 div [%d] = %d, want %d", i, got[i], w)
		}
	}
	if got := s.Mul(a, a).Int64s(); got[1] != 49 {
		t.Errorf("i64 mul = %v", got)
	}
	// max and min propagate NaN, as torch.maximum does
	nan := float32(math.NaN())
	x := s.To(tensor.FromFloat32([]float32{nan, 1, nan}, 3))
	y := s.To(tensor.FromFloat32([]float32{0, nan, nan}, 3))
	for _, v := range append(s.Maximum(x, y).Float32s(), s.Minimum(x, y).Float32s()...) {
		if !math.IsNaN(float64(v)) {
			t.Errorf("max/min with NaN gave %v", v)
		}
	}
}

func TestAllocTooLarge(t *testing.T) {
	be := backend(t)
	if _, err := be.Alloc(1 << 62); !errors.Is(err, tensor.ErrOutOfMemory) {
		t.Errorf("alloc of 2^62 bytes: %v", err)
	}
	if _, err := be.Alloc(-1); !errors.Is(err, tensor.ErrOutOfMemory) {
		t.Errorf("alloc of -1 bytes: %v", err)
	}
	b, err := be.Alloc(10)
	if err != nil || b.Bytes() != 10 {
		t.Fatalf("alloc of 10 bytes: %v %v", b, err)
	}
	if err := be.Upload(b, 8, []byte{1, 2, 3}); err == nil {
		t.Error("upload past the end succeeded")
	}
	if err := be.Upload(b, 7, []byte{1, 2, 3}); err != nil {
		t.Error(err)
	}
	out := make([]byte, 3)
	if err := be.Download(out, b, 7); err != nil || out[2] != 3 {
		t.Errorf("download %v %v", out, err)
	}
}
