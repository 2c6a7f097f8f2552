package cpu

import (
	"fmt"
	"math"

	"github.com/framepack-go/framepack/tensor"
)

// chunk is the number of elements a half-precision loop widens at a time.
const chunk = 2048

// word is an element viewed by its size only (copies are dtype-agnostic).
type word interface {
	~uint8 | ~uint16 | ~uint32 | ~uint64
}

// ---- Fill ----

func (be *Backend) Fill(dst *tensor.Tensor, v float64) error {
	b, err := raw(dst)
	if err != nil {
		return err
	}
	switch dst.DType() {
	case tensor.F32:
		fillPar(be, tensor.ViewAs[float32](b), float32(v))
	case tensor.F16:
		fillPar(be, tensor.ViewAs[uint16](b), tensor.F16FromF32(float32(v)))
	case tensor.BF16:
		fillPar(be, tensor.ViewAs[uint16](b), tensor.BF16FromF32(float32(v)))
	case tensor.F64:
		fillPar(be, tensor.ViewAs[float64](b), v)
	case tensor.I64:
		fillPar(be, tensor.ViewAs[int64](b), int64(v))
	case tensor.I32:
		fillPar(be, tensor.ViewAs[int32](b), int32(v))
	case tensor.U8:
		fillPar(be, b, uint8(int64(v)))
	case tensor.Bool:
		var x uint8
		if v != 0 {
			x = 1
		}
		fillPar(be, b, x)
	default:
		return unsupported("fill", dst.DType())
	}
	return nil
}

func fillPar[T any](be *Backend, d []T, v T) {
	be.parallel(len(d), 1<<16, func(lo, hi int) {
		s := d[lo:hi]
		for i := range s {
			s[i] = v
		}
	})
}

// ---- Cast ----

func (be *Backend) Cast(dst, src *tensor.Tensor) error {
	if dst.Numel() != src.Numel() {
		return fmt.Errorf("cpu: cast of %v into %v", src, dst)
	}
	bs, err := rawAll(dst, src)
	if err != nil {
		return err
	}
	db, sb := bs[0], bs[1]
	dt, st := dst.DType(), src.DType()
	if dt.Size() == 0 || st.Size() == 0 {
		return fmt.Errorf("cpu: cast %s to %s: %w", st, dt, tensor.ErrUnsupported)
	}
	n := dst.Numel()
	switch {
	case dt == st:
		copy(db, sb)
		return nil
	case dt == tensor.F32 && isHalf(st):
		be.widenInto(tensor.ViewAs[float32](db), tensor.ViewAs[uint16](sb), st)
		return nil
	case st == tensor.F32 && isHalf(dt):
		be.narrowInto(tensor.ViewAs[uint16](db), tensor.ViewAs[float32](sb), dt)
		return nil
	}
	// The general path goes through float64, which holds every value of
	// every dtype exactly except int64 beyond 2^53.
	be.parallel(n, 1<<14, func(lo, hi int) {
		var buf [chunk]float64
		for i := lo; i < hi; i += chunk {
			m := min(chunk, hi-i)
			readF64(buf[:m], sb, st, i)
			writeF64(db, dt, i, buf[:m])
		}
	})
	return nil
}

func readF64(dst []float64, b []byte, dt tensor.DType, off int) {
	switch dt {
	case tensor.F32:
		toF64(dst, tensor.ViewAs[float32](b)[off:], func(v float32) float64 { return float64(v) })
	case tensor.F16:
		toF64(dst, tensor.ViewAs[uint16](b)[off:], func(v uint16) float64 { return float64(tensor.F32FromF16(v)) })
	case tensor.BF16:
		toF64(dst, tensor.ViewAs[uint16](b)[off:], func(v uint16) float64 { return float64(tensor.F32FromBF16(v)) })
	case tensor.F64:
		copy(dst, tensor.ViewAs[float64](b)[off:])
	case tensor.I64:
		toF64(dst, tensor.ViewAs[int64](b)[off:], func(v int64) float64 { return float64(v) })
	case tensor.I32:
		toF64(dst, tensor.ViewAs[int32](b)[off:], func(v int32) float64 { return float64(v) })
	case tensor.U8, tensor.Bool:
		toF64(dst, b[off:], func(v byte) float64 { return float64(v) })
	case tensor.F8E4M3:
		toF64(dst, b[off:], func(v byte) float64 { return float64(tensor.F32FromF8E4M3(v)) })
	}
}

