package weights

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/framepack-go/framepack/tensor"
)

// hostBE is a minimal host-backed backend: storage only, no kernels.
type hostBE struct {
	tensor.Backend // kernels: not used here
	live           atomic.Int64
}

func (b *hostBE) Name() string       { return "testhost" }
func (b *hostBE) HostBacked() bool   { return true }
func (b *hostBE) Sync() error        { return nil }
func (b *hostBE) Free(tensor.Buffer) { b.live.Add(-1) }
func (b *hostBE) Alloc(n int64) (tensor.Buffer, error) {
	b.live.Add(1)
	return tensor.NewHostBuffer(n), nil
}
func (b *hostBE) Upload(dst tensor.Buffer, off int64, src []byte) error {
	copy(dst.(*tensor.HostBuffer).Data()[off:], src)
	return nil
}
func (b *hostBE) Download(dst []byte, src tensor.Buffer, off int64) error {
	copy(dst, src.(*tensor.HostBuffer).Data()[off:])
	return nil
}

// devBE looks like a device backend: its buffers are not host memory, so
// Load must go through Upload.
type devBE struct {
	tensor.Backend
	uploads int
}

type devBuf struct{ b []byte }

func (d *devBuf) Bytes() int64 { return int64(len(d.b)) }

func (b *devBE) Name() string                         { return "testdev" }
func (b *devBE) Sync() error                          { return nil }
func (b *devBE) Free(tensor.Buffer)                   {}
func (b *devBE) Alloc(n int64) (tensor.Buffer, error) { return &devBuf{make([]byte, n)}, nil }
func (b *devBE) Upload(dst tensor.Buffer, off int64, src []byte) error {
	b.uploads++
	copy(dst.(*devBuf).b[off:], src)
	return nil
}
func (b *devBE) Download(dst []byte, src tensor.Buffer, off int64) error {
	copy(dst, src.(*devBuf).b[off:])
	return nil
}

func goldenModel(t *testing.T, name string) string {
	p := filepath.Join("..", "testdata", "golden", "models", name)
	if _, err := os.Stat(p); err != nil {
		t.Skipf("golden models not present: %v", err)
	}
	return p
}

func TestOpenGoldenModels(t *testing.T) {
	for _, m := range []string{"vae", "transformer", "transformer_bf16_sharded", "llama", "clip_eos_id", "siglip"} {
		c, err := Open(goldenModel(t, m))
		if err != nil {
			t.Fatalf("%s: %v", m, err)
		}
		var cfg map[string]any
		if err := c.Config(&cfg); err != nil {
			t.Errorf("%s: config: %v", m, err)
		}
		if len(c.Names()) == 0 {
			t.Errorf("%s: no tensors", m)
		}
		for _, n := range c.Names() {
			dt, shape, err := c.Info(n)
			if err != nil {
				t.Fatalf("%s: %v", m, err)
			}
			h, err := c.Host(n)
			if err != nil {
				t.Fatalf("%s: %v", m, err)
			}
			if h.DType() != dt || !slices.Equal(h.Shape(), shape) {
				t.Fatalf("%s: %s: Host %v, Info %s %v", m, n, h, dt, shape)
			}
		}
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	}
}

// The sharded bf16 transformer is the f32 one rounded to bf16: loading it
// as f32 must give exactly the rounded f32 weights, name by name.
func TestShardedMatchesSingle(t *testing.T) {
	f32, err := Open(goldenModel(t, "transformer"))
	if err != nil {
		t.Fatal(err)
	}
	defer f32.Close()
	bf, err := Open(goldenModel(t, "transformer_bf16_sharded"))
	if err != nil {
		t.Fatal(err)
	}
	defer bf.Close()
	if len(f32.Names()) != len(bf.Names()) {
		t.Fatalf("%d names vs %d", len(f32.Names()), len(bf.Names()))
	}
	be := &hostBE{}
	for _, n := range f32.Names() {
		ref, err := f32.Host(n)
		if err != nil {
			t.Fatal(err)
		}
		got, err := bf.Load(be, n, tensor.F32, ref.Shape()...)
		if err != nil {
			t.Fatal(err)
		}
		// And f32 → bf16 narrowing must give the file's bf16 bits.
		narrow, err := f32.Load(be, n, tensor.BF16)
		if err != nil {
			t.Fatal(err)
		}
		stored, _ := bf.Host(n)
		want := ref.Float32s()
		for i, v := range got.Float32s() {
			if v != tensor.RoundBF16(want[i]) {
				t.Fatalf("%s[%d] = %v, want %v", n, i, v, tensor.RoundBF16(want[i]))
			}
			if narrow.Uint16s()[i] != stored.Uint16s()[i] {
				t.Fatalf("%s[%d]: f32→bf16 %#x, file %#x", n, i, narrow.Uint16s()[i], stored.Uint16s()[i])
			}
		}
		tensor.Release(got)
		tensor.Release(narrow)
	}
	if n := be.live.Load(); n != 0 {
		t.Errorf("%d buffers not released", n)
	}
}

