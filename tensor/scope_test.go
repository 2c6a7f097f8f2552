package tensor_test

import (
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/framepack-go/framepack/backend/cpu"
	"github.com/framepack-go/framepack/tensor"
)

// counting wraps the CPU backend and tracks live buffers, so tests can see
// exactly what a scope frees and when.
type counting struct {
	*cpu.Backend
	mu   sync.Mutex
	live map[tensor.Buffer]bool
	// double counts frees of a buffer that was not live.
	double int
}

func newCounting() *counting { return &counting{Backend: cpu.New(), live: map[tensor.Buffer]bool{}} }

func (c *counting) Alloc(n int64) (tensor.Buffer, error) {
	b, err := c.Backend.Alloc(n)
	if err == nil {
		c.mu.Lock()
		c.live[b] = true
		c.mu.Unlock()
	}
	return b, err
}

func (c *counting) Free(b tensor.Buffer) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.live[b] {
		c.double++
	}
	delete(c.live, b)
}

func (c *counting) isLive(t *tensor.Tensor) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.live[t.Buffer()]
}

func (c *counting) nLive() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.live)
}

func TestScopeCloseFreesIntermediates(t *testing.T) {
	be := newCounting()
	s := tensor.NewScope(be)
	a := s.Full(tensor.F32, 2, 3, 4)
	b := s.Add(a, a)
	_ = s.Mul(b, a)
	if be.nLive() != 3 {
		t.Fatalf("%d live buffers, want 3", be.nLive())
	}
	if got := s.HeldBytes(); got != 3*12*4 {
		t.Errorf("HeldBytes = %d, want %d", got, 3*12*4)
	}
	s.Close()
	if be.nLive() != 0 || be.double != 0 {
		t.Fatalf("after Close: %d live, %d double frees", be.nLive(), be.double)
	}
	if err := tensor.Catch(func() { s.Zeros(tensor.F32, 1) }); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("alloc in a closed scope: %v", err)
	}
}

func TestScopeKeep(t *testing.T) {
	be := newCounting()
	root := tensor.NewScope(be)
	child := root.Child()
	x := child.Full(tensor.F32, 1, 5)
	y := child.Scale(x, 3)
	child.Keep(y)
	child.Close()
	if be.isLive(x) {
		t.Error("child intermediate survived Close")
	}
	if !be.isLive(y) {
		t.Fatal("kept tensor freed by the child's Close")
	}
	if got := y.Float32s(); got[0] != 3 || got[4] != 3 {
		t.Errorf("kept values %v", got)
	}
	// The parent owns it now and frees it when it closes.
	if root.HeldBytes() != 20 {
		t.Errorf("parent holds %d bytes, want 20", root.HeldBytes())
	}
	// Keeping out of the root hands it to the caller.
	z := root.AddScalar(y, 1)
	root.Keep(z)
	root.Close()
	if be.isLive(y) || !be.isLive(z) {
		t.Fatalf("root Close: y live %v, z live %v", be.isLive(y), be.isLive(z))
	}
	tensor.Release(z)
	tensor.Release(z) // a second Release is harmless
	if be.nLive() != 0 || be.double != 0 {
		t.Fatalf("after Release: %d live, %d double frees", be.nLive(), be.double)
	}
	// Keep of a tensor the scope does not own (nil, host) is a no-op.
	s := tensor.NewScope(be)
	s.Keep(nil, tensor.New(tensor.F32, 2))
	s.Close()
}

func TestScopeFree(t *testing.T) {
	be := newCounting()
	s := tensor.NewScope(be)
	defer s.Close()
	a := s.Full(tensor.F32, 1, 8)
	b := s.Full(tensor.F32, 2, 8)
	s.Free(a, nil)
	if be.isLive(a) || !be.isLive(b) {
		t.Fatal("Free released the wrong buffer")
	}
	err := tensor.Catch(func() { s.Add(a, b) })
	if err == nil || !strings.Contains(err.Error(), "freed") {
		t.Errorf("use after Free: %v", err)
	}
	s.Free(a) // freeing twice does not free twice
	if be.double != 0 {
		t.Error("double free")
	}
	// Free of a tensor another scope owns leaves it alone.
	other := tensor.NewScope(be)
	c := other.Full(tensor.F32, 3, 2)
	s.Free(c)
	if !be.isLive(c) {
		t.Error("Free released another scope's tensor")
	}
	other.Close()
}

