package gpu

import (
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/framepack-go/framepack/backend/cpu"
	"github.com/framepack-go/framepack/convchain"
	"github.com/framepack-go/framepack/internal/numcmp"
	"github.com/framepack-go/framepack/internal/testutil/golden"
	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/tensor/backendtest"
	"github.com/framepack-go/framepack/vae"
)

func TestMain(m *testing.M) {
	convchain.MaybeRunChild() // searches and injected hangs run in a child copy of the test binary
	os.Exit(m.Run())
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// libraryFirst is the chain's order on NVIDIA, which the fault tests name.
var libraryFirst = []string{"optimized", "gemm", "naive", "cpu"}

// only makes every tier but keep fail with an error.
func only(keep string) *convchain.Faults {
	f := &convchain.Faults{Conv3d: map[string]convchain.Fault{}}
	for _, n := range libraryFirst {
		if n != keep {
			f.Conv3d[n] = convchain.FaultError
		}
	}
	return f
}

func wrapped(t testing.TB, g *Backend, o ConvOptions) *convchain.Backend {
	t.Helper()
	if o.Log == nil {
		o.Log = quiet
	}
	o.CachePath = "off"
	if o.Faults != nil && o.Order == nil {
		o.Order = libraryFirst // the tiers faults name, whatever the GPU
	}
	b, err := g.WithConvChain(cpu.New(), o)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// convCase is one convolution of the tier tests.
type convCase struct {
	name       string
	x, w       []int
	bias       bool
	stride     [3]int
	pad        [3]int
	chunkBytes int64 // optimized tier's chunk bound (0: default)
}

// vaeLike are the shapes the VAE runs, small: 3×3×3 on a causally padded
// input, with zero padding, strided (the encoder's downsamplers), 1×1×1
// (shortcuts, post_quant_conv), thin RGB ends, odd sizes, batch 2, and tiny
// chunks that split the frames.
var vaeLike = []convCase{
	{"k3_prepadded", []int{1, 32, 6, 18, 22}, []int{64, 32, 3, 3, 3}, true, [3]int{1, 1, 1}, [3]int{}, 0},
	{"k3_zero_pad", []int{1, 16, 5, 9, 11}, []int{16, 16, 3, 3, 3}, true, [3]int{1, 1, 1}, [3]int{1, 1, 1}, 0},
	{"k3_stride_1x2x2", []int{1, 16, 5, 17, 19}, []int{16, 16, 3, 3, 3}, true, [3]int{1, 2, 2}, [3]int{}, 0},
	{"k3_stride_2x2x2", []int{1, 16, 7, 17, 17}, []int{32, 16, 3, 3, 3}, true, [3]int{2, 2, 2}, [3]int{}, 0},
	{"k1_batch2", []int{2, 64, 3, 10, 12}, []int{32, 64, 1, 1, 1}, true, [3]int{1, 1, 1}, [3]int{}, 0},
	{"k3_rgb_in_odd", []int{1, 3, 7, 9, 13}, []int{24, 3, 3, 3, 3}, true, [3]int{1, 1, 1}, [3]int{}, 0},
	{"k3_rgb_out", []int{1, 24, 6, 10, 10}, []int{3, 24, 3, 3, 3}, true, [3]int{1, 1, 1}, [3]int{}, 0},
	{"k3_no_bias", []int{1, 16, 4, 8, 8}, []int{16, 16, 3, 3, 3}, false, [3]int{1, 1, 1}, [3]int{}, 0},
	{"k3_chunked", []int{1, 16, 9, 12, 14}, []int{32, 16, 3, 3, 3}, true, [3]int{1, 1, 1}, [3]int{1, 1, 1}, 40 << 10},
}

func randHost(rng *rand.Rand, dt tensor.DType, scale float64, shape ...int) *tensor.Tensor {
	v := make([]float32, tensor.Numel(shape))
	for i := range v {
		v[i] = float32((rng.Float64()*2 - 1) * scale)
	}
	h := tensor.FromFloat32(v, shape...)
	if dt == tensor.F32 {
		return h
	}
	out := tensor.New(dt, shape...)
	if err := cpu.New().Cast(out, h); err != nil {
		panic(err)
	}
	return out
}

func upload(t testing.TB, be tensor.Backend, h *tensor.Tensor) *tensor.Tensor {
	t.Helper()
	d, err := tensor.Alloc(be, h.DType(), h.Shape()...)
	if err != nil {
		t.Fatal(err)
	}
	if err := be.Upload(d.Buffer(), 0, h.HostBytes()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tensor.Release(d) })
	return d
}

// limit is the relative L2 error a GPU convolution may have against the
// CPU's in the same dtype (f32 accumulation both; the GPU rounds before
// the bias in some tiers).
func limit(dt tensor.DType) float64 {
	switch dt {
	case tensor.F16:
		return 2e-3
	case tensor.BF16:
		return 1.5e-2
	}
	return 2e-5
}

type convRun struct {
	c                convCase
	dt               tensor.DType
	hx, hw, hb, want *tensor.Tensor
	outShape         []int
}

func newConvRun(t testing.TB, c convCase, dt tensor.DType, seed uint64) *convRun {
	rng := rand.New(rand.NewPCG(seed, 7))
	r := &convRun{c: c, dt: dt}
	r.hx = randHost(rng, dt, 1, c.x...)
	fan := float64(c.w[1] * c.w[2] * c.w[3] * c.w[4])
	r.hw = randHost(rng, dt, 1/math.Sqrt(fan), c.w...)
	if c.bias {
		r.hb = randHost(rng, dt, 0.5, c.w[0])
	}
	p := tensor.ConvParams{Stride: c.stride, Padding: c.pad}
	r.outShape = []int{c.x[0], c.w[0]}
	for i := 0; i < 3; i++ {
		r.outShape = append(r.outShape, (c.x[2+i]+2*c.pad[i]-c.w[2+i])/c.stride[i]+1)
	}
	r.want = tensor.New(dt, r.outShape...)
	if err := cpu.New().Conv3d(r.want, r.hx, r.hw, r.hb, p); err != nil {
		t.Fatal(err)
	}
	return r
}

// run convolves on be and returns the relative L2 error against the CPU.
func (r *convRun) run(t testing.TB, be tensor.Backend) float64 {
	t.Helper()
	x, w := upload(t, be, r.hx), upload(t, be, r.hw)
	var b *tensor.Tensor
	if r.hb != nil {
		b = upload(t, be, r.hb)
	}
	dst, err := tensor.Alloc(be, r.dt, r.outShape...)
	if err != nil {
		t.Fatal(err)
	}
	defer tensor.Release(dst)
	if err := be.Fill(dst, math.NaN()); err != nil { // poison: every element must be written
		t.Fatal(err)
	}
	if err := be.Conv3d(dst, x, w, b, tensor.ConvParams{Stride: r.c.stride, Padding: r.c.pad}); err != nil {
		t.Fatalf("conv3d: %v", err)
	}
	return numcmp.RelL2(tensor.Float32s(dst), r.want.ToFloat32())
}

// TestTiersAlone runs each tier alone (the others fail by injected faults)
// on VAE-like shapes in f32, f16 and bf16 against the CPU.
func TestTiersAlone(t *testing.T) {
	g := newGPU(t, Options{Log: quiet})
	for _, tier := range []string{"optimized", "gemm", "naive", "cpu"} {
		for _, dt := range []tensor.DType{tensor.F32, tensor.F16, tensor.BF16} {
			for i, c := range vaeLike {
				name := fmt.Sprintf("%s/%s/%s", tier, dt, c.name)
				if tier == "cpu" && dt != tensor.F32 && i > 2 {
					continue // the CPU tier is the CPU backend itself
				}
				t.Run(name, func(t *testing.T) {
					for _, layout := range []Layout{LayoutAuto, LayoutNCDHW} {
						if layout != LayoutAuto && tier != "optimized" {
							continue
						}
						be := wrapped(t, g, ConvOptions{Faults: only(tier), ChunkBytes: c.chunkBytes, Layout: layout})
						r := newConvRun(t, c, dt, uint64(i))
						e := r.run(t, be)
						s := be.Chain().Summary()
						ran := ""
						for _, ts := range s {
							if ts.Convs > 0 {
								ran = ts.Tier
							}
						}
						t.Logf("%s layout %q: rel_l2 %.2e on tier %q", name, layout, e, ran)
						if ran != tier {
							t.Errorf("ran on tier %q, want %q", ran, tier)
						}
						if !(e <= limit(dt)) {
							t.Errorf("layout %q: rel_l2 %.3e > %.1e", layout, e, limit(dt))
						}
					}
				})
			}
		}
	}
}

// TestFaultsOnRealTiers injects each fault into the real tiers: the chain
// moves on and the output stays the CPU's.
func TestFaultsOnRealTiers(t *testing.T) {
	g := newGPU(t, Options{Log: quiet})
	c := vaeLike[0]
	for _, tc := range []struct {
		faults string
		want   string // the tier that must run
	}{
		{"", "optimized"},
		{"conv3d.optimized=hang", "optimized"}, // planned without its search after the timeout
		{"conv3d.optimized=error", "gemm"},
		{"conv3d.optimized=oom", "gemm"},
		{"conv3d.optimized=naive", "gemm"},
		{"conv3d.optimized=error,conv3d.gemm=hang", "gemm"},
		{"conv3d.optimized=oom,conv3d.gemm=oom", "naive"},
		{"conv3d.optimized=error,conv3d.gemm=error,conv3d.naive=error", "cpu"},
		{"alloc.nth=5", "optimized"}, // its first scratch tensor: the chunk shrinks
	} {
		t.Run(tc.faults, func(t *testing.T) {
			f, err := convchain.ParseFaults(tc.faults)
			if err != nil {
				t.Fatal(err)
			}
			be := wrapped(t, g, ConvOptions{Faults: f, SearchDeadline: 3 * time.Second})
			r := newConvRun(t, c, tensor.F16, 11)
			start := time.Now()
			var e float64
			e = r.run(t, be)
			el := time.Since(start)
			var ran []string
			for _, ts := range be.Chain().Summary() {
				if ts.Convs > 0 {
					ran = append(ran, ts.Tier)
				}
				t.Log(ts.String())
			}
			t.Logf("%q: rel_l2 %.2e, tiers %v, %v", tc.faults, e, ran, el.Round(time.Millisecond))
			if !(e <= limit(tensor.F16)) {
				t.Errorf("rel_l2 %.3e", e)
			}
			if tc.want != "" && (len(ran) != 1 || ran[0] != tc.want) {
				t.Errorf("ran on %v, want %s", ran, tc.want)
			}
			if strings.Contains(tc.faults, "hang") && el > 3*time.Second+time.Second+2*time.Second {
				t.Errorf("a hung search took %v (deadline 3 s)", el)
			}
		})
	}
}

// TestHungSearchManyShapes: with the search of every real tier hanging,
// every VAE-like shape in every layout runs (the optimized tier, from its
// heuristics) and the whole costs one search deadline, plus the work, not
// one per shape.
func TestHungSearchManyShapes(t *testing.T) {
	g := newGPU(t, Options{Log: quiet})
	const deadline = 3 * time.Second
	f, err := convchain.ParseFaults("conv3d.optimized=hang,conv3d.gemm=hang,conv3d.naive=hang,conv3d.cpu=hang")
	if err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	be := wrapped(t, g, ConvOptions{Faults: f, SearchDeadline: deadline, Log: slog.New(slog.NewTextHandler(&log, nil))})
	// The same work on a chain without faults (no search on NVIDIA) is
	// the baseline: the hangs may add one deadline to it, plus 1 s.
	all := func(be tensor.Backend) (time.Duration, int) {
		start, n := time.Now(), 0
		for _, dt := range []tensor.DType{tensor.F32, tensor.F16, tensor.BF16} {
			for i, c := range vaeLike {
				if e := newConvRun(t, c, dt, uint64(i)).run(t, be); !(e <= limit(dt)) {
					t.Errorf("%s %s: rel_l2 %.3e", c.name, dt, e)
				}
				n++
			}
		}
		return time.Since(start), n
	}
	all(wrapped(t, g, ConvOptions{Search: SearchOff})) // warms the kernels and the library
	plain, _ := all(wrapped(t, g, ConvOptions{Search: SearchOff}))
	el, n := all(be)
	if el > deadline+plain+time.Second {
		t.Errorf("%d shapes with every search hanging took %v, want at most one %v deadline plus 1 s beyond the %v they take without faults", n, el, deadline, plain)
	}
	be.Chain().LogSummary()
	s := be.Chain().Summary()[0]
	if s.Tier != "optimized" || !s.SearchTimedOut || s.Searches != 1 || s.Convs != n {
		t.Fatalf("optimized tier: %+v", s)
	}
	for _, line := range strings.Split(log.String(), "\n") {
		if strings.Contains(line, "search timed out once") {
			t.Logf("%s", line)
		}
	}
	t.Logf("%d shapes in %v with every search hanging (deadline %v; %v without faults)", n, el.Round(time.Millisecond), deadline, plain.Round(time.Millisecond))
}

func caseTiling(c *golden.Case) vae.Tiling {
	var p struct {
		H  int `json:"tile_sample_min_height"`
		W  int `json:"tile_sample_min_width"`
		SH int `json:"tile_sample_stride_height"`
		SW int `json:"tile_sample_stride_width"`
	}
	c.Param("tiling", &p)
	til := vae.SpatialTiling(p.H, p.SH)
	til.TileWidth, til.TileStrideWidth = p.W, p.SW
	return til
}

// TestGoldenDecodeGPU decodes the golden VAE cases on the GPU through the
// chain, without faults and with each fault on the real tiers, in f32
// (golden tolerance) and, without faults, in f16 and bf16 (the CPU's bounds).
func TestGoldenDecodeGPU(t *testing.T) {
	g := newGPU(t, Options{Log: quiet})
	cases := golden.Cases(t, "vae.decode")
	cases = append(cases, golden.Cases(t, "vae.decode_tiled")...)
	for _, faults := range []string{"", "conv3d.optimized=hang", "conv3d.optimized=error", "conv3d.optimized=oom",
		"conv3d.optimized=naive", "conv3d.optimized=error,conv3d.gemm=oom", "conv3d.optimized=error,conv3d.gemm=error,conv3d.naive=error"} {
		for i, c := range cases {
			if strings.Contains(faults, "hang") && i > 0 {
				continue // a hung search per convolution shape: one case is enough
			}
			dts := []tensor.DType{tensor.F32}
			if faults == "" {
				dts = append(dts, tensor.F16, tensor.BF16)
			}
			for _, dt := range dts {
				t.Run(fmt.Sprintf("%s/%s/%s", c.Name, dt, faults), func(t *testing.T) {
					f, err := convchain.ParseFaults(faults)
					if err != nil {
						t.Fatal(err)
					}
					be := wrapped(t, g, ConvOptions{Faults: f, SearchDeadline: time.Second})
					v, err := vae.Load(c.ModelDir, be, vae.Options{DType: dt})
					if err != nil {
						t.Fatal(err)
					}
					defer v.Close()
					opts := vae.DefaultDecode()
					if c.Component == "vae.decode_tiled" {
						opts = vae.DecodeOptions{Tiling: caseTiling(c)}
					}
					s := tensor.NewScope(be)
					defer s.Close()
					var out *tensor.Tensor
					if err := tensor.Catch(func() { out = v.Decode(s, c.Tensor("z"), opts) }); err != nil {
						t.Fatal(err)
					}
					if dt == tensor.F32 {
						c.Compare(t, "sample", out)
					} else {
						lim := 5e-3
						if dt == tensor.BF16 {
							lim = 3e-2
						}
						c.CompareWith(t, "sample", out, golden.Limit{RelL2: lim, HasRelL2: true})
					}
					for _, ts := range be.Chain().Summary() {
						if ts.Convs > 0 {
							t.Log(ts.String())
						}
					}
				})
			}
		}
	}
}

// TestConvSpeed times the released VAE decoder's convolutions (one
// frame-wise tile: 5 latent frames, 544×704 pixels) in f16 on each path:
// the chain's vendor tier channels-last and NCDHW, the GPU backend's own
// Conv3d, and the GEMM tier. FRAMEPACK_CONV_SPEED=1 runs it.
func TestConvSpeed(t *testing.T) {
	if os.Getenv("FRAMEPACK_CONV_SPEED") == "" {
		t.Skip("FRAMEPACK_CONV_SPEED=1 times the VAE's convolutions")
	}
	g := newGPU(t, Options{Log: quiet})
	shapes := []struct {
		name string
		x, w []int
		gemm bool
	}{
		{"mid 512->512", []int{1, 512, 7, 70, 90}, []int{512, 512, 3, 3, 3}, true},
		{"up1 512->512", []int{1, 512, 11, 138, 178}, []int{512, 512, 3, 3, 3}, false},
		{"up2 512->256", []int{1, 512, 19, 274, 354}, []int{256, 512, 3, 3, 3}, false},
		{"up2 256->256", []int{1, 256, 19, 274, 354}, []int{256, 256, 3, 3, 3}, true},
		{"up3 256->128", []int{1, 256, 19, 546, 706}, []int{128, 256, 3, 3, 3}, false},
		{"up3 128->128", []int{1, 128, 19, 546, 706}, []int{128, 128, 3, 3, 3}, true},
		{"out 128->3", []int{1, 128, 19, 546, 706}, []int{3, 128, 3, 3, 3}, false},
		{"shortcut 512->256 k1", []int{1, 512, 17, 272, 352}, []int{256, 512, 1, 1, 1}, false},
	}
	for _, sh := range shapes {
		rng := rand.New(rand.NewPCG(1, 2))
		hx := randHost(rng, tensor.F16, 1, sh.x...)
		hw := randHost(rng, tensor.F16, 0.02, sh.w...)
		hb := randHost(rng, tensor.F16, 0.1, sh.w[0])
		out := []int{1, sh.w[0], sh.x[2] - sh.w[2] + 1, sh.x[3] - sh.w[3] + 1, sh.x[4] - sh.w[4] + 1}
		flops := 2 * float64(tensor.Numel(out)) * float64(tensor.Numel(sh.w[1:]))
		paths := []struct {
			name string
			be   tensor.Backend
		}{
			{"ndhwc", wrapped(t, g, ConvOptions{Layout: LayoutNDHWC})},
			{"ncdhw", wrapped(t, g, ConvOptions{Layout: LayoutNCDHW})},
			{"gpu.Conv3d", g},
		}
		if sh.gemm {
			paths = append(paths, struct {
				name string
				be   tensor.Backend
			}{"gemm", wrapped(t, g, ConvOptions{Faults: only("gemm")})})
		}
		x, w, b := upload(t, g, hx), upload(t, g, hw), upload(t, g, hb)
		dst, err := tensor.Alloc(g, tensor.F16, out...)
		if err != nil {
			t.Fatal(err)
		}
		var ref []float32
		line := fmt.Sprintf("%-22s %6.2f TFLOP", sh.name, flops/1e12)
		for _, p := range paths {
			run := func() error { return p.be.Conv3d(dst, x, w, b, tensor.ConvParams{}) }
			if err := run(); err != nil {
				line += fmt.Sprintf(" | %s: %v", p.name, err)
				continue
			}
			g.ResetPeak()
			var ts []float64
			for i := 0; i < 3; i++ {
				g.Sync()
				t0 := time.Now()
				if err := run(); err != nil {
					t.Fatal(err)
				}
				if err := g.Sync(); err != nil {
					t.Fatal(err)
				}
				ts = append(ts, time.Since(t0).Seconds())
			}
			slices.Sort(ts)
			got := tensor.Float32s(dst)
			e := 0.0
			if ref == nil {
				ref = got
			} else {
				e = numcmp.RelL2(got, ref)
			}
			extra := g.Stats().Peak - (x.Bytes() + w.Bytes() + b.Bytes() + dst.Bytes())
			line += fmt.Sprintf(" | %s %.1f ms %.0f TFLOP/s (+%.0f MiB, err %.0e)", p.name, ts[1]*1e3, flops/ts[1]/1e12, float64(extra)/(1<<20), e)
		}
		tensor.Release(dst)
		t.Log(line)
	}
}

// TestPaddedConv runs Conv3dPadded (the VAE's causal convolutions) on the
// optimized tier, which packs through the padding, and on the GEMM tier,
// which gets a padded copy, against the CPU's Pad then Conv3d.
func TestPaddedConv(t *testing.T) {
	g := newGPU(t, Options{Log: quiet})
	for _, tc := range []struct {
		name   string
		x, w   []int
		pad    tensor.Padding
		stride [3]int
		zero   [3]int // the convolution's own zero padding
		chunk  int64
	}{
		{"causal_k3", []int{1, 16, 5, 9, 11}, []int{32, 16, 3, 3, 3}, tensor.Padding{Before: [3]int{2, 1, 1}, After: [3]int{0, 1, 1}, Mode: tensor.PadReplicate}, [3]int{1, 1, 1}, [3]int{}, 0},
		{"causal_k3_chunked", []int{1, 16, 7, 10, 6}, []int{16, 16, 3, 3, 3}, tensor.Padding{Before: [3]int{2, 1, 1}, After: [3]int{0, 1, 1}, Mode: tensor.PadReplicate}, [3]int{1, 1, 1}, [3]int{}, 30 << 10},
		{"causal_stride2", []int{1, 16, 5, 12, 12}, []int{16, 16, 3, 3, 3}, tensor.Padding{Before: [3]int{2, 1, 1}, After: [3]int{0, 1, 1}, Mode: tensor.PadReplicate}, [3]int{2, 2, 2}, [3]int{}, 0},
		{"zeros_and_own_pad", []int{2, 8, 4, 7, 9}, []int{8, 8, 3, 3, 3}, tensor.Padding{Before: [3]int{1, 2, 0}, After: [3]int{2, 0, 1}, Mode: tensor.PadZeros}, [3]int{1, 1, 1}, [3]int{1, 1, 1}, 0},
		{"rgb_out", []int{1, 24, 3, 8, 8}, []int{3, 24, 3, 3, 3}, tensor.Padding{Before: [3]int{2, 1, 1}, After: [3]int{0, 1, 1}, Mode: tensor.PadReplicate}, [3]int{1, 1, 1}, [3]int{}, 0},
		{"causal_upsample", []int{1, 16, 4, 5, 7}, []int{16, 16, 3, 3, 3}, tensor.Padding{Before: [3]int{2, 1, 1}, After: [3]int{0, 1, 1}, Mode: tensor.PadReplicate, Upsample: [3]int{2, 2, 2}, CausalFirst: true}, [3]int{1, 1, 1}, [3]int{}, 0},
		{"spatial_upsample_chunked", []int{1, 16, 5, 6, 5}, []int{16, 16, 3, 3, 3}, tensor.Padding{Before: [3]int{2, 1, 1}, After: [3]int{0, 1, 1}, Mode: tensor.PadReplicate, Upsample: [3]int{1, 2, 2}, CausalFirst: true}, [3]int{1, 1, 1}, [3]int{}, 40 << 10},
		// the time-doubling upsampler's convolution split into chunks (11 output frames)
		{"causal_upsample_chunked", []int{1, 16, 6, 6, 5}, []int{16, 16, 3, 3, 3}, tensor.Padding{Before: [3]int{2, 1, 1}, After: [3]int{0, 1, 1}, Mode: tensor.PadReplicate, Upsample: [3]int{2, 2, 2}, CausalFirst: true}, [3]int{1, 1, 1}, [3]int{}, 24 << 10},
	} {
		for _, dt := range []tensor.DType{tensor.F32, tensor.F16, tensor.BF16} {
			for _, tier := range []string{"optimized", "gemm"} {
				t.Run(fmt.Sprintf("%s/%s/%s", tc.name, dt, tier), func(t *testing.T) {
					rng := rand.New(rand.NewPCG(5, 6))
					hx := randHost(rng, dt, 1, tc.x...)
					hw := randHost(rng, dt, 0.1, tc.w...)
					hb := randHost(rng, dt, 0.5, tc.w[0])
					c := cpu.New()
					px, err := tc.pad.Materialize(c, hx)
					if err != nil {
						t.Fatal(err)
					}
					ps := px.Shape()
					p := tensor.ConvParams{Stride: tc.stride, Padding: tc.zero}
					out := []int{tc.x[0], tc.w[0]}
					for i := 0; i < 3; i++ {
						out = append(out, (ps[2+i]+2*tc.zero[i]-tc.w[2+i])/tc.stride[i]+1)
					}
					want := tensor.New(dt, out...)
					if err := c.Conv3d(want, px, hw, hb, p); err != nil {
						t.Fatal(err)
					}
					be := wrapped(t, g, ConvOptions{Faults: only(tier), ChunkBytes: tc.chunk})
					x, w, b := upload(t, be, hx), upload(t, be, hw), upload(t, be, hb)
					dst, err := tensor.Alloc(be, dt, out...)
					if err != nil {
						t.Fatal(err)
					}
					defer tensor.Release(dst)
					be.Fill(dst, math.NaN())
					if err := be.Conv3dPadded(dst, x, w, b, p, tc.pad); err != nil {
						t.Fatal(err)
					}
					e := numcmp.RelL2(tensor.Float32s(dst), want.ToFloat32())
					t.Logf("rel_l2 %.2e", e)
					if !(e <= limit(dt)) {
						t.Errorf("rel_l2 %.3e > %.1e", e, limit(dt))
					}
				})
			}
		}
	}
}

// TestChainOps runs the op suite's convolutions, padded ones included,
// through the GPU's conv3d chain (whichever tier takes each shape) against
// the CPU backend.
func TestChainOps(t *testing.T) {
	g := newGPU(t, Options{Log: quiet})
	be := wrapped(t, g, ConvOptions{})
	backendtest.Run(t, be, backendtest.Select("conv3d", "conv3d_padded", "conv3d_last")...)
	if tiers := be.Chain().Tiers(); slices.Contains(tiers, convchain.Conv2dTierName) {
		// An order that holds the conv2d tier (FRAMEPACK_CONV3D=conv2d): the
		// conv3d cases against float64 too.
		backendtest.ConvAgainstFloat64(t, be, "conv3d as conv2d: gpu "+strings.Join(tiers, ","))
	}
}

// TestChannelsLastConvTiers runs the op suite's channels-last convolutions
// on each tier alone: the optimized tier on the tensors as they are, the
// others on channels-first copies.
func TestChannelsLastConvTiers(t *testing.T) {
	g := newGPU(t, Options{Log: quiet})
	for _, tier := range []string{"optimized", "gemm", "naive", "cpu"} {
		t.Run(tier, func(t *testing.T) {
			be := wrapped(t, g, ConvOptions{Faults: only(tier)})
			backendtest.Run(t, be, backendtest.Select("conv3d_last")...)
			if s := convchain.ChainOf(be).Summary(); !slices.ContainsFunc(s, func(ts convchain.TierSummary) bool {
				return ts.Tier == tier && ts.Convs > 0
			}) {
				t.Errorf("no convolution ran on tier %s: %v", tier, s)
			}
		})
	}
	// The optimized tier with its searched plans (on NVIDIA the graph API's
	// engines timed beside the legacy algorithms).
	t.Run("optimized searched", func(t *testing.T) {
		be := wrapped(t, g, ConvOptions{Faults: only("optimized"), Search: SearchOn, SearchDeadline: time.Minute})
		backendtest.Run(t, be, backendtest.Select("conv3d_last")...)
	})
}

// TestConv2dTier runs the conv2d tier alone (3-D convolutions as the
// library's 2-D ones, one a temporal tap) in NHWC and NCHW: the conv3d
// cases and the VAEs' against float64 math, then the op suite's
// convolutions (through a padding, channels-last, adding to the output)
// against the CPU backend; also with MIOpen's way of summing the taps
// (scratch and one add, no β) and with chunks and pieces of few frames.
func TestConv2dTier(t *testing.T) {
	g := newGPU(t, Options{Log: quiet})
	for _, c := range []struct {
		name string
		o    ConvOptions
	}{
		{"nhwc", ConvOptions{Layout: LayoutNDHWC}},
		{"nchw", ConvOptions{Layout: LayoutNCDHW}},
		{"nhwc_added", ConvOptions{Layout: LayoutNDHWC, conv2dAdds: true}},
		{"nchw_added_small_chunks", ConvOptions{Layout: LayoutNCDHW, conv2dAdds: true, ChunkBytes: 16 << 10}},
		{"nhwc_small_chunks", ConvOptions{Layout: LayoutNDHWC, ChunkBytes: 16 << 10}},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := c.o
			o.Order = []string{convchain.Conv2dTierName}
			be := wrapped(t, g, o)
			backendtest.ConvAgainstFloat64(t, be, "conv3d as conv2d: gpu "+c.name)
			backendtest.Run(t, be, backendtest.Select("conv3d", "conv3d_padded", "conv3d_last")...)
			s := convchain.ChainOf(be).Summary()
			if len(s) != 1 || s[0].Tier != convchain.Conv2dTierName || s[0].Convs == 0 {
				t.Errorf("the conv2d tier did not run alone: %v", s)
			}
		})
	}
}
