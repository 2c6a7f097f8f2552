package weights

import (
	"math"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"

	"github.com/framepack-go/framepack/tensor"
)

// Every f16 and bf16 value, converted to the other 16-bit format, must be
// its direct round-to-nearest-even.
func TestConvert16All(t *testing.T) {
	src := make([]uint16, 1<<16)
	for i := range src {
		src[i] = uint16(i)
	}
	srcB := tensor.BytesOf(src)
	dst := make([]uint16, len(src))
	dstB := tensor.BytesOf(dst)
	for _, c := range []struct{ from, to tensor.DType }{{tensor.F16, tensor.BF16}, {tensor.BF16, tensor.F16}} {
		convert(dstB, c.to, srcB, c.from)
		for i, h := range src {
			var v float64
			if c.from == tensor.F16 {
				v = float64(tensor.F32FromF16(h))
			} else {
				v = float64(tensor.F32FromBF16(h))
			}
			var got float32
			if c.to == tensor.F16 {
				got = tensor.F32FromF16(dst[i])
			} else {
				got = tensor.F32FromBF16(dst[i])
			}
			want := roundTo(v, c.to)
			if got != want && !(math.IsNaN(v) && got != got) {
				t.Fatalf("%s %#04x (%v) → %s: %v, want %v", c.from, h, v, c.to, got, want)
			}
		}
	}
}

// f64 narrowing rounds once: values just above a 16-bit tie that round to
// the tie in f32 must still round up.
func TestConvertF64NoDoubleRounding(t *testing.T) {
	vals := []float64{
		1 + 0x1p-8 + 0x1p-40,  // bf16: above the tie between 1 and 1+2⁻⁷
		1 + 0x1p-11 + 0x1p-40, // f16: above the tie between 1 and 1+2⁻¹⁰
		-(1 + 0x1p-8 + 0x1p-40),
		1 + 0x1p-8, // an exact tie: to even
		0x1p-30, 1e-300, -1e300, 65519.99, 65520, math.MaxFloat32 * 1.0000001,
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		vals = append(vals, r.NormFloat64()*math.Pow(2, float64(r.IntN(60)-30)))
	}
	src := make([]float64, len(vals))
	copy(src, vals)
	srcB := tensor.BytesOf(src)
	for _, to := range []tensor.DType{tensor.F16, tensor.BF16, tensor.F32} {
		dst := tensor.New(to, len(vals))
		convert(dst.HostBytes(), to, srcB, tensor.F64)
		for i, got := range dst.ToFloat32() {
			if want := roundTo(vals[i], to); got != want {
				t.Fatalf("%v → %s: %v, want %v", vals[i], to, got, want)
			}
		}
	}
}

// Large tensors convert in parallel chunks; the result must not depend on
// the split.
func TestConvertParallel(t *testing.T) {
	n := parallelMin*3 + 77
	src := make([]float32, n)
	r := rand.New(rand.NewPCG(3, 4))
	for i := range src {
		src[i] = float32(r.NormFloat64())
	}
	srcB := tensor.BytesOf(src)
	got := tensor.New(tensor.BF16, n)
	convert(got.HostBytes(), tensor.BF16, srcB, tensor.F32)
	for i, h := range got.Uint16s() {
		if h != tensor.BF16FromF32(src[i]) {
			t.Fatalf("[%d]: %#x, want %#x", i, h, tensor.BF16FromF32(src[i]))
		}
	}
}

// Host maps aligned tensors in place; Close unmaps.
func TestHostZeroCopy(t *testing.T) {
	c, err := Open(goldenModel(t, "vae"))
	if err != nil {
		t.Fatal(err)
	}
	name := c.Names()[0]
	h, err := c.Host(name)
	if err != nil {
		t.Fatal(err)
	}
	sh := c.shards[0]
	e := sh.hdr.entries[name]
	if &h.HostBytes()[0] != &sh.data[e.begin] {
		t.Error("Host copied an aligned tensor")
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if sh.data != nil {
		t.Error("Close left the file mapped")
	}
}

// Loads from many goroutines, with shards mapped on first use, agree with
// loads from one.
func TestConcurrentLoads(t *testing.T) {
	c, err := Open(goldenModel(t, "transformer_bf16_sharded"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	names := c.Names()
	be := &hostBE{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	got := make([][]float32, len(names))
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < len(names); i += 4 {
				x, err := c.Load(be, names[i], tensor.F32)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				got[i] = x.Float32s()
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	ref, err := Open(filepath.Join(goldenModel(t, "transformer")))
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	for i, n := range names {
		h, _ := ref.Host(n)
		for j, v := range h.Float32s() {
			if got[i][j] != tensor.RoundBF16(v) {
				t.Fatalf("%s[%d]", n, j)
			}
		}
	}
}

func BenchmarkLoadBF16ToF32(b *testing.B) {
	p := filepath.Join(b.TempDir(), "big.safetensors")
	const n = 16 << 20 // 32 MiB of bf16
	if err := Save(p, map[string]*tensor.Tensor{"w": tensor.New(tensor.BF16, n)}, nil); err != nil {
		b.Fatal(err)
	}
	c, err := OpenFile(p)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	be := &hostBE{}
	b.SetBytes(n * 2)
	for b.Loop() {
		t, err := c.Load(be, "w", tensor.F32)
		if err != nil {
			b.Fatal(err)
		}
		tensor.Release(t)
	}
}
