package gpu

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"math/rand"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/framepack-go/framepack/convchain"
	"github.com/framepack-go/framepack/hip"
	"github.com/framepack-go/framepack/kernels"
	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/tensor/backendtest"
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

// TestOps runs the op suite (tensor/backendtest) on the GPU against the CPU
// backend, with the GPU's own cases: which attention path ran and every
// conv3d tier on its own; then the suite's math-heavy cases on framepack's
// own math functions, GEMM and generic attention kernels, without the
// vendor BLAS, and on kernels compiled at run time.
func TestOps(t *testing.T) {
	g := newGPU(t, Options{})
	t.Logf("GPU: %v; BLAS: %s", g.Device(), g.BLAS())
	if err := g.Warmup(); err != nil {
		t.Fatal(err)
	}
	backendtest.Run(t, g, append(slices.Clone(backendtest.Cases), gpuCases...)...)
	// framepack's own math functions (the AMD code path), GEMM kernel and
	// generic attention kernel on this GPU.
	own := newGPU(t, Options{OwnMath: true, NoBLAS: true, GenericAttention: true})
	t.Run("own_math", func(t *testing.T) {
		backendtest.Run(t, own, backendtest.Select("unary", "attention", "softmax", "matmul", "linear", "fused")...)
	})
	// The vendor BLAS off alone: every GEMM-backed op on framepack's kernel.
	noBLAS := newGPU(t, Options{NoBLAS: true})
	t.Run("no_blas", func(t *testing.T) {
		backendtest.Run(t, noBLAS, backendtest.Select("matmul", "linear", "conv3d")...)
	})
	// Linear through cuBLASLt / hipBLASLt (Options.Lt), the bias in its
	// epilogue.
	lt := newGPU(t, Options{Lt: true})
	t.Run("lt", func(t *testing.T) {
		if lt.lt == nil {
			t.Skip("no Lt library (the log says why)")
		}
		backendtest.Run(t, lt, backendtest.Select("linear")...)
	})
	// The kernels as the run-time compiler builds them (hiprtc / NVRTC, the
	// vendor's math on NVIDIA), where the default loads precompiled ones.
	rt := newGPU(t, Options{RuntimeCompile: true, CacheDir: "-"})
	t.Run("runtime_compiled", func(t *testing.T) {
		backendtest.Run(t, rt, backendtest.Select("unary", "attention", "softmax", "fused")...)
	})
	t.Logf("memory after the ops: %v", g.Stats())
}

// gpuCases look at which path the GPU took.
var gpuCases = []backendtest.Case{
	{Name: "attention_paths", Fn: func(e *backendtest.Env) {
		// cuDNN's fused attention takes the unmasked bf16/f16 calls where
		// the library has it.
		g := e.Got.(*Backend)
		before := g.FusedAttentionCalls()
		backendtest.Attention(e)
		n := g.FusedAttentionCalls() - before
		e.T.Logf("cuDNN fused attention ran %d calls", n)
		if h := g.dnn; h != nil && h.Lib().HasFusedAttention() && n == 0 {
			e.T.Errorf("%v has fused attention but ran none", h.Lib())
		}
	}},
	{Name: "attention_flash", Fn: func(e *backendtest.Env) {
		// framepack's tensor-core kernels where cuDNN would run.
		defer func(f bool) { attnNoFused = f }(attnNoFused)
		attnNoFused = true
		backendtest.Attention(e)
	}},
	{Name: "attention_mma", Fn: func(e *backendtest.Env) {
		// The masked tensor-core kernel on the unmasked cases too.
		defer func(f, g bool) { attnNoFlash, attnNoFused = f, g }(attnNoFlash, attnNoFused)
		attnNoFlash, attnNoFused = true, true
		backendtest.Attention(e)
	}},
	{Name: "attention_f32_tiled", Fn: func(e *backendtest.Env) {
		// f32 at head dim 128 without a causal or additive mask on the
		// tiled kernel, on NVIDIA with the shared memory for it.
		g := e.Got.(*Backend)
		calls := g.TiledF32AttentionCalls()
		backendtest.Attention(e)
		n := g.TiledF32AttentionCalls() - calls
		e.T.Logf("the tiled f32 kernel ran %d attention calls", n)
		if g.dev.Vendor == hip.NVIDIA && g.dev.SharedPerBlockOptin >= tiledF32Shared && n == 0 {
			e.T.Errorf("%s: no f32 attention call ran on the tiled kernel", g.dev.Name)
		}
	}},
	{Name: "attention_blas", Fn: func(e *backendtest.Env) {
		// f32 through the BLAS where it is open, in chunks of 5 queries:
		// every case with more queries takes several.
		g := e.Got.(*Backend)
		defer func(n int, t bool) { attnChunkRows, attnNoTiledF32 = n, t }(attnChunkRows, attnNoTiledF32)
		attnChunkRows, attnNoTiledF32 = 5, true
		calls, chunks := g.BLASAttentionCalls(), g.blasAttnChunks.Load()
		backendtest.Attention(e)
		calls, chunks = g.BLASAttentionCalls()-calls, g.blasAttnChunks.Load()-chunks
		e.T.Logf("the BLAS ran %d f32 attention calls in %d chunks", calls, chunks)
		if g.blas != nil && (calls == 0 || chunks <= calls) {
			e.T.Errorf("BLAS open, but %d f32 attention calls in %d chunks ran through it", calls, chunks)
		}
	}},
	{Name: "conv3d_tiers", Fn: testConvTiers},
}