func TestCatch(t *testing.T) {
	s := tensor.NewScope(cpu.New())
	defer s.Close()
	a := s.Zeros(tensor.F32, 2, 3)
	b := s.Zeros(tensor.F32, 4, 5)
	err := tensor.Catch(func() { s.MatMul(a, b, false, false) })
	var oe *tensor.OpError
	if !errors.As(err, &oe) || oe.Op != "matmul" {
		t.Fatalf("Catch gave %v", err)
	}
	if err := tensor.Catch(func() {}); err != nil {
		t.Errorf("Catch of nothing: %v", err)
	}
	err = tensor.Catch(func() { tensor.Fail("decode", "bad latent %d", 7) })
	if err == nil || err.Error() != "decode: bad latent 7" {
		t.Errorf("Fail: %v", err)
	}
	// A panic that is not an op error is a bug and propagates.
	defer func() {
		if r := recover(); r != "boom" {
			t.Errorf("recovered %v, want the original panic", r)
		}
	}()
	_ = tensor.Catch(func() { panic("boom") })
	t.Error("non-op panic was swallowed")
}

// TestShapeErrors: every malformed call is one clear error naming its op.
func TestShapeErrors(t *testing.T) {
	s := tensor.NewScope(cpu.New())
	defer s.Close()
	f := func(shape ...int) *tensor.Tensor { return s.Zeros(tensor.F32, shape...) }
	cases := []struct {
		op string
		fn func()
	}{
		{"add", func() { s.Add(f(2, 3), f(3, 2)) }},
		{"add", func() { s.Add(f(2, 3), s.Zeros(tensor.BF16, 2, 3)) }},
		{"matmul", func() { s.MatMul(f(2, 3), f(4, 5), false, false) }},
		{"matmul", func() { s.MatMul(f(2, 2, 3), f(3, 3, 4), false, false) }},
		{"matmul", func() { s.MatMul(f(3), f(3, 4), false, false) }},
		{"linear", func() { s.Linear(f(2, 3), f(4, 5), nil) }},
		{"linear", func() { s.Linear(f(2, 3), f(4, 3), f(5)) }},
		{"conv3d", func() { s.Conv3d(f(1, 2, 3, 3, 3), f(4, 3, 1, 1, 1), nil, [3]int{1, 1, 1}, [3]int{}) }},
		{"conv3d", func() { s.Conv3d(f(1, 2, 1, 1, 1), f(4, 2, 3, 3, 3), nil, [3]int{1, 1, 1}, [3]int{}) }},
		{"conv2d", func() { s.Conv2d(f(1, 2, 3), f(1, 2, 1, 1), nil, [2]int{1, 1}, [2]int{}) }},
		{"group_norm", func() { s.GroupNorm(f(1, 6, 4), nil, nil, 4, 1e-6) }},
		{"layer_norm", func() { s.LayerNorm(f(2, 4), f(3), nil, 1e-6) }},
		{"rms_norm", func() { s.RMSNorm(f(2, 4), f(5), 1e-6) }},
		{"attention", func() { s.Attention(f(1, 2, 4, 8), f(1, 3, 3, 8), f(1, 3, 3, 8), tensor.AttnParams{}) }},
		{"attention", func() { s.Attention(f(1, 2, 4, 8), f(1, 3, 2, 8), f(1, 3, 2, 8), tensor.AttnParams{KeyMask: f(1, 2)}) }},
		{"attention", func() { s.Attention(f(1, 2, 4, 8), f(1, 3, 2, 8), f(1, 3, 2, 8), tensor.AttnParams{Mask: f(1, 3, 2)}) }},
		{"rope", func() { s.RoPE(f(1, 2, 3, 5), f(2, 5), f(2, 5)) }},
		{"rope", func() { s.RoPE(f(1, 2, 3, 4), f(3, 4), f(2, 4)) }},
		{"slice", func() { s.Slice(f(4, 5), 1, 3, 7) }},
		{"axis", func() { s.Slice(f(4, 5), 2, 0, 1) }},
		{"permute", func() { s.Permute(f(2, 3), 0, 0) }},
		{"permute", func() { s.Permute(f(2, 3), 0) }},
		{"concat", func() { s.Concat(0, f(2, 3), f(2, 4)) }},
		{"concat", func() { s.Concat(0) }},
		{"split", func() { s.Split(f(5), 0, 2, 2) }},
		{"chunk", func() { s.Chunk(f(5), 2, 0) }},
		{"expand", func() { s.Expand(f(2, 3), 4, 3) }},
		{"reshape", func() { f(2, 3).Reshape(4, -1) }},
		{"reshape", func() { f(2, 3).Reshape(-1, -1) }},
		{"pad", func() { s.Pad(f(2, 3), []int{1}, []int{1, 1}, tensor.PadZeros) }},
		{"pad", func() { s.Pad(f(2, 3), []int{-1}, []int{1}, tensor.PadZeros) }},
		{"upsample", func() { s.UpsampleNearest(f(2, 3), [3]int{1, 2, 2}) }},
		{"avg_pool3d", func() { s.AvgPool3d(f(1, 2, 3, 4), [3]int{2, 2, 2}) }},
		{"embedding", func() { s.Embedding(f(5, 3), f(2)) }},
		{"embedding", func() { s.Embedding(s.To(tensor.FromInt64([]int64{9}, 1)), s.To(tensor.FromInt64([]int64{1}, 1))) }},
		{"exp", func() { s.Exp(s.To(tensor.FromInt64([]int64{1}, 1))) }},
		{"reduce", func() { s.Sum(f(3, 0)) }},
		{"alloc", func() { s.Zeros(tensor.F32, 2, -1) }},
	}
	for i, c := range cases {
		err := tensor.Catch(c.fn)
		var oe *tensor.OpError
		if !errors.As(err, &oe) {
			t.Errorf("case %d (%s): got %v, want an op error", i, c.op, err)
			continue
		}
		if oe.Op != c.op {
			t.Errorf("case %d: error %q names op %q, want %q", i, err, oe.Op, c.op)
		}
	}
}

