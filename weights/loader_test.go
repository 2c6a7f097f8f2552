package weights

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/framepack-go/framepack/backend/cpu"
	"github.com/framepack-go/framepack/internal/testutil/testdevice"
	"github.com/framepack-go/framepack/memory"
	"github.com/framepack-go/framepack/tensor"
)

// stored is one tensor of the test checkpoint.
type stored struct {
	name  string
	dt    tensor.DType
	shape []int
	shard int
}

// loadTensors are spread over three shards, in every float dtype, with
// sizes that are and are not multiples of a piece.
var loadTensors = []stored{
	{"a.f32", tensor.F32, []int{300, 129}, 0},
	{"b.bf16", tensor.BF16, []int{1000}, 1},
	{"q.f16", tensor.F16, []int{64, 40}, 0},
	{"k.bf16", tensor.BF16, []int{32, 40}, 1},
	{"v.f32", tensor.F32, []int{96, 40}, 2},
	{"c.bias", tensor.F32, []int{77}, 2},
	{"d.f64", tensor.F64, []int{513}, 1},
	{"e.same", tensor.BF16, []int{4096, 33}, 2},
	{"f.noshape", tensor.F16, []int{5, 7}, 0},
	{"g.big", tensor.F32, []int{1 << 16}, 0},
}

// writeSharded writes loadTensors as a sharded checkpoint (an index and
// three files) in a new folder, with seeded values.
// openCheckpoint opens dir for the test, closed when it ends.
func openCheckpoint(t *testing.T, dir string) *Checkpoint {
	t.Helper()
	ck, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ck.Close() })
	return ck
}

func writeSharded(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(1, 2))
	shards := make([]map[string]*tensor.Tensor, 3)
	weightMap := map[string]string{}
	for _, s := range loadTensors {
		n := tensor.Numel(s.shape)
		v := make([]float64, n)
		for i := range v {
			v[i] = rng.NormFloat64() * math.Pow(2, float64(rng.IntN(20)-10))
		}
		h := tensor.New(s.dt, s.shape...)
		b := h.HostBytes()
		for i, x := range v {
			switch s.dt {
			case tensor.F64:
				tensor.ViewAs[float64](b)[i] = x
			case tensor.F32:
				tensor.ViewAs[float32](b)[i] = float32(x)
			case tensor.F16:
				tensor.ViewAs[uint16](b)[i] = tensor.F16FromF32(float32(x))
			case tensor.BF16:
				tensor.ViewAs[uint16](b)[i] = tensor.BF16FromF32(float32(x))
			}
		}
		if shards[s.shard] == nil {
			shards[s.shard] = map[string]*tensor.Tensor{}
		}
		shards[s.shard][s.name] = h
		weightMap[s.name] = fmt.Sprintf("model-%05d-of-00003.safetensors", s.shard+1)
	}
	for i, ts := range shards {
		if err := Save(filepath.Join(dir, fmt.Sprintf("model-%05d-of-00003.safetensors", i+1)), ts, nil); err != nil {
			t.Fatal(err)
		}
	}
	idx, _ := json.Marshal(map[string]any{"weight_map": weightMap})
	if err := os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), idx, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// construct asks for the test checkpoint's weights as a model would: in
// the builder's dtype, kept in f32 rounded through it, fused from parts in
// three files and dtypes, optional ones present and absent, one in another
// dtype, one without a shape.
func construct(b *Builder) {
	b.Get("a.f32", 300, 129)
	b.F32().Get("b.bf16", 1000)
	b.Cat([]string{"q.f16", "k.bf16", "v.f32"}, []int{64, 32, 96}, 40)
	b.Opt("missing.bias", 10)
	b.Opt("c.bias", 77)
	b.In(tensor.F16).Get("d.f64", 513)
	b.F32().Get("d.f64", 513)
	b.Get("e.same", 4096, 33)
	b.Get("f.noshape")
	b.Get("g.big", 1<<16)
}