// TestAttentionF32Tiled: the tiled f32 kernel at each unroll against the
// CPU op, on several query blocks and key tiles with tails, GQA, without
// and with a key mask (one batch element's hiding every key: zeros).
func TestAttentionF32Tiled(t *testing.T) {
	g := newGPU(t, Options{})
	if g.dev.Vendor != hip.NVIDIA || g.dev.SharedPerBlockOptin < tiledF32Shared {
		t.Skipf("%s: no tiled f32 attention (NVIDIA with %d B of shared memory per block)", g.dev.Name, tiledF32Shared)
	}
	const B, Lq, Lk, Hq, Hkv, D = 2, 300, 333, 4, 2, 128
	backendtest.Run(t, g, backendtest.Case{Name: "attention_f32_tiled", Fn: func(e *backendtest.Env) {
		q := e.Pair(e.Rand(tensor.F32, -2, 2, B, Lq, Hq, D))
		k := e.Pair(e.Rand(tensor.F32, -2, 2, B, Lk, Hkv, D))
		v := e.Pair(e.Rand(tensor.F32, -2, 2, B, Lk, Hkv, D))
		km := e.Rand(tensor.F32, 0, 1, B, Lk)
		for i, f := range km.Float32s() {
			km.Float32s()[i] = float32(b2f(i < Lk && (f < 0.6 || i%64 == 5)))
		}
		kms := e.Pair(km)
		defer func(u int) { attnF32Unroll = u }(attnF32Unroll)
		for _, u := range []int{2, 4, 8} {
			attnF32Unroll = u
			for _, masked := range []bool{false, true} {
				var p [2]tensor.AttnParams
				if masked {
					p = [2]tensor.AttnParams{{KeyMask: kms[0]}, {KeyMask: kms[1]}}
				}
				o := e.Out(tensor.F32, B, Lq, Hq, D)
				calls := g.TiledF32AttentionCalls()
				e.Run("attention", func(i int) error { return e.Backend(i).Attention(o[i], q[i], k[i], v[i], p[i]) })
				if n := g.TiledF32AttentionCalls() - calls; n != 1 {
					e.T.Errorf("unroll %d: %d calls on the tiled kernel, want 1", u, n)
				}
				e.Compare(fmt.Sprintf("attention f32 tiled, unroll %d, key mask %v", u, masked), o, 20, 1)
			}
		}
	}})
}

