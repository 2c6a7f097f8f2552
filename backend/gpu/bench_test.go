package gpu

import (
	"fmt"
	"math"
	"math/rand"
	"testing"
	"time"

	"github.com/framepack-go/framepack/convchain"
	"github.com/framepack-go/framepack/tensor"
)

// benchBackends are shared by the benchmarks (kernels compile once): the
// default and one with the generic attention kernel.
var benchBackends [2]*Backend

func benchGPU(b *testing.B) *Backend { return benchOf(b, 0) }

func benchOf(b *testing.B, i int) *Backend {
	if benchBackends[i] == nil {
		g, err := New(Options{GenericAttention: i == 1})
		if err != nil {
			b.Skipf("no GPU: %v", err)
		}
		if err := g.Warmup(); err != nil {
			b.Fatal(err)
		}
		benchBackends[i] = g
	}
	return benchBackends[i]
}

// randDevice allocates a device tensor of random values in [-1, 1).
func randDevice(b *testing.B, g *Backend, dt tensor.DType, shape ...int) *tensor.Tensor {
	t, err := tensor.Alloc(g, dt, shape...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { tensor.Release(t) })
	// Fresh standard-normal f32 for every chunk on the host, cast on the
	// device: repeated data would let kernels (attention's rescale skip)
	// see easier inputs than a model gives them.
	n := tensor.Numel(shape)
	const chunk = 1 << 22
	host := make([]float32, min(n, chunk))
	rng := rand.New(rand.NewSource(int64(n)))
	tmp, err := tensor.Alloc(g, tensor.F32, len(host))
	if err != nil {
		b.Fatal(err)
	}
	defer tensor.Release(tmp)
	for off := 0; off < n; off += chunk {
		m := min(chunk, n-off)
		for i := range host[:m] {
			host[i] = float32(rng.NormFloat64())
		}
		if err := g.Sync(); err != nil { // the previous chunk has left tmp
			b.Fatal(err)
		}
		if err := g.Upload(tmp.Buffer(), 0, tensor.FromFloat32(host[:m], m).HostBytes()); err != nil {
			b.Fatal(err)
		}
		view := tensor.Wrap(g, t.Buffer(), dt, n)
		if dt == tensor.F32 {
			if err := g.Copy(view, off, []int{1}, tmp, 0, []int{1}, []int{m}); err != nil {
				b.Fatal(err)
			}
			continue
		}
		h := tensor.Wrap(g, tmp.Buffer(), tensor.F32, m)
		part, err := tensor.Alloc(g, dt, m)
		if err != nil {
			b.Fatal(err)
		}
		if err := g.Cast(part, h); err != nil {
			b.Fatal(err)
		}
		if err := g.Copy(view, off, []int{1}, part, 0, []int{1}, []int{m}); err != nil {
			b.Fatal(err)
		}
		tensor.Release(part)
	}
	if err := g.Sync(); err != nil {
		b.Fatal(err)
	}
	return t
}

// timeIt runs fn b.N times on the device and returns seconds per run.
func timeIt(b *testing.B, g *Backend, fn func() error) float64 {
	if err := fn(); err != nil { // warm-up
		b.Fatal(err)
	}
	g.Sync()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		if err := fn(); err != nil {
			b.Fatal(err)
		}
	}
	if err := g.Sync(); err != nil {
		b.Fatal(err)
	}
	return time.Since(start).Seconds() / float64(b.N)
}

const benchElems = 64 << 20 // 64 Mi elements: 128 MiB in bf16

// BenchmarkBandwidth times memory-bound kernels over benchElems bf16
// elements in rows of cols, counting bytes read plus written; CopyD2D, a
// device-to-device copy, is the ceiling. w is a row of cols elements (a
// bias, a norm's weight).
func BenchmarkBandwidth(b *testing.B) {
	for _, c := range []struct {
		name string
		cols int
		run  func(g *Backend, y, x, w *tensor.Tensor) error
	}{
		{"CopyD2D", 1, func(g *Backend, y, x, _ *tensor.Tensor) error { return g.Cast(y, x) }},
		{"SiLU", 1, func(g *Backend, y, x, _ *tensor.Tensor) error { return g.Unary(tensor.OpSiLU, y, x, 0, 0) }},
		{"AddBroadcast", 3072, func(g *Backend, y, x, w *tensor.Tensor) error {
			return g.Binary(tensor.OpAdd, y, x, []int{3072, 1}, w, []int{0, 1})
		}},
		{"LayerNorm", 3072, func(g *Backend, y, x, _ *tensor.Tensor) error { return g.LayerNorm(y, x, nil, nil, 1e-6) }},
		{"RMSNorm", 128, func(g *Backend, y, x, w *tensor.Tensor) error { return g.RMSNorm(y, x, w, 1e-6) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			g := benchGPU(b)
			rows := benchElems / c.cols
			x := randDevice(b, g, tensor.BF16, rows, c.cols)
			w := randDevice(b, g, tensor.BF16, c.cols)
			y := randDevice(b, g, tensor.BF16, rows, c.cols)
			s := timeIt(b, g, func() error { return c.run(g, y, x, w) })
			b.ReportMetric(float64(2*2*benchElems)/s/1e9, "GB/s")
		})
	}
}