// bf16Plan is the weights build asks for, planned in bf16.
func bf16Plan(build func(*Builder)) []Weight {
	plan := NewPlan().In(tensor.BF16)
	build(plan)
	return plan.Weights()
}

// hostBytes is t's storage as host bytes.
func hostBytes(t *testing.T, x *tensor.Tensor) []byte {
	t.Helper()
	out := make([]byte, x.Bytes())
	if err := x.Backend().Download(out, x.Buffer(), 0); err != nil {
		t.Fatal(err)
	}
	return out
}

// loadBackends are the CPU, the fake device with copies in line and with
// copies that lag, and the test device (FRAMEPACK_TEST_DEVICE=gpu: the GPU).
func loadBackends(t *testing.T) map[string]func() tensor.Backend {
	bes := map[string]func() tensor.Backend{
		"cpu":  func() tensor.Backend { return cpu.New() },
		"fake": func() tensor.Backend { return testdevice.NewFake() },
		// Copies that finish long after they are queued: a staging buffer
		// refilled too early would upload changed bytes.
		"fake-async": func() tensor.Backend { f := testdevice.NewFake(); f.CopyDelay = 300 * time.Microsecond; return f },
	}
	if n := testdevice.Name(); n != "cpu" && n != "fake" {
		be := testdevice.Backend(t)
		bes[n] = func() tensor.Backend { return be }
	}
	return bes
}

// budgeted wraps be in a test budget of limit bytes, so the test can see
// what a load leaves allocated.
func budgeted(be tensor.Backend, limit int64) *memory.Backend {
	return memory.Budgeted(be, memory.Budget{Device: "test", Cap: limit, Total: limit})
}

// releaseAll releases what b loaded and fails t if mb still holds any of it.
func releaseAll(t *testing.T, b *Builder, mb *memory.Backend) {
	t.Helper()
	b.Release()
	if n := mb.Stats().InUse; n != 0 {
		t.Errorf("%d bytes left allocated", n)
	}
}