// writeF64 stores values, truncating toward zero for integers as torch's
// .to() does.
func writeF64(b []byte, dt tensor.DType, off int, src []float64) {
	switch dt {
	case tensor.F32:
		fromF64(tensor.ViewAs[float32](b)[off:], src, func(v float64) float32 { return float32(v) })
	case tensor.F16:
		fromF64(tensor.ViewAs[uint16](b)[off:], src, func(v float64) uint16 { return tensor.F16FromF32(float32(v)) })
	case tensor.BF16:
		fromF64(tensor.ViewAs[uint16](b)[off:], src, func(v float64) uint16 { return tensor.BF16FromF32(float32(v)) })
	case tensor.F64:
		copy(tensor.ViewAs[float64](b)[off:], src)
	case tensor.I64:
		fromF64(tensor.ViewAs[int64](b)[off:], src, func(v float64) int64 { return int64(v) })
	case tensor.I32:
		fromF64(tensor.ViewAs[int32](b)[off:], src, func(v float64) int32 { return int32(v) })
	case tensor.U8:
		fromF64(b[off:], src, func(v float64) uint8 { return uint8(int64(v)) })
	case tensor.F8E4M3: // through f32, as torch: no saturation (fp8.go)
		fromF64(b[off:], src, func(v float64) uint8 { return tensor.F8E4M3FromF32(float32(v)) })
	case tensor.Bool:
		fromF64(b[off:], src, func(v float64) uint8 {
			if v != 0 {
				return 1
			}
			return 0
		})
	}
}

// toF64 converts the first len(dst) elements of s with f.
func toF64[T any](dst []float64, s []T, f func(T) float64) {
	for i, v := range s[:len(dst)] {
		dst[i] = f(v)
	}
}

// fromF64 converts src with f into the first len(src) elements of d.
func fromF64[T any](d []T, src []float64, f func(float64) T) {
	d = d[:len(src)]
	for i, v := range src {
		d[i] = f(v)
	}
}

// ---- Copy ----

// rowCursor walks the outer axes (all but the last) of a collapsed shape,
// tracking one offset per stride set.
type rowCursor struct {
	shape []int
	st    [][]int
	idx   []int
	off   []int
}

func newCursor(shape []int, st [][]int, base []int, row int) *rowCursor {
	c := &rowCursor{shape: shape[:len(shape)-1], st: st, idx: make([]int, len(shape)-1), off: append([]int(nil), base...)}
	for ax := len(c.shape) - 1; ax >= 0; ax-- {
		i := row % c.shape[ax]
		row /= c.shape[ax]
		c.idx[ax] = i
		for k := range c.off {
			c.off[k] += i * st[k][ax]
		}
	}
	return c
}

func (c *rowCursor) next() {
	for ax := len(c.shape) - 1; ax >= 0; ax-- {
		c.idx[ax]++
		for k := range c.off {
			c.off[k] += c.st[k][ax]
		}
		if c.idx[ax] < c.shape[ax] {
			return
		}
		for k := range c.off {
			c.off[k] -= c.st[k][ax] * c.shape[ax]
		}
		c.idx[ax] = 0
	}
}

func (be *Backend) Copy(dst *tensor.Tensor, dOff int, dSt []int, src *tensor.Tensor, sOff int, sSt []int, shape []int) error {
	if err := tensor.CheckCopy(dst, dOff, dSt, src, sOff, sSt, shape); err != nil {
		return fmt.Errorf("cpu: %w", err)
	}
	if tensor.Numel(shape) == 0 {
		return nil
	}
	bs, err := rawAll(dst, src)
	if err != nil {
		return err
	}
	db, sb := bs[0], bs[1]
	sh, st := tensor.CollapseAxes(shape, dSt, sSt)
	switch dst.DType().Size() {
	case 1:
		copyStrided(be, tensor.ViewAs[uint8](db), tensor.ViewAs[uint8](sb), dOff, sOff, sh, st)
	case 2:
		copyStrided(be, tensor.ViewAs[uint16](db), tensor.ViewAs[uint16](sb), dOff, sOff, sh, st)
	case 4:
		copyStrided(be, tensor.ViewAs[uint32](db), tensor.ViewAs[uint32](sb), dOff, sOff, sh, st)
	case 8:
		copyStrided(be, tensor.ViewAs[uint64](db), tensor.ViewAs[uint64](sb), dOff, sOff, sh, st)
	default:
		return unsupported("copy", dst.DType())
	}
	return nil
}