func TestPrefixLookup(t *testing.T) {
	c, err := Open(goldenModel(t, "clip_eos_id"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	name := "text_model.embeddings.token_embedding.weight"
	if !c.Has(name) || !c.Has("embeddings.token_embedding.weight") {
		t.Fatalf("prefix lookup failed; names %v", c.Names()[:3])
	}
	if c.Has("vision_model.embeddings.token_embedding.weight") {
		t.Fatal("a wrong prefix resolved")
	}
}

func TestSaveRoundTripAndConvert(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "x.safetensors")
	vals := []float32{0, 1, -2.5, 1e-8, 65504, 70000, float32(math.Inf(-1)), 3.14159265, 1.0 / 3}
	f16 := tensor.New(tensor.F16, len(vals))
	tensor.NarrowF16(f16.Uint16s(), vals)
	bf16 := tensor.New(tensor.BF16, len(vals))
	tensor.NarrowBF16(bf16.Uint16s(), vals)
	f64 := tensor.New(tensor.F64, len(vals))
	b, _ := tensor.FromBytes(tensor.Bool, []byte{1, 0, 1}, 3)
	in := map[string]*tensor.Tensor{
		"f32":   tensor.FromFloat32(vals, 3, 3),
		"f16":   f16,
		"bf16":  bf16,
		"f64":   f64,
		"ids":   tensor.FromInt64([]int64{-1, 1 << 40}, 2),
		"mask":  b,
		"empty": tensor.New(tensor.F32, 0, 4),
	}
	f64s := make([]float64, len(vals))
	for i, v := range vals {
		f64s[i] = float64(v) * (1 + 1e-9)
		copyF64(f64.HostBytes()[8*i:], f64s[i])
	}
	if err := Save(p, in, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	c, err := OpenFile(p)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := len(c.Names()); got != len(in) {
		t.Fatalf("%d names", got)
	}
	be := &hostBE{}
	dev := &devBE{}
	for _, from := range []string{"f32", "f16", "bf16", "f64"} {
		for _, to := range []tensor.DType{tensor.F32, tensor.F16, tensor.BF16} {
			for _, back := range []tensor.Backend{be, dev} {
				got, err := c.Load(back, from, to)
				if err != nil {
					t.Fatal(err)
				}
				h := tensor.ToHost(got)
				for i, v := range h.ToFloat32() {
					src := float64(vals[i])
					switch from {
					case "f16":
						src = float64(tensor.RoundF16(vals[i]))
					case "bf16":
						src = float64(tensor.RoundBF16(vals[i]))
					case "f64":
						src = f64s[i]
					}
					if want := roundTo(src, to); v != want && !(v != v && want != want) {
						t.Errorf("%s→%s [%d]: %v, want %v", from, to, i, v, want)
					}
				}
			}
		}
	}
	if dev.uploads == 0 {
		t.Error("device loads did not upload")
	}
	ids, err := c.Load(be, "ids", tensor.I64, 2)
	if err != nil || ids.Int64s()[1] != 1<<40 {
		t.Fatalf("ids: %v %v", ids, err)
	}
	if _, err := c.Load(be, "ids", tensor.F32); err == nil {
		t.Error("i64 loaded as f32")
	}
	m, err := c.Host("mask")
	if err != nil || m.DType() != tensor.Bool || m.Uint8s()[2] != 1 {
		t.Fatalf("mask: %v %v", m, err)
	}
	e, err := c.Load(be, "empty", tensor.F16, 0, 4)
	if err != nil || e.Numel() != 0 {
		t.Fatalf("empty: %v %v", e, err)
	}
}

// roundTo rounds v (exactly representable in float64) to dtype to, directly.
func roundTo(v float64, to tensor.DType) float32 {
	switch to {
	case tensor.F32:
		return float32(v)
	case tensor.F16:
		return nearest(v, 10, -14, 65504)
	default:
		return nearest(v, 7, -126, 3.3895313892515355e38)
	}
}

// nearest rounds v to a binary format with mbits mantissa bits, minimum
// normal exponent emin and largest finite value maxv, ties to even, in
// float64 arithmetic (an independent check of the bit tricks).
func nearest(v float64, mbits, emin int, maxv float64) float32 {
	if math.IsNaN(v) || math.IsInf(v, 0) || v == 0 {
		return float32(v)
	}
	_, e := math.Frexp(math.Abs(v)) // |v| = f·2^e, f in [0.5, 1)
	exp := max(e-1, emin)
	ulp := math.Ldexp(1, exp-mbits)
	q := v / ulp
	r := math.RoundToEven(q) * ulp
	// Overflow: past max + half an ulp rounds to infinity.
	if math.Abs(r) > maxv {
		return float32(math.Copysign(math.Inf(1), v))
	}
	return float32(r)
}

func copyF64(b []byte, v float64) {
	u := math.Float64bits(v)
	for i := range 8 {
		b[i] = byte(u >> (8 * i))
	}
}