// waitGoroutines fails when more goroutines run than before, after a
// grace period for those that are ending.
func waitGoroutines(t *testing.T, before int) {
	t.Helper()
	for range 200 {
		if runtime.NumGoroutine() <= before {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Errorf("%d goroutines running, %d before the load", runtime.NumGoroutine(), before)
}

// The parallel load gives the sequential load's bytes, weight for weight,
// on the CPU and on a device (copies in line and copies that lag), with
// pieces far smaller than the tensors and a ring of two staging buffers.
func TestBuildMatchesSequential(t *testing.T) {
	dir := writeSharded(t)
	for name, newBE := range loadBackends(t) {
		for _, dt := range []tensor.DType{tensor.BF16, tensor.F32, tensor.F16} {
			t.Run(fmt.Sprintf("%s/%s", name, dt), func(t *testing.T) {
				before := runtime.NumGoroutine()
				ck := openCheckpoint(t, dir)
				be := newBE()
				seq := NewBuilder(&CheckpointSource{Ck: ck, Be: be}, dt)
				construct(seq)
				if err := seq.Err(); err != nil {
					t.Fatal(err)
				}
				defer seq.Release()
				par := Build(&CheckpointSource{Ck: ck, Be: be}, be, dt, LoadOptions{Readers: 4, Chunk: 4096, Staging: 2}, construct)
				if err := par.Err(); err != nil {
					t.Fatal(err)
				}
				defer par.Release()
				a, b := seq.Held(), par.Held()
				if len(a) != len(b) {
					t.Fatalf("%d weights sequentially, %d in parallel", len(a), len(b))
				}
				for i := range a {
					if a[i].DType() != b[i].DType() || !slices.Equal(a[i].Shape(), b[i].Shape()) {
						t.Fatalf("weight %d: %v vs %v", i, a[i], b[i])
					}
					if !slices.Equal(hostBytes(t, a[i]), hostBytes(t, b[i])) {
						t.Errorf("weight %d (%v): bytes differ", i, b[i])
					}
				}
				waitGoroutines(t, before)
			})
		}
	}
}

// arenaOf lays ws out as a block's arena does (each weight 256-byte
// aligned) and fills a host copy of it through src (Fill: the sequential
// path, the reference).
func arenaOf(t *testing.T, src *CheckpointSource, ws []Weight) (offs []int64, size int64, want []byte) {
	t.Helper()
	offs = make([]int64, len(ws))
	for i, w := range ws {
		offs[i] = size
		size += (w.Bytes() + 255) &^ 255
	}
	want = make([]byte, size)
	for i, w := range ws {
		if err := src.Fill(w, want[offs[i]:offs[i]+w.Bytes()]); err != nil {
			t.Fatal(err)
		}
	}
	return offs, size, want
}

// Loader.CopyToHost and Copy into views of one buffer (a block's arena)
// give Fill's bytes.
func TestLoaderCopies(t *testing.T) {
	dir := writeSharded(t)
	ck := openCheckpoint(t, dir)
	ws := bf16Plan(construct)
	var ranged []Weight
	src := &CheckpointSource{Ck: ck, Be: cpu.New()}
	for _, w := range ws {
		if _, ok := src.Ranged(w); ok || w.FP8 == NotFP8 && len(w.Shape) > 0 && !w.Optional {
			ranged = append(ranged, w)
		}
	}
	offs, size, want := arenaOf(t, src, ranged)
	for name, newBE := range loadBackends(t) {
		t.Run(name, func(t *testing.T) {
			be := newBE()
			ld := NewLoader(&CheckpointSource{Ck: ck, Be: be}, be, LoadOptions{Readers: 3, Chunk: 8192, Staging: 3})
			host := make([]byte, size)
			dev, err := tensor.Alloc(be, tensor.U8, int(size))
			if err != nil {
				t.Fatal(err)
			}
			defer tensor.Release(dev)
			var cps []*Copy
			for i, w := range ranged {
				cps = append(cps, ld.CopyToHost(w, host[offs[i]:]), ld.Copy(w, dev.Buffer(), offs[i]))
			}
			for _, c := range cps {
				if err := c.Wait(); err != nil {
					t.Fatal(err)
				}
			}
			if err := ld.Finish(); err != nil {
				t.Fatal(err)
			}
			// The gaps between the weights are not written (on a GPU they
			// hold what the pool's memory held before): compare the weights.
			got := hostBytes(t, dev)
			for i, w := range ranged {
				r := want[offs[i] : offs[i]+w.Bytes()]
				if !slices.Equal(host[offs[i]:offs[i]+w.Bytes()], r) {
					t.Errorf("%s: host copy differs from Fill", w.Name)
				}
				if !slices.Equal(got[offs[i]:offs[i]+w.Bytes()], r) {
					t.Errorf("%s: device copy differs from Fill", w.Name)
				}
			}
		})
	}
}

// A shard cut short after the checkpoint was opened and checked (its
// header still promises the data): the load fails with one error naming
// the file, no panic, no hang, every reader stopped and nothing left
// allocated.
func TestBuildTruncatedShard(t *testing.T) {
	for name, newBE := range loadBackends(t) {
		t.Run(name, func(t *testing.T) {
			dir := writeSharded(t)
			before := runtime.NumGoroutine()
			ck := openCheckpoint(t, dir)
			// Every shard opened (and its header read) now.
			if err := (&CheckpointSource{Ck: ck}).Check(bf16Plan(construct)); err != nil {
				t.Fatal(err)
			}
			shard := filepath.Join(dir, "model-00001-of-00003.safetensors")
			st, err := os.Stat(shard)
			if err != nil {
				t.Fatal(err)
			}
			// Cut into g.big: the file holds a.f32, f.noshape, g.big and
			// q.f16 (5120 bytes) in that order.
			if err := os.Truncate(shard, st.Size()-5120-1000); err != nil {
				t.Fatal(err)
			}
			mb := budgeted(newBE(), 1<<30)
			b := Build(&CheckpointSource{Ck: ck, Be: mb}, mb, tensor.BF16, LoadOptions{Readers: 4, Chunk: 4096, Staging: 2},
				func(b *Builder) {
					// Only ranged weights: the sequential path reads
					// through the mapping, which a cut file faults.
					b.Get("a.f32", 300, 129)
					b.Get("e.same", 4096, 33)
					b.Get("g.big", 1<<16)
					b.Get("b.bf16", 1000)
				})
			err = b.Err()
			if err == nil {
				t.Fatal("no error for a truncated shard")
			}
			if !strings.Contains(err.Error(), shard) || !strings.Contains(err.Error(), "truncated") {
				t.Errorf("error %q does not name %s as truncated", err, shard)
			}
			t.Logf("error: %v", err)
			releaseAll(t, b, mb)
			waitGoroutines(t, before)
		})
	}
}

// A shard whose header is corrupt, found only when the load first reads
// from it: one error naming the file.
func TestBuildCorruptShard(t *testing.T) {
	dir := writeSharded(t)
	shard := filepath.Join(dir, "model-00003-of-00003.safetensors")
	if err := os.WriteFile(shard, []byte("\x10\x00\x00\x00\x00\x00\x00\x00{not json at all"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()
	ck := openCheckpoint(t, dir)
	for name, newBE := range loadBackends(t) {
		t.Run(name, func(t *testing.T) {
			mb := budgeted(newBE(), 1<<30)
			b := Build(&CheckpointSource{Ck: ck, Be: mb}, mb, tensor.BF16, LoadOptions{Readers: 4, Chunk: 4096}, construct)
			err := b.Err()
			if err == nil || !strings.Contains(err.Error(), shard) {
				t.Fatalf("error %v does not name %s", err, shard)
			}
			releaseAll(t, b, mb)
		})
	}
	waitGoroutines(t, before)
}

// A constructor that asks for other weights than its plan listed still
// gets the right ones, and what was loaded ahead is freed.
func TestBuildOffPlan(t *testing.T) {
	dir := writeSharded(t)
	ck := openCheckpoint(t, dir)
	mb := budgeted(testdevice.NewFake(), 1<<30)
	planned := false
	b := Build(&CheckpointSource{Ck: ck, Be: mb}, mb, tensor.BF16, LoadOptions{Readers: 2, Chunk: 4096}, func(b *Builder) {
		b.Get("a.f32", 300, 129)
		if !planned {
			planned = true
			b.Get("g.big", 1<<16)
			b.Get("e.same", 4096, 33)
			return
		}
		b.Get("b.bf16", 1000)
		b.Get("e.same", 4096, 33)
	})
	if err := b.Err(); err != nil {
		t.Fatal(err)
	}
	seq := FromCheckpoint(ck, mb, tensor.BF16)
	seq.Get("a.f32", 300, 129)
	seq.Get("b.bf16", 1000)
	seq.Get("e.same", 4096, 33)
	for i, w := range seq.Held() {
		if !slices.Equal(hostBytes(t, w), hostBytes(t, b.Held()[i])) {
			t.Errorf("weight %d differs", i)
		}
	}
	if got, want := mb.Stats().InUse, 2*seq.Bytes(); got != want {
		t.Errorf("%d bytes in use, want the two models' %d (nothing loaded ahead left)", got, want)
	}
	b.Release()
	seq.Release()
}

// Loading ahead never makes a load fail that would succeed one weight at
// a time: a constructor that frees each weight after use (as LLaMA's
// reordered q and k) under a cap that holds two weights.
func TestBuildWithinCap(t *testing.T) {
	dir := writeSharded(t)
	ck := openCheckpoint(t, dir)
	const w = 1 << 16 * 4 // g.big in f32
	mb := budgeted(testdevice.NewFake(), 2*w+1024)
	var sums []float64
	b := Build(&CheckpointSource{Ck: ck, Be: mb}, mb, tensor.F32, LoadOptions{Readers: 2, Chunk: 4096}, func(b *Builder) {
		for range 4 {
			x := b.Get("g.big", 1<<16)
			if x == nil {
				continue
			}
			s := 0.0
			for _, v := range tensor.Float32s(x) {
				s += float64(v)
			}
			sums = append(sums, s)
			tensor.Release(x)
		}
	})
	if err := b.Err(); err != nil {
		t.Fatal(err)
	}
	if len(sums) != 4 || sums[0] != sums[3] {
		t.Errorf("sums %v: want four equal", sums)
	}
}

// constructFP8 asks for FP8 weights: parts in f32, f16 and bf16 (quantized
// on a device that can), and a fused one of mixed dtypes (on the host).
func constructFP8(b *Builder) {
	b.GetFP8("a.f32", 300, 129)
	b.GetFP8("q.f16", 64, 40)
	b.GetFP8("e.same", 4096, 33)
	b.CatFP8([]string{"q.f16", "k.bf16", "v.f32"}, []int{64, 32, 96}, 40)
}

// countingFP8 counts the device quantizations of the backend under it.
type countingFP8 struct {
	tensor.Backend
	fq tensor.FP8Compute
	n  atomic.Int64
}

func (c *countingFP8) Unwrap() tensor.Backend { return c.Backend }
func (c *countingFP8) QuantizeRowsFP8(q, scale, x *tensor.Tensor) error {
	c.n.Add(1)
	return c.fq.QuantizeRowsFP8(q, scale, x)
}
func (c *countingFP8) LinearScaledFP8(dst, xq, xs, wq, ws, bias *tensor.Tensor) error {
	return c.fq.LinearScaledFP8(dst, xq, xs, wq, ws, bias)
}
func (c *countingFP8) NativeFP8() bool { return c.fq.NativeFP8() }

// FP8 weights a Loader copies into device memory (a block's arena) are
// quantized there, with the host's codes and scales bit for bit (Fill
// quantizes on the host); a fused weight of mixed dtypes is quantized on
// the host.
func TestLoaderFP8OnDevice(t *testing.T) {
	dir := writeSharded(t)
	ck := openCheckpoint(t, dir)
	ws := bf16Plan(constructFP8)
	if len(ws) != 8 {
		t.Fatalf("%d planned weights, want 8", len(ws))
	}
	offs, size, want := arenaOf(t, &CheckpointSource{Ck: ck, Be: cpu.New()}, ws)
	for name, newBE := range loadBackends(t) {
		if name == "cpu" {
			continue // host memory: quantized in place
		}
		t.Run(name, func(t *testing.T) {
			inner := newBE()
			fq, ok := tensor.As[tensor.FP8Compute](inner)
			if !ok {
				t.Skipf("%s has no FP8 compute", name)
			}
			be := &countingFP8{Backend: inner, fq: fq}
			ld := NewLoader(&CheckpointSource{Ck: ck, Be: be}, be, LoadOptions{Readers: 3, Chunk: 8192, Staging: 2})
			dev, err := tensor.Alloc(be, tensor.U8, int(size))
			if err != nil {
				t.Fatal(err)
			}
			defer tensor.Release(dev)
			for i, w := range ws {
				ld.Copy(w, dev.Buffer(), offs[i])
			}
			if err := ld.Finish(); err != nil {
				t.Fatal(err)
			}
			// Three single-dtype weights, each half quantized on the device.
			if n := be.n.Load(); n != 6 {
				t.Errorf("%d device quantizations, want 6", n)
			}
			got := hostBytes(t, dev)
			for i, w := range ws {
				if !slices.Equal(got[offs[i]:offs[i]+w.Bytes()], want[offs[i]:offs[i]+w.Bytes()]) {
					t.Errorf("%s (%v): device bytes differ from the host's quantization", w.Name, w.FP8)
				}
			}
		})
	}
}
