// Package tensor is framepack's tensor layer: a Tensor is a shape, a dtype and
// contiguous storage owned by a Backend (host memory for the CPU backend,
// device memory for the GPU backend). Ops are methods of a Scope, which checks
// shapes, allocates results on its backend, runs the backend's kernel, and
// frees every intermediate it made when it closes.
package tensor

import (
	"fmt"
	"slices"
	"strings"
)

// Buffer is storage owned by a backend. The CPU backend's buffers are
// *HostBuffer; device backends have their own.
type Buffer interface {
	// Bytes is the size of the storage in bytes.
	Bytes() int64
}

// HostBuffer is storage in Go memory, 8-byte aligned.
type HostBuffer struct {
	words []uint64 // owned, aligned storage
	raw   []byte   // or wrapped memory
	n     int64
}

// NewHostBuffer allocates n zeroed bytes.
func NewHostBuffer(n int64) *HostBuffer {
	return &HostBuffer{words: make([]uint64, (n+7)/8), n: n}
}

// HostBufferOf wraps existing memory without copying. The slice must stay
// alive and unmoved while the buffer is used (Go slices or mmapped files).
func HostBufferOf(b []byte) *HostBuffer {
	if len(b) == 0 {
		return &HostBuffer{}
	}
	hb := &HostBuffer{n: int64(len(b))}
	hb.raw = b
	return hb
}

func (h *HostBuffer) Bytes() int64 { return h.n }

// Data is the buffer's memory as bytes.
func (h *HostBuffer) Data() []byte {
	if h.raw != nil {
		return h.raw
	}
	return BytesOf(h.words)[:h.n]
}

// Tensor is an n-dimensional array with contiguous row-major storage.
type Tensor struct {
	shape []int
	dtype DType
	buf   Buffer
	be    Backend // nil for a plain host tensor
	freed bool
}

// New allocates a zeroed host tensor.
func New(dt DType, shape ...int) *Tensor {
	n := checkedNumel(shape)
	return &Tensor{shape: cloneInts(shape), dtype: dt, buf: NewHostBuffer(int64(n * dt.Size()))}
}

// Wrap makes a tensor over a backend's buffer. The buffer must hold at least
// numel(shape) elements of dt.
func Wrap(be Backend, buf Buffer, dt DType, shape ...int) *Tensor {
	return &Tensor{shape: cloneInts(shape), dtype: dt, buf: buf, be: be}
}

// FromFloat32 wraps data as a host f32 tensor without copying.
func FromFloat32(data []float32, shape ...int) *Tensor {
	if n := checkedNumel(shape); n != len(data) {
		panic(fmt.Sprintf("tensor.FromFloat32: %d values for shape %v", len(data), shape))
	}
	return &Tensor{shape: cloneInts(shape), dtype: F32, buf: HostBufferOf(BytesOf(data))}
}

// FromInt64 wraps data as a host i64 tensor without copying.
func FromInt64(data []int64, shape ...int) *Tensor {
	if n := checkedNumel(shape); n != len(data) {
		panic(fmt.Sprintf("tensor.FromInt64: %d values for shape %v", len(data), shape))
	}
	return &Tensor{shape: cloneInts(shape), dtype: I64, buf: HostBufferOf(BytesOf(data))}
}

// FromBytes wraps raw little-endian element bytes as a host tensor.
func FromBytes(dt DType, data []byte, shape ...int) (*Tensor, error) {
	n := Numel(shape)
	if n < 0 || int64(n)*int64(dt.Size()) != int64(len(data)) {
		return nil, fmt.Errorf("%d bytes do not hold %v of %s", len(data), shape, dt)
	}
	return &Tensor{shape: cloneInts(shape), dtype: dt, buf: HostBufferOf(data)}, nil
}

func (t *Tensor) Shape() []int     { return cloneInts(t.shape) }
func (t *Tensor) Dim(i int) int    { return t.shape[axis(i, len(t.shape))] }
func (t *Tensor) Rank() int        { return len(t.shape) }
func (t *Tensor) DType() DType     { return t.dtype }
func (t *Tensor) Numel() int       { return Numel(t.shape) }
func (t *Tensor) Bytes() int64     { return int64(t.Numel()) * int64(t.dtype.Size()) }
func (t *Tensor) Buffer() Buffer   { return t.buf }
func (t *Tensor) Backend() Backend { return t.be }

// OnHost reports whether the storage is Go memory.
func (t *Tensor) OnHost() bool { _, ok := t.buf.(*HostBuffer); return ok }

// HostBytes is the storage of a host tensor as bytes (no copy). It panics for
// device tensors; use Scope.ToHost first.
func (t *Tensor) HostBytes() []byte {
	hb, ok := t.buf.(*HostBuffer)
	if !ok {
		panic("tensor: HostBytes of a device tensor")
	}
	return hb.Data()[:t.Bytes()]
}

// Float32s is the storage of a host f32 tensor (no copy).
func (t *Tensor) Float32s() []float32 { return hostView[float32](t, "Float32s", F32) }