// BenchmarkGroupNormSiLU: a VAE decoder activation (128 channels, 9 frames
// at 240×416 → 115 Mi elements), 32 groups.
func BenchmarkGroupNormSiLU(b *testing.B) {
	g := benchGPU(b)
	shape := []int{1, 128, 9, 240, 416}
	n := tensor.Numel(shape)
	x := randDevice(b, g, tensor.BF16, shape...)
	w := randDevice(b, g, tensor.BF16, 128)
	bb := randDevice(b, g, tensor.BF16, 128)
	y := randDevice(b, g, tensor.BF16, shape...)
	s := timeIt(b, g, func() error { return g.GroupNorm(y, x, w, bb, 32, 1e-6, true) })
	b.ReportMetric(float64(2*2*n)/s/1e9, "GB/s")
}

// rmsNormed normalises x over its last axis.
func rmsNormed(b *testing.B, g *Backend, x *tensor.Tensor) *tensor.Tensor {
	y, err := tensor.Alloc(g, x.DType(), x.Shape()...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { tensor.Release(y) })
	if err := g.RMSNorm(y, x, nil, 1e-6); err != nil {
		b.Fatal(err)
	}
	return y
}

// BenchmarkAttention: the transformer's self-attention at L ≈ 18k (a
// 480×832 section), 24 heads × 128, bf16: 4·L²·D·H FLOPs. "cudnn" is
// cuDNN's fused attention (the default on NVIDIA), "flash" framepack's
// unmasked tensor-core kernel, both checked against attn_mma by relative
// L2; "mma" the masked tensor-core kernel, "generic" the portable kernel.
func BenchmarkAttention(b *testing.B) {
	for _, c := range []struct {
		name             string
		generic          int
		noFused, noFlash bool
	}{{"cudnn", 0, false, false}, {"flash", 0, true, false}, {"mma", 0, true, true}, {"generic", 1, true, false}} {
		b.Run(c.name, func(b *testing.B) {
			g := benchOf(b, c.generic)
			defer func(f, n bool) { attnNoFlash, attnNoFused = f, n }(attnNoFlash, attnNoFused)
			attnNoFlash, attnNoFused = c.noFlash, c.noFused
			L, H, D := 18000, 24, 128
			if !c.noFused && !g.useFusedAttention(tensor.BF16, D) {
				b.Skip("no cuDNN fused attention on this device")
			}
			// q and k RMS-normalised per head, as the transformer's q/k norm
			// leaves them (scores of unit scale, row maxima that keep moving).
			q := rmsNormed(b, g, randDevice(b, g, tensor.BF16, 1, L, H, D))
			k := rmsNormed(b, g, randDevice(b, g, tensor.BF16, 1, L, H, D))
			v := randDevice(b, g, tensor.BF16, 1, L, H, D)
			o := randDevice(b, g, tensor.BF16, 1, L, H, D)
			calls := g.FusedAttentionCalls()
			s := timeIt(b, g, func() error { return g.Attention(o, q, k, v, tensor.AttnParams{}) })
			if fused := g.FusedAttentionCalls() > calls; fused != !c.noFused {
				b.Fatalf("cuDNN ran: %v, want %v", fused, !c.noFused)
			}
			b.ReportMetric(4*float64(L)*float64(L)*float64(D)*float64(H)/s/1e12, "TFLOP/s")
			b.ReportMetric(s*1e3, "ms")
			if !c.noFlash && c.generic == 0 && g.tensorCoreAttention(tensor.BF16, D) {
				// The fast paths against the masked tensor-core kernel.
				attnNoFlash, attnNoFused = true, true
				ref := randDevice(b, g, tensor.BF16, 1, L, H, D)
				if err := g.Attention(ref, q, k, v, tensor.AttnParams{}); err != nil {
					b.Fatal(err)
				}
				x, y := tensor.ToHost(o).ToFloat32(), tensor.ToHost(ref).ToFloat32()
				var num, den float64
				for i := range x {
					d := float64(x[i]) - float64(y[i])
					num += d * d
					den += float64(y[i]) * float64(y[i])
				}
				r := math.Sqrt(num / den)
				b.Logf("%s vs attn_mma at L=%d: rel_l2 %.2e", c.name, L, r)
				if !(r < 1e-2) {
					b.Errorf("%s differs from attn_mma: rel_l2 %v", c.name, r)
				}
			}
		})
	}
}

