//go:build cgo

package miopen

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/framepack-go/framepack/internal/testutil/gputest"
)

// openGraphGPU is openGPU on NVIDIA, skipping elsewhere; cuDNN 9 (the only
// one this package loads) must have its graph API.
func openGraphGPU(t *testing.T) (*gputest.Device, *Handle) {
	t.Helper()
	dev, h := openGPU(t)
	if h.lib.vendor != NVIDIA {
		t.Skipf("%v: the graph API is cuDNN's", h.lib)
	}
	if !h.lib.graph {
		t.Fatalf("%v: the graph API did not load", h.lib)
	}
	return dev, h
}

// By default (ConvAPIAuto) cuDNN plans every case, layout and dtype with
// its graph API, strict and fast f32 included, and matches float64 math;
// the legacy API stays one call away.
func TestConv3dGraph(t *testing.T) {
	dev, h := openGraphGPU(t)
	h.SetConvAPI(ConvAPIAuto)
	rng := rand.New(rand.NewPCG(21, 22))
	engines := map[string]int{}
	for _, fast := range []bool{false, true} {
		h.SetFastF32(fast)
		dts := []DType{F32, F16, BF16}
		if fast {
			dts = []DType{F32}
		}
		eachConv(dts, func(d ConvDesc) {
			p, e, ok := checkConv(t, dev, h, rng, d, 0)
			if !ok {
				return
			}
			engines[p.Name]++
			if p.Source != "graph" || graphRank(p.Algo) != 0 || !strings.HasPrefix(p.Name, "cuDNN engine ") {
				t.Errorf("%v: plan %v (algo %d), want a graph engine; fallback: %s", d, p, p.Algo, p.Fallback)
			}
			if tol := tolerance(d.DType, fast); !(e <= tol) {
				t.Errorf("%v (fast f32 %v): %v: rel L2 %.3g > %.3g", d, fast, p, e, tol)
			}
		})
	}
	h.SetFastF32(false)
	t.Logf("engines chosen: %v", engines)

	d := convCases()[1]
	d.DType, d.Layout = F16, NDHWC
	// Tensors 2 bytes off the graph's 16-byte alignment run a legacy
	// algorithm in the same workspace.
	if p, e, ok := checkConv(t, dev, h, rng, d, 2); ok {
		l := h.plans[d.norm()].legacy
		switch {
		case l == nil || l.WorkspaceBytes > p.WorkspaceBytes:
			t.Errorf("%v: misaligned tensors with %v ran %v, want a legacy algorithm within %d B", d, p, l, p.WorkspaceBytes)
		case !(e <= tolerance(F16, false)):
			t.Errorf("%v: misaligned tensors with %v ran %v: rel L2 %.3g", d, p, *l, e)
		default:
			t.Logf("%v: misaligned tensors with %v ran %v: rel L2 %.3g", d, p, *l, e)
		}
	}

	// A bias as the graph's epilogue: added, and right, wherever an engine
	// takes the fused graph (checkConv checks that "added" tells the truth).
	fused := 0
	eachConv([]DType{F32, F16, BF16}, func(d ConvDesc) {
		d.Bias = true
		p, e, ok := checkConv(t, dev, h, rng, d, 0)
		if !ok {
			return
		}
		if p.AddsBias {
			fused++
		}
		if tol := tolerance(d.DType, false); !(e <= tol) {
			t.Errorf("%v: %v: rel L2 %.3g > %.3g", d, p, e, tol)
		}
	})
	t.Logf("bias fused in %d of %d plans", fused, 6*len(convCases()))
	if fused == 0 {
		t.Error("no engine took a convolution with its bias")
	}

	h.SetConvAPI(ConvAPILegacy)
	if p, err := h.Plan(d); err != nil || p.Source != "heuristic" {
		t.Errorf("ConvAPILegacy: %v, %v; want a _v7 plan", p, err)
	}
	h.SetConvAPI(ConvAPIGraph)
	if p, err := h.Plan(d); err != nil || p.Source != "graph" {
		t.Errorf("ConvAPIGraph: %v, %v; want a graph plan", p, err)
	}
	h.SetConvAPI(ConvAPIAuto)
}