func copyStrided[T word](be *Backend, d, s []T, dOff, sOff int, sh []int, st [][]int) {
	r := len(sh)
	n := sh[r-1]
	ds, ss := st[0][r-1], st[1][r-1]
	rows := tensor.Numel(sh[:r-1])
	// Split long rows too, so one big contiguous copy still uses every core.
	pieces := max(1, n/(1<<16))
	plen := (n + pieces - 1) / pieces
	be.parallel(rows*pieces, max(1, (1<<14)/n), func(lo, hi int) {
		c := newCursor(sh, st, []int{dOff, sOff}, lo/pieces)
		row := lo / pieces
		for u := lo; u < hi; u++ {
			if u/pieces != row {
				c.next()
				row++
			}
			p0 := (u % pieces) * plen
			p1 := min(n, p0+plen)
			do, so := c.off[0]+p0*ds, c.off[1]+p0*ss
			m := p1 - p0
			if m <= 0 {
				continue
			}
			switch {
			case ds == 1 && ss == 1:
				copy(d[do:do+m], s[so:so+m])
			case ds == 1 && ss == 0:
				v := s[so]
				dd := d[do : do+m]
				for i := range dd {
					dd[i] = v
				}
			default:
				for i := 0; i < m; i++ {
					d[do+i*ds] = s[so+i*ss]
				}
			}
		}
	})
}

// ---- Unary ----

func (be *Backend) Unary(op tensor.UnaryOp, dst, src *tensor.Tensor, a, b float32) error {
	if dst.DType() != src.DType() || dst.Numel() != src.Numel() {
		return fmt.Errorf("cpu: %s of %v into %v", op, src, dst)
	}
	if !isCompute(dst.DType()) {
		return unsupported(op.String(), dst.DType())
	}
	if op > tensor.OpRecip {
		return fmt.Errorf("cpu: unary %s: %w", op, tensor.ErrUnsupported)
	}
	bs, err := rawAll(dst, src)
	if err != nil {
		return err
	}
	db, sb := bs[0], bs[1]
	be.mapF32(dst.DType(), db, sb, func(o, x []float32) { unaryF32(op, o, x, a, b) })
	return nil
}

// mapF32 runs fn over matching f32 ranges of dst and src (both of dtype
// dt), widening and narrowing half-precision data a chunk at a time.
func (be *Backend) mapF32(dt tensor.DType, db, sb []byte, fn func(o, x []float32)) {
	if dt == tensor.F32 {
		d, s := tensor.ViewAs[float32](db), tensor.ViewAs[float32](sb)
		be.parallel(len(d), 1<<13, func(lo, hi int) { fn(d[lo:hi], s[lo:hi]) })
		return
	}
	d, s := tensor.ViewAs[uint16](db), tensor.ViewAs[uint16](sb)
	be.parallel(len(d), 1<<13, func(lo, hi int) {
		var x, o [chunk]float32
		for i := lo; i < hi; i += chunk {
			m := min(chunk, hi-i)
			if dt == tensor.F16 {
				tensor.WidenF16(x[:m], s[i:i+m])
			} else {
				tensor.WidenBF16(x[:m], s[i:i+m])
			}
			fn(o[:m], x[:m])
			if dt == tensor.F16 {
				tensor.NarrowF16(d[i:i+m], o[:m])
			} else {
				tensor.NarrowBF16(d[i:i+m], o[:m])
			}
		}
	})
}