func b2f(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestAttentionBLASBudget: the f32 attention through the BLAS takes its
// chunk of queries from the free budget, several chunks when little is
// free, and matches the CPU op; without room the flash kernel runs.
func TestAttentionBLASBudget(t *testing.T) {
	g := newGPU(t, Options{})
	if g.blas == nil {
		t.Skip("no BLAS: the f32 attention runs the flash kernel")
	}
	const B, Lq, Lk, H, D = 1, 1500, 1401, 4, 64
	backendtest.Run(t, g, backendtest.Case{Name: "attention_budget", Fn: func(e *backendtest.Env) {
		q := e.Pair(e.Rand(tensor.F32, -2, 2, B, Lq, H, D))
		k := e.Pair(e.Rand(tensor.F32, -2, 2, B, Lk, H, D))
		v := e.Pair(e.Rand(tensor.F32, -2, 2, B, Lk, H, D))
		km := e.Rand(tensor.F32, 0, 1, B, Lk)
		for i, f := range km.Float32s() {
			km.Float32s()[i] = float32(min(1, int(f*2+0.5)))
		}
		kms := e.Pair(km)
		var o [3][2]*tensor.Tensor
		for i := range o {
			o[i] = e.Out(tensor.F32, B, Lq, H, D)
		}
		// 16 MiB free: 8 MiB of scores, a few hundred queries a chunk.
		// (The budget is capped for the chunk's choice: a buffer filling
		// it is refused by the device pool, which the test's other
		// backends share.)
		defer func(n int64) { attnRoomCap = n }(attnRoomCap)
		attnRoomCap = 16 << 20
		for c, causal := range []bool{false, true} {
			var p [2]tensor.AttnParams
			for i := range p {
				p[i] = tensor.AttnParams{Causal: causal, KeyMask: kms[i]}
			}
			calls, chunks := g.BLASAttentionCalls(), g.blasAttnChunks.Load()
			e.Run("attention", func(i int) error { return e.Backend(i).Attention(o[c][i], q[i], k[i], v[i], p[i]) })
			calls, chunks = g.BLASAttentionCalls()-calls, g.blasAttnChunks.Load()-chunks
			if calls != 1 || chunks < 2 {
				e.T.Errorf("causal %v: %d BLAS attention calls in %d chunks, want 1 in several", causal, calls, chunks)
			}
			e.T.Logf("causal %v: %d queries in %d chunks", causal, Lq, chunks)
			e.Compare(fmt.Sprintf("attention f32 causal %v, chunked by the budget", causal), o[c], 20, 1)
		}
		// No room for the scores: the flash kernel.
		attnRoomCap = 0
		calls := g.BLASAttentionCalls()
		e.Run("attention", func(i int) error { return e.Backend(i).Attention(o[2][i], q[i], k[i], v[i], tensor.AttnParams{}) })
		if n := g.BLASAttentionCalls() - calls; n != 0 {
			e.T.Errorf("%d BLAS attention calls without room for the scores", n)
		}
		e.Compare("attention f32 on the flash kernel without room", o[2], 20, 1)
	}})
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

// testConvTiers runs every conv3d tier of the chain (vendor library, GEMM,
// naive kernel) directly.
func testConvTiers(e *backendtest.Env) {
	g := e.Got.(*Backend)
	for _, tier := range g.ConvTiers() {
		for _, c := range backendtest.ConvCases {
			for _, dt := range []tensor.DType{tensor.F32, tensor.F16, tensor.BF16} {
				x, w, b, o, p := c.Inputs(e, dt)
				if err := e.Ref.Conv3d(o[0], x[0], w[0], b[0], p); err != nil {
					e.T.Fatal(err)
				}
				k := convchain.KeyOf("test", x[1], w[1], b[1], p)
				plan, err := tier.Plan(k, nil)
				if err != nil {
					e.T.Logf("tier %s skips %v: %v", tier.Name(), k, err)
					continue
				}
				if err := tier.Run(plan, o[1], x[1], w[1], b[1], p); err != nil {
					e.T.Errorf("tier %s (%s) on %v: %v", tier.Name(), plan.Algorithm, k, err)
					continue
				}
				e.Compare(fmt.Sprintf("conv3d tier %s (%s) %s x%v w%v", tier.Name(), plan.Algorithm, dt, c.X, c.W), o, 20, 1)
			}
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