// benchShapes are NDHWC f16 convolutions of the Wan VAE decoder (up to
// 480×832), whose engines TestConvEngineBench times.
var benchShapes = []struct {
	cin, cout int
	k         [3]int // kT, kH, kW
	t, h, w   int
	pad       [3]int
}{
	{16, 384, [3]int{3, 3, 3}, 3, 60, 104, [3]int{0, 1, 1}},
	{384, 384, [3]int{3, 3, 3}, 3, 60, 104, [3]int{0, 1, 1}},
	{384, 768, [3]int{3, 1, 1}, 3, 60, 104, [3]int{0, 0, 0}},
	{384, 192, [3]int{1, 3, 3}, 2, 120, 208, [3]int{0, 1, 1}},
	{192, 384, [3]int{3, 3, 3}, 4, 120, 208, [3]int{0, 1, 1}},
	{384, 384, [3]int{3, 3, 3}, 4, 120, 208, [3]int{0, 1, 1}},
	{192, 384, [3]int{1, 1, 1}, 2, 120, 208, [3]int{0, 0, 0}},
	{384, 768, [3]int{3, 1, 1}, 4, 120, 208, [3]int{0, 0, 0}},
	{384, 192, [3]int{1, 3, 3}, 4, 240, 416, [3]int{0, 1, 1}},
	{192, 192, [3]int{3, 3, 3}, 3, 240, 416, [3]int{0, 1, 1}},
	{192, 96, [3]int{1, 3, 3}, 1, 480, 832, [3]int{0, 1, 1}},
	{96, 96, [3]int{3, 3, 3}, 3, 480, 832, [3]int{0, 1, 1}},
	{96, 3, [3]int{3, 3, 3}, 3, 480, 832, [3]int{0, 1, 1}},
	{96, 96, [3]int{1, 3, 3}, 1, 480, 832, [3]int{0, 1, 1}},
	{96, 96, [3]int{2, 3, 3}, 2, 480, 832, [3]int{0, 1, 1}},
	{192, 192, [3]int{1, 3, 3}, 1, 240, 416, [3]int{0, 1, 1}},
	{192, 192, [3]int{2, 3, 3}, 2, 240, 416, [3]int{0, 1, 1}},
}

// benchResult is one plan's timing in TestConvEngineBench's JSON lines.
type benchResult struct {
	Name   string  `json:"name"`
	Rank   string  `json:"rank,omitempty"` // heuristics mode and place: "A#0"
	Ms     float64 `json:"ms"`
	TFLOPs float64 `json:"tflops"`
	WS     int64   `json:"ws_bytes"`
	Err    string  `json:"err,omitempty"`
}