func sigmoid64(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

// siluf is x·sigmoid(x) = x / (1 + e^−x) for a float32 x.
func siluf(x float32) float32 { return float32(float64(x) / (1 + expf(-x))) }

const sqrt2overPi = 0.7978845608028654 // sqrt(2/π)

// unary64 are the unary ops computed in float64 and rounded once.
var unary64 = map[tensor.UnaryOp]func(float64) float64{
	tensor.OpExp:   math.Exp,
	tensor.OpLog:   math.Log,
	tensor.OpSin:   math.Sin,
	tensor.OpCos:   math.Cos,
	tensor.OpRsqrt: func(f float64) float64 { return 1 / math.Sqrt(f) },
	tensor.OpSqrt:  math.Sqrt,
	tensor.OpAbs:   math.Abs,
	tensor.OpTanh:  math.Tanh,
	tensor.OpGELU:  func(f float64) float64 { return 0.5 * f * (1 + math.Erf(f/math.Sqrt2)) },
	tensor.OpGELUTanh: func(f float64) float64 {
		return 0.5 * f * (1 + math.Tanh(sqrt2overPi*(f+0.044715*f*f*f)))
	},
	tensor.OpQuickGELU: func(f float64) float64 { return f * sigmoid64(1.702*f) },
}

func unaryF32(op tensor.UnaryOp, o, x []float32, a, b float32) {
	x = x[:len(o)]
	if f := unary64[op]; f != nil {
		for i, v := range x {
			o[i] = float32(f(float64(v)))
		}
		return
	}
	switch op {
	case tensor.OpNeg:
		for i, v := range x {
			o[i] = -v
		}
	case tensor.OpSquare:
		for i, v := range x {
			o[i] = v * v
		}
	case tensor.OpSiLU:
		for i, v := range x {
			o[i] = siluf(v)
		}
	case tensor.OpSigmoid:
		for i, v := range x {
			o[i] = float32(1 / (1 + expf(-v)))
		}
	case tensor.OpScale:
		for i, v := range x {
			o[i] = v * a
		}
	case tensor.OpAddScalar:
		for i, v := range x {
			o[i] = v + a
		}
	case tensor.OpClamp:
		for i, v := range x {
			switch {
			case v < a:
				v = a
			case v > b:
				v = b
			}
			o[i] = v // NaN falls through, as in torch
		}
	case tensor.OpPow:
		for i, v := range x {
			o[i] = float32(math.Pow(float64(v), float64(a)))
		}
	case tensor.OpRecip:
		for i, v := range x {
			o[i] = 1 / v
		}
	}
}

// ---- Binary ----

func (be *Backend) Binary(op tensor.BinaryOp, dst, a *tensor.Tensor, aSt []int, b *tensor.Tensor, bSt []int) error {
	dt := dst.DType()
	shape, aSt, bSt, err := tensor.CheckBinary(op, dst, a, aSt, b, bSt)
	if err != nil {
		return fmt.Errorf("cpu: %w", err)
	}
	if shape == nil {
		return nil
	}
	bs, err := rawAll(dst, a, b)
	if err != nil {
		return err
	}
	db, ab, bb := bs[0], bs[1], bs[2]
	sh, st := tensor.CollapseAxes(shape, tensor.ContiguousStrides(shape), aSt, bSt)
	switch dt {
	case tensor.F32, tensor.F16, tensor.BF16:
		be.binaryFloat(op, dt, db, ab, bb, sh, st)
	case tensor.I64:
		binaryInt(be, op, tensor.ViewAs[int64](db), tensor.ViewAs[int64](ab), tensor.ViewAs[int64](bb), sh, st)
	case tensor.I32:
		binaryInt(be, op, tensor.ViewAs[int32](db), tensor.ViewAs[int32](ab), tensor.ViewAs[int32](bb), sh, st)
	default:
		return unsupported(op.String(), dt)
	}
	return nil
}

// rows walks a collapsed 3-operand (dst, a, b) shape in row pieces of at
// most piece elements, in parallel; fn gets each piece's length and the
// three starting offsets plus the inner strides.
func (be *Backend) rows(sh []int, st [][]int, piece int, fn func(n int, off []int)) {
	r := len(sh)
	n := sh[r-1]
	rows := tensor.Numel(sh[:r-1])
	pieces := max(1, (n+piece-1)/piece)
	plen := (n + pieces - 1) / pieces
	be.parallel(rows*pieces, max(1, (1<<14)/n), func(lo, hi int) {
		c := newCursor(sh, st, make([]int, len(st)), lo/pieces)
		row := lo / pieces
		off := make([]int, len(st))
		for u := lo; u < hi; u++ {
			if u/pieces != row {
				c.next()
				row++
			}
			p0 := (u % pieces) * plen
			m := min(n, p0+plen) - p0
			if m <= 0 {
				continue
			}
			for k := range off {
				off[k] = c.off[k] + p0*st[k][r-1]
			}
			fn(m, off)
		}
	})
}

func (be *Backend) binaryFloat(op tensor.BinaryOp, dt tensor.DType, db, ab, bb []byte, sh []int, st [][]int) {
	r := len(sh)
	as, bs := st[1][r-1], st[2][r-1]
	if dt == tensor.F32 {
		d, a, b := tensor.ViewAs[float32](db), tensor.ViewAs[float32](ab), tensor.ViewAs[float32](bb)
		be.rows(sh, st, 1<<16, func(n int, off []int) {
			o := d[off[0] : off[0]+n]
			binF32(op, o, a[off[1]:], as, b[off[2]:], bs)
		})
		return
	}
	d, a, b := tensor.ViewAs[uint16](db), tensor.ViewAs[uint16](ab), tensor.ViewAs[uint16](bb)
	widen := tensor.WidenBF16
	narrow := tensor.NarrowBF16
	if dt == tensor.F16 {
		widen, narrow = tensor.WidenF16, tensor.NarrowF16
	}
	be.rows(sh, st, chunk, func(n int, off []int) {
		var x, y, o [chunk]float32
		gather := func(buf []float32, src []uint16, s int) int {
			switch s {
			case 0:
				widen(buf[:1], src[:1])
			case 1:
				widen(buf[:n], src[:n])
			default:
				for i := 0; i < n; i++ {
					widen(buf[i:i+1], src[i*s:i*s+1])
				}
				return 1
			}
			return s
		}
		xs := gather(x[:], a[off[1]:], as)
		ys := gather(y[:], b[off[2]:], bs)
		binF32(op, o[:n], x[:], xs, y[:], ys)
		narrow(d[off[0]:off[0]+n], o[:n])
	})
}

// binOne is x op y. Max and min of a NaN are NaN (Go's max and min, as
// math.Max and math.Min). The tests' float64 reference is binOne[float64].
func binOne[T float32 | float64](op tensor.BinaryOp, x, y T) T {
	switch op {
	case tensor.OpAdd:
		return x + y
	case tensor.OpSub:
		return x - y
	case tensor.OpMul:
		return x * y
	case tensor.OpDiv:
		return x / y
	case tensor.OpMax:
		return max(x, y)
	default: // OpMin
		return min(x, y)
	}
}

// binF32 computes o[i] = a[i·as] op b[i·bs], with tight loops for the
// common contiguous and broadcast-scalar cases.
func binF32(op tensor.BinaryOp, o, a []float32, as int, b []float32, bs int) {
	n := len(o)
	switch {
	case as == 1 && bs == 1:
		a, b = a[:n], b[:n]
		switch op {
		case tensor.OpAdd:
			for i := range o {
				o[i] = a[i] + b[i]
			}
		case tensor.OpSub:
			for i := range o {
				o[i] = a[i] - b[i]
			}
		case tensor.OpMul:
			for i := range o {
				o[i] = a[i] * b[i]
			}
		case tensor.OpDiv:
			for i := range o {
				o[i] = a[i] / b[i]
			}
		default:
			for i := range o {
				o[i] = binOne(op, a[i], b[i])
			}
		}
	case as == 1 && bs == 0:
		a = a[:n]
		y := b[0]
		switch op {
		case tensor.OpAdd:
			for i := range o {
				o[i] = a[i] + y
			}
		case tensor.OpSub:
			for i := range o {
				o[i] = a[i] - y
			}
		case tensor.OpMul:
			for i := range o {
				o[i] = a[i] * y
			}
		case tensor.OpDiv:
			for i := range o {
				o[i] = a[i] / y
			}
		default:
			for i := range o {
				o[i] = binOne(op, a[i], y)
			}
		}
	case as == 0 && bs == 1:
		b = b[:n]
		x := a[0]
		switch op {
		case tensor.OpAdd:
			for i := range o {
				o[i] = x + b[i]
			}
		case tensor.OpSub:
			for i := range o {
				o[i] = x - b[i]
			}
		case tensor.OpMul:
			for i := range o {
				o[i] = x * b[i]
			}
		default:
			for i := range o {
				o[i] = binOne(op, x, b[i])
			}
		}
	default:
		for i := range o {
			o[i] = binOne(op, a[i*as], b[i*bs])
		}
	}
}

func binaryInt[T int64 | int32](be *Backend, op tensor.BinaryOp, d, a, b []T, sh []int, st [][]int) {
	r := len(sh)
	as, bs := st[1][r-1], st[2][r-1]
	be.rows(sh, st, 1<<16, func(n int, off []int) {
		o := d[off[0] : off[0]+n]
		x, y := a[off[1]:], b[off[2]:]
		for i := range o {
			u, v := x[i*as], y[i*bs]
			var w T
			switch op {
			case tensor.OpAdd:
				w = u + v
			case tensor.OpSub:
				w = u - v
			case tensor.OpMul:
				w = u * v
			case tensor.OpDiv: // truncating; 0 for a zero divisor rather than a panic
				if v != 0 {
					w = u / v
				}
			case tensor.OpMax:
				w = max(u, v)
			case tensor.OpMin:
				w = min(u, v)
			}
			o[i] = w
		}
	})
}