// Uint16s is the storage of a host f16 or bf16 tensor (no copy).
func (t *Tensor) Uint16s() []uint16 { return hostView[uint16](t, "Uint16s", F16, BF16) }

// Int64s is the storage of a host i64 tensor (no copy).
func (t *Tensor) Int64s() []int64 { return hostView[int64](t, "Int64s", I64) }

// Int32s is the storage of a host i32 tensor (no copy).
func (t *Tensor) Int32s() []int32 { return hostView[int32](t, "Int32s", I32) }

// Uint8s is the storage of a host u8 or bool tensor (no copy).
func (t *Tensor) Uint8s() []uint8 { return hostView[uint8](t, "Uint8s", U8, Bool) }

// float32sOf is vs converted to float32.
func float32sOf[T Elem](vs []T) []float32 {
	out := make([]float32, len(vs))
	for i, v := range vs {
		out[i] = float32(v)
	}
	return out
}

// hostView is the storage of a host tensor of one of dts as Ts; it panics,
// naming the accessor, for any other dtype.
func hostView[T Elem](t *Tensor, accessor string, dts ...DType) []T {
	if !slices.Contains(dts, t.dtype) {
		panic(fmt.Sprintf("tensor: %s of a %s tensor", accessor, t.dtype))
	}
	return ViewAs[T](t.HostBytes())
}

// ToFloat32 returns a host tensor's values widened to float32 (a copy for
// f16/bf16/ints; the storage itself for f32).
func (t *Tensor) ToFloat32() []float32 {
	switch t.dtype {
	case F32:
		return t.Float32s()
	case F16:
		out := make([]float32, t.Numel())
		WidenF16(out, t.Uint16s())
		return out
	case BF16:
		out := make([]float32, t.Numel())
		WidenBF16(out, t.Uint16s())
		return out
	case I64:
		return float32sOf(t.Int64s())
	case I32:
		return float32sOf(t.Int32s())
	case U8, Bool:
		return float32sOf(t.Uint8s())
	case F8E4M3:
		out := make([]float32, t.Numel())
		WidenF8E4M3(out, t.HostBytes())
		return out
	}
	panic(fmt.Sprintf("tensor: ToFloat32 of a %s tensor", t.dtype))
}

// Reshape returns a tensor sharing t's storage with a new shape of the same
// element count. One dimension may be -1.
func (t *Tensor) Reshape(shape ...int) *Tensor {
	s, err := inferShape(shape, t.Numel())
	if err != nil {
		panic(&OpError{Op: "reshape", Err: fmt.Errorf("%v to %v: %w", t.shape, shape, err)})
	}
	return &Tensor{shape: s, dtype: t.dtype, buf: t.buf, be: t.be}
}

func (t *Tensor) String() string {
	where := "host"
	if t.be != nil {
		where = t.be.Name()
	}
	return fmt.Sprintf("Tensor(%s %v on %s)", t.dtype, t.shape, where)
}

// Numel is the number of elements of a shape.
func Numel(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

func checkedNumel(shape []int) int {
	n := 1
	for _, d := range shape {
		if d < 0 {
			panic(fmt.Sprintf("tensor: negative dimension in %v", shape))
		}
		n *= d
	}
	return n
}

func inferShape(shape []int, numel int) ([]int, error) {
	s := cloneInts(shape)
	neg := -1
	known := 1
	for i, d := range s {
		switch {
		case d == -1 && neg < 0:
			neg = i
		case d < 0:
			return nil, fmt.Errorf("bad dimension %d", d)
		default:
			known *= d
		}
	}
	if neg >= 0 {
		if known == 0 || numel%known != 0 {
			return nil, fmt.Errorf("cannot infer -1 for %d elements", numel)
		}
		s[neg] = numel / known
	} else if known != numel {
		return nil, fmt.Errorf("%d elements do not fit", numel)
	}
	return s, nil
}

func cloneInts(s []int) []int { return append([]int(nil), s...) }

func axis(i, rank int) int {
	if i < 0 {
		i += rank
	}
	if i < 0 || i >= rank {
		panic(&OpError{Op: "axis", Err: fmt.Errorf("axis %d out of range for rank %d", i, rank)})
	}
	return i
}

// ContiguousStrides are the row-major strides (in elements) of a shape.
func ContiguousStrides(shape []int) []int {
	st := make([]int, len(shape))
	s := 1
	for i := len(shape) - 1; i >= 0; i-- {
		st[i] = s
		s *= shape[i]
	}
	return st
}

// PermutedStrides are the strides that read a contiguous tensor of shape
// with its axes reordered by perm (axis i of the view is axis perm[i]), and
// the view's shape; perm must be a permutation of the axes.
func PermutedStrides(shape, perm []int) (st, permuted []int) {
	src := ContiguousStrides(shape)
	st, permuted = make([]int, len(perm)), make([]int, len(perm))
	for i, p := range perm {
		st[i], permuted[i] = src[p], shape[p]
	}
	return st, permuted
}

func shapeString(s []int) string {
	parts := make([]string, len(s))
	for i, d := range s {
		parts[i] = fmt.Sprint(d)
	}
	return "(" + strings.Join(parts, ", ") + ")"
}