// TestConvEngineBench times, for each of benchShapes, the legacy API's
// plan and the first 8 engine configurations of the graph API (the first
// is what Plan takes), and prints a JSON line per shape. Opt-in:
// FRAMEPACK_CONV_ENGINE_BENCH=1.
func TestConvEngineBench(t *testing.T) {
	if os.Getenv("FRAMEPACK_CONV_ENGINE_BENCH") != "1" {
		t.Skip("FRAMEPACK_CONV_ENGINE_BENCH=1 times cuDNN's graph engines against its legacy API")
	}
	dev, h := openGraphGPU(t)
	const wsLimit, engines = 1 << 30, 8 // the conv3d chain's workspace limit
	h.SetWorkspaceLimit(wsLimit)
	ws := dev.Alloc(t, wsLimit)
	for _, s := range benchShapes {
		for _, bias := range []bool{false, true} {
			d := ConvDesc{N: 1, C: s.cin, D: s.t, H: s.h, W: s.w, K: s.cout, KD: s.k[0], KH: s.k[1], KW: s.k[2],
				Pad: s.pad, DType: F16, Layout: NDHWC, Bias: bias}
			name := fmt.Sprintf("%d-%d-k%d%d%d-%dx%dx%d", s.cin, s.cout, s.k[0], s.k[1], s.k[2], s.t, s.h, s.w)
			if bias {
				name += "-bias"
			}
			t.Run(name, func(t *testing.T) {
				dev.Bind(t)
				x := dev.Upload(t, gputest.Tiled(F16, int(d.XElems())))
				w := dev.Upload(t, gputest.Tiled(F16, int(d.WElems())))
				b := dev.Upload(t, gputest.Tiled(F16, d.K))
				y := dev.Alloc(t, d.YElems()*2)
				// timed runs run 3 times, then 20 (3 when one takes over 50 ms)
				// and gives the mean.
				timed := func(r *benchResult, run func() error) {
					for range 3 {
						if err := run(); err != nil {
							r.Err = err.Error()
							return
						}
					}
					dev.Sync(t)
					n, start := 20, time.Now()
					if err := run(); err != nil {
						r.Err = err.Error()
						return
					}
					dev.Sync(t)
					if time.Since(start) > 50*time.Millisecond {
						n = 3
					}
					start = time.Now()
					for range n {
						if err := run(); err != nil {
							r.Err = err.Error()
							return
						}
					}
					dev.Sync(t)
					r.Ms = float64(time.Since(start).Nanoseconds()) / 1e6 / float64(n)
					r.TFLOPs = d.FLOPs() / (r.Ms * 1e-3) / 1e12
				}

				line := struct {
					Shape      string        `json:"shape"`
					GFLOP      float64       `json:"gflop"`
					Legacy     benchResult   `json:"legacy"`
					GraphFirst *benchResult  `json:"graph_first"`
					GraphBest  *benchResult  `json:"graph_best"`
					BestSpeed  float64       `json:"best_vs_legacy"`
					Engines    []benchResult `json:"engines"`
					Skipped    int           `json:"skipped"`
					FirstSkips []string      `json:"first_skipped,omitempty"`
				}{Shape: d.String(), GFLOP: d.FLOPs() / 1e9}

				h.SetConvAPI(ConvAPILegacy)
				if p, err := h.Plan(d); err != nil {
					line.Legacy.Err = err.Error()
				} else {
					line.Legacy.Name, line.Legacy.WS = p.Name, p.WorkspaceBytes
					timed(&line.Legacy, func() error { _, err := h.Conv3dForwardBias(d, x, w, b, y, ws); return err })
				}
				h.SetConvAPI(ConvAPIAuto)

				ce, err := h.graphConvEngines(d, engines)
				if err != nil {
					t.Errorf("%v: %v", d, err)
				} else {
					defer ce.free()
					line.Skipped = len(ce.skipped)
					line.FirstSkips = ce.skipped[:min(3, len(ce.skipped))]
					for i, c := range ce.list {
						r := benchResult{Name: c.plan.Name, Rank: c.rank, WS: c.plan.WorkspaceBytes}
						timed(&r, func() error { return ce.run(i, x, w, b, y, ws) })
						line.Engines = append(line.Engines, r)
					}
					if p, err := h.Plan(d); err != nil || len(ce.list) == 0 || p.Name != ce.list[0].plan.Name {
						t.Errorf("%v: Plan %v (%v), want the first engine listed", d, p, err)
					}
				}
				for i := range line.Engines {
					r := &line.Engines[i]
					if r.Err != "" {
						continue
					}
					if line.GraphFirst == nil {
						line.GraphFirst = r
					}
					if line.GraphBest == nil || r.Ms < line.GraphBest.Ms {
						line.GraphBest = r
					}
				}
				if line.GraphBest != nil && line.Legacy.Ms > 0 {
					line.BestSpeed = line.Legacy.Ms / line.GraphBest.Ms
				}
				js, _ := json.Marshal(line)
				fmt.Println(string(js))
				if line.GraphFirst != nil && line.GraphBest != nil {
					t.Logf("legacy %s %.3f ms; graph first %s %.3f ms; best %s (%s) %.3f ms, %.1f TFLOP/s",
						line.Legacy.Name, line.Legacy.Ms, line.GraphFirst.Name, line.GraphFirst.Ms,
						line.GraphBest.Name, line.GraphBest.Rank, line.GraphBest.Ms, line.GraphBest.TFLOPs)
				}
			})
		}
	}
}