// BenchmarkAttentionF32: the transformer's self-attention at L ≈ 18k, 24
// heads × 128, f32: the tiled kernel at each unroll (checked against the
// BLAS path by relative L2) and the BLAS path.
func BenchmarkAttentionF32(b *testing.B) {
	g := benchGPU(b)
	L, H, D := 18000, 24, 128
	// q and k RMS-normalised per head, as the transformer's q/k norm
	// leaves them; made once, the host draws them slowly.
	q := rmsNormed(b, g, randDevice(b, g, tensor.F32, 1, L, H, D))
	k := rmsNormed(b, g, randDevice(b, g, tensor.F32, 1, L, H, D))
	v := randDevice(b, g, tensor.F32, 1, L, H, D)
	ref := randDevice(b, g, tensor.F32, 1, L, H, D)
	defer func(u int, n bool) { attnF32Unroll, attnNoTiledF32 = u, n }(attnF32Unroll, attnNoTiledF32)
	attnNoTiledF32 = true
	if err := g.Attention(ref, q, k, v, tensor.AttnParams{}); err != nil {
		b.Fatal(err)
	}
	want := tensor.ToHost(ref).ToFloat32()
	for _, u := range []int{2, 4, 8, 0} {
		name := fmt.Sprintf("tiled_u%d", u)
		if u == 0 {
			name = "blas"
		}
		b.Run(name, func(b *testing.B) {
			attnF32Unroll, attnNoTiledF32 = max(u, 2), u == 0
			o := randDevice(b, g, tensor.F32, 1, L, H, D)
			tiled, blas := g.TiledF32AttentionCalls(), g.BLASAttentionCalls()
			s := timeIt(b, g, func() error { return g.Attention(o, q, k, v, tensor.AttnParams{}) })
			tiled, blas = g.TiledF32AttentionCalls()-tiled, g.BLASAttentionCalls()-blas
			if (u > 0) != (tiled > 0) || (u == 0) != (blas > 0) {
				b.Fatalf("%d calls on the tiled kernel, %d through the BLAS", tiled, blas)
			}
			b.ReportMetric(4*float64(L)*float64(L)*float64(D)*float64(H)/s/1e12, "TFLOP/s")
			b.ReportMetric(s*1e3, "ms")
			if u == 0 {
				return
			}
			x := tensor.ToHost(o).ToFloat32()
			var num, den float64
			for i := range x {
				d := float64(x[i]) - float64(want[i])
				num += d * d
				den += float64(want[i]) * float64(want[i])
			}
			r := math.Sqrt(num / den)
			b.Logf("%s vs the BLAS path at L=%d: rel_l2 %.2e", name, L, r)
			if !(r < 1e-5) {
				b.Errorf("%s differs from the BLAS path: rel_l2 %v", name, r)
			}
		})
	}
}

// BenchmarkConv3dTiers times each conv3d tier on a VAE-like 3×3×3
// convolution (128 → 128 channels, 5 frames of 64×64, bf16).
func BenchmarkConv3dTiers(b *testing.B) {
	g := benchGPU(b)
	x := randDevice(b, g, tensor.BF16, 1, 128, 5, 64, 64)
	w := randDevice(b, g, tensor.BF16, 128, 128, 3, 3, 3)
	bias := randDevice(b, g, tensor.BF16, 128)
	y := randDevice(b, g, tensor.BF16, 1, 128, 5, 64, 64)
	p := tensor.ConvParams{Stride: [3]int{1, 1, 1}, Padding: [3]int{1, 1, 1}}
	flops := 2.0 * 128 * 128 * 27 * 5 * 64 * 64
	for _, tier := range g.ConvTiers() {
		b.Run(tier.Name(), func(b *testing.B) {
			plan, err := tier.Plan(convchain.KeyOf("bench", x, w, bias, p), nil)
			if err != nil {
				b.Skip(err)
			}
			b.Logf("%s: %s", tier.Name(), plan.Algorithm)
			s := timeIt(b, g, func() error { return tier.Run(plan, y, x, w, bias, p) })
			b.ReportMetric(flops/s/1e12, "TFLOP/s")
		})
	}
}