// TestBackendErrorsBecomeOpErrors: a kernel's error (here an embedding id
// outside the table) comes out of Catch naming the op and wrapping the cause.
func TestBackendErrorsBecomeOpErrors(t *testing.T) {
	s := tensor.NewScope(cpu.New())
	defer s.Close()
	err := tensor.Catch(func() {
		s.Embedding(s.Zeros(tensor.F32, 3, 2), s.To(tensor.FromInt64([]int64{5}, 1)))
	})
	if err == nil || !strings.HasPrefix(err.Error(), "embedding: ") || !strings.Contains(err.Error(), "outside") {
		t.Errorf("got %v", err)
	}
}

func TestHostTensorsNeedNoCopy(t *testing.T) {
	be := newCounting()
	s := tensor.NewScope(be)
	defer s.Close()
	data := []float32{1, 2, 3, 4}
	h := tensor.FromFloat32(data, 2, 2)
	d := s.To(h)
	if be.nLive() != 0 {
		t.Error("To copied a host tensor onto a host-backed backend")
	}
	data[0] = 9
	if d.Float32s()[0] != 9 {
		t.Error("To did not share storage")
	}
	// Host tensors are accepted by ops directly, and results read back
	// without a copy.
	y := s.Add(h, h)
	if back := tensor.ToHost(y); &back.Float32s()[0] != &y.Float32s()[0] {
		t.Error("ToHost copied a host tensor")
	}
	if got := tensor.Float32s(y); got[0] != 18 || got[3] != 8 {
		t.Errorf("values %v", got)
	}
	// Same-dtype Cast is the tensor itself; Clone is a copy.
	if s.Cast(y, tensor.F32) != y {
		t.Error("Cast to the same dtype copied")
	}
	c := s.Clone(y)
	c.Float32s()[0] = -1
	if y.Float32s()[0] != 18 {
		t.Error("Clone shares storage")
	}
}

func TestReshapeAndViews(t *testing.T) {
	x := tensor.New(tensor.F32, 2, 3, 4)
	if got := x.Reshape(6, -1).Shape(); got[0] != 6 || got[1] != 4 {
		t.Errorf("reshape -1: %v", got)
	}
	if x.Dim(-1) != 4 || x.Rank() != 3 || x.Numel() != 24 || x.Bytes() != 96 {
		t.Error("shape accessors")
	}
	y := x.Reshape(24)
	y.Float32s()[5] = 7
	if x.Float32s()[5] != 7 {
		t.Error("Reshape does not share storage")
	}
	if _, err := tensor.FromBytes(tensor.BF16, make([]byte, 5), 3); err == nil {
		t.Error("FromBytes accepted 5 bytes for 3 bf16 values")
	}
	if _, err := tensor.ParseDType("float8"); err == nil {
		t.Error("ParseDType accepted float8")
	}
	for _, n := range []string{"f32", "bfloat16", "fp16"} {
		if _, err := tensor.ParseDType(n); err != nil {
			t.Error(err)
		}
	}
}
