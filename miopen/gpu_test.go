package miopen

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/framepack-go/framepack/internal/testutil/gputest"
)

// openGPU gives a device (skipping without one) and a handle on its stream
// (skipping, with the reason, when the convolution library is absent).
func openGPU(t testing.TB) (*gputest.Device, *Handle) {
	t.Helper()
	return gputest.OpenHandle(t, "convolution", OpenVendor, func(dev *gputest.Device, lib *Lib) (*Handle, error) {
		return lib.NewHandle(dev.Stream)
	})
}

// conv3dRef is the float64 cross-correlation on logical NCDHW arrays.
func conv3dRef(d ConvDesc, x, w []float64) []float64 {
	d = d.norm()
	do, ho, wo := d.OutDims()
	y := make([]float64, d.YElems())
	var wg sync.WaitGroup
	for n := range d.N {
		for k := range d.K {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for od := range do {
					for oh := range ho {
						for ow := range wo {
							var s float64
							for c := range d.C {
								for kd := range d.KD {
									id := od*d.Stride[0] - d.Pad[0] + kd*d.Dilation[0]
									if id < 0 || id >= d.D {
										continue
									}
									for kh := range d.KH {
										ih := oh*d.Stride[1] - d.Pad[1] + kh*d.Dilation[1]
										if ih < 0 || ih >= d.H {
											continue
										}
										xr := (((n*d.C+c)*d.D+id)*d.H + ih) * d.W
										wr := (((k*d.C+c)*d.KD+kd)*d.KH + kh) * d.KW
										for kw := range d.KW {
											iw := ow*d.Stride[2] - d.Pad[2] + kw*d.Dilation[2]
											if iw < 0 || iw >= d.W {
												continue
											}
											s += x[xr+iw] * w[wr+kw]
										}
									}
								}
							}
							y[(((n*d.K+k)*do+od)*ho+oh)*wo+ow] = s
						}
					}
				}
			}()
		}
	}
	wg.Wait()
	return y
}

// toLayout reorders a logical (A, B, C, D, E) array — (N, C, D, H, W) or
// (K, C, kD, kH, kW) — into l's storage order; fromLayout undoes it.
func toLayout(v []float64, s [5]int, l Layout) []float64 { return relayout(v, s, l, true) }

func fromLayout(v []float64, s [5]int, l Layout) []float64 { return relayout(v, s, l, false) }

// relayout moves the channel axis B of v last (toStorage) or back from last
// when l is NDHWC.
func relayout(v []float64, s [5]int, l Layout, toStorage bool) []float64 {
	if l == NCDHW {
		return v
	}
	out := make([]float64, len(v))
	inner := s[2] * s[3] * s[4]
	for a := range s[0] {
		for c := range s[1] {
			for p := range inner {
				last, first := (a*inner+p)*s[1]+c, (a*s[1]+c)*inner+p
				if toStorage {
					out[last] = v[first]
				} else {
					out[first] = v[last]
				}
			}
		}
	}
	return out
}

// tolerance is gputest.Tolerance with 5e-5 for f32 convolutions.
func tolerance(dt DType, fast bool) float64 { return gputest.Tolerance(dt, fast, 5e-5) }

func convCases() []ConvDesc {
	p1 := [3]int{1, 1, 1}
	return []ConvDesc{
		{N: 2, C: 16, D: 5, H: 9, W: 11, K: 24, KD: 3, KH: 3, KW: 3, Pad: p1},                                      // 3×3×3, odd spatial
		{N: 1, C: 64, D: 6, H: 16, W: 16, K: 64, KD: 3, KH: 3, KW: 3, Pad: [3]int{0, 1, 1}},                        // VAE-like, causal pad outside
		{N: 1, C: 8, D: 7, H: 12, W: 10, K: 16, KD: 3, KH: 3, KW: 3, Stride: [3]int{2, 2, 2}, Pad: p1},             // stride 2
		{N: 1, C: 16, D: 4, H: 9, W: 9, K: 16, KD: 3, KH: 3, KW: 3, Stride: [3]int{1, 2, 2}, Pad: [3]int{0, 0, 0}}, // VAE downsample
		{N: 1, C: 32, D: 3, H: 7, W: 5, K: 48, KD: 1, KH: 1, KW: 1},                                                // 1×1×1
		{N: 1, C: 3, D: 5, H: 10, W: 9, K: 8, KD: 3, KH: 3, KW: 3, Pad: p1},                                        // RGB in
		{N: 1, C: 12, D: 3, H: 7, W: 13, K: 3, KD: 3, KH: 3, KW: 3, Pad: p1},                                       // RGB out
	}
}

// Every case, layout and dtype against float64 math on the same rounded
// inputs.
func TestConv3dAgainstFloat64(t *testing.T) {
	dev, h := openGPU(t)
	rng := rand.New(rand.NewPCG(11, 12))
	worst := map[string]float64{}
	eachConv([]DType{F32, F16, BF16}, func(d ConvDesc) {
		p, e, ok := checkConv(t, dev, h, rng, d, 0)
		if !ok {
			return
		}
		key := fmt.Sprintf("%v %v", d.DType, d.Layout)
		worst[key] = max(worst[key], e)
		if e > tolerance(d.DType, false) {
			t.Errorf("%v: %v: rel L2 %.3g > %.3g", d, p, e, tolerance(d.DType, false))
		}
		if p.IsNaive {
			t.Logf("%v: naive solver chosen", d)
		}
	})
	for k, v := range worst {
		t.Logf("%s: worst rel L2 %.3g over %d shapes", k, v, len(convCases()))
	}
}

// TestConv3dAccumulate: an accumulating convolution adds to what y holds
// (NVIDIA, with either API; MIOpen refuses it).
func TestConv3dAccumulate(t *testing.T) {
	dev, h := openGPU(t)
	defer h.SetConvAPI(ConvAPIAuto)
	for _, api := range []ConvAPI{ConvAPIAuto, ConvAPILegacy} {
		h.SetConvAPI(api)
		accumulate(t, dev, h)
	}
}

func accumulate(t *testing.T, dev *gputest.Device, h *Handle) {
	rng := rand.New(rand.NewPCG(15, 16))
	eachConv([]DType{F32, F16}, func(d ConvDesc) {
		d.Accumulate = true
		if h.Lib().Vendor() == AMD {
			if _, err := h.Plan(d); err == nil {
				t.Errorf("%v: MIOpen planned an accumulating convolution", d)
			}
			return
		}
		if p, e, ok := checkConv(t, dev, h, rng, d, 0); ok && e > tolerance(d.DType, false) {
			t.Errorf("%v: %v: rel L2 %.3g > %.3g", d, p, e, tolerance(d.DType, false))
		}
	})
}

// eachConv calls fn with every case of convCases in each of dts and both
// layouts.
func eachConv(dts []DType, fn func(ConvDesc)) {
	for _, base := range convCases() {
		for _, dt := range dts {
			for _, l := range []Layout{NCDHW, NDHWC} {
				d := base
				d.DType, d.Layout = dt, l
				fn(d)
			}
		}
	}
}

// checkConv plans d and runs it on random inputs rounded to d.DType (each
// tensor off bytes past an allocation's start) and gives the plan and the
// relative L2 error against float64 math; the output is poisoned first so
// an unwritten element fails. ok is false when it reported an error.
func checkConv(t *testing.T, dev *gputest.Device, h *Handle, rng *rand.Rand, d ConvDesc, off int) (p Plan, relL2 float64, ok bool) {
	t.Helper()
	dt, l := d.DType, d.Layout
	xs := [5]int{d.N, d.C, d.D, d.H, d.W}
	ws := [5]int{d.K, d.C, d.KD, d.KH, d.KW}
	do, ho, wo := d.OutDims()
	ys := [5]int{d.N, d.K, do, ho, wo}
	x, _ := gputest.Random(rng, dt, int(d.XElems()))
	w, _ := gputest.Random(rng, dt, int(d.WElems()))
	want := conv3dRef(d, x, w)
	p, err := h.Plan(d)
	if err != nil {
		t.Errorf("%v: plan: %v", d, err)
		return p, 0, false
	}
	upload := func(b []byte) uintptr {
		ptr := dev.Alloc(t, int64(len(b)+off)) + uintptr(off)
		dev.Write(t, ptr, b)
		return ptr
	}
	xp := upload(gputest.Encode(dt, toLayout(x, xs, l)))
	wp := upload(gputest.Encode(dt, toLayout(w, ws, l)))
	yBytes := int(d.YElems()) * dt.Size()
	yp := dev.Alloc(t, int64(yBytes+off)) + uintptr(off)
	dev.Poison(t, yp, int64(yBytes))
	if d.Accumulate { // y holds values the convolution is added to
		y0, _ := gputest.Random(rng, dt, int(d.YElems()))
		dev.Write(t, yp, gputest.Encode(dt, toLayout(y0, ys, l)))
		for i := range want {
			want[i] += y0[i]
		}
	}
	var wsp, bp uintptr
	if p.WorkspaceBytes > 0 {
		wsp = dev.Alloc(t, p.WorkspaceBytes)
	}
	var bias []float64
	if d.Bias {
		var bb []byte
		bias, bb = gputest.Random(rng, dt, d.K)
		bp = upload(bb)
	}
	added, err := h.Conv3dForwardBias(d, xp, wp, bp, yp, wsp)
	if err != nil {
		t.Errorf("%v: %v", d, err)
		return p, 0, false
	}
	if added != (p.AddsBias && graphAligned(xp, wp, yp, bp)) {
		t.Errorf("%v: %v: bias added %v", d, p, added)
	}
	if added { // (N, K, spatial) in the logical order of want
		per := len(want) / (d.N * d.K)
		for i := range want {
			want[i] += bias[i/per%d.K]
		}
	}
	got := fromLayout(gputest.Decode(dt, dev.Download(t, yp, yBytes)), ys, l)
	return p, gputest.RelL2(got, want), true
}

// Plans are cached per shape, PlanWith takes a remembered choice, a
// workspace limit is honoured, fast f32 is opt-in, and Search (opt-in)
// returns measured choices that compute the same result.
func TestConv3dPlans(t *testing.T) {
	dev, h := openGPU(t)
	rng := rand.New(rand.NewPCG(13, 14))
	d := ConvDesc{N: 1, C: 32, D: 5, H: 12, W: 14, K: 32, KD: 3, KH: 3, KW: 3, Pad: [3]int{1, 1, 1}, DType: F32, Layout: NCDHW}
	x, xb := gputest.Random(rng, gputest.F32, int(d.XElems()))
	w, wb := gputest.Random(rng, gputest.F32, int(d.WElems()))
	want := conv3dRef(d, x, w)
	xp, wp := dev.Upload(t, xb), dev.Upload(t, wb)
	yBytes := int(d.YElems()) * 4
	yp := dev.Alloc(t, int64(yBytes))
	wsp := dev.Alloc(t, 1<<30)
	run := func(what string, tol float64) {
		t.Helper()
		dev.Poison(t, yp, int64(yBytes))
		if err := h.Conv3dForward(d, xp, wp, yp, wsp); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		e := gputest.RelL2(gputest.Decode(gputest.F32, dev.Download(t, yp, yBytes)), want)
		p, _ := h.Plan(d)
		t.Logf("%s: %v: rel L2 %.3g", what, p, e)
		if e > tol {
			t.Errorf("%s: rel L2 %.3g > %.3g", what, e, tol)
		}
	}

	p1, err := h.Plan(d)
	if err != nil {
		t.Fatal(err)
	}
	p2, _ := h.Plan(d)
	if p1 != p2 {
		t.Errorf("second Plan differs: %v vs %v", p1, p2)
	}
	run("heuristic", tolerance(F32, false))

	// PlanWith takes what Plan chose: a MIOpen solution, a cuDNN legacy
	// algorithm or graph-API plan; on NVIDIA the legacy API's choice too.
	given := func(chosen Plan) {
		t.Helper()
		id := chosen.SolutionID
		if h.lib.vendor == NVIDIA {
			id = uint64(chosen.Algo)
		}
		p, err := h.PlanWith(d, id)
		if err != nil {
			t.Fatalf("PlanWith(%v): %v", chosen, err)
		}
		if p.Source != "given" || p.Name != chosen.Name {
			t.Errorf("PlanWith: %v, want %s given", p, chosen.Name)
		}
		run("given "+chosen.Name, tolerance(F32, false))
	}
	given(p1)
	if h.lib.vendor == NVIDIA && p1.Source == "graph" {
		api := h.convAPI
		h.SetConvAPI(ConvAPILegacy)
		legacy, err := h.Plan(d)
		if err != nil {
			t.Fatalf("legacy plan: %v", err)
		}
		h.SetConvAPI(api)
		given(legacy)
	}

	h.SetWorkspaceLimit(1)
	if p, err := h.Plan(d); err != nil {
		t.Logf("no algorithm within 1 byte of workspace: %v", err)
	} else {
		if p.WorkspaceBytes > 1 {
			t.Errorf("workspace limit 1 B: plan %v", p)
		}
		run("workspace ≤ 1 B", tolerance(F32, false))
	}
	h.SetWorkspaceLimit(0)

	h.SetFastF32(true)
	run("fast f32", tolerance(F32, true))
	h.SetFastF32(false)

	// With a timer, a search on NVIDIA times the graph API's engines too;
	// whichever is fastest becomes the plan, and PlanWith takes it again.
	h.SetTimer(func(run func() error) (float32, error) {
		if err := run(); err != nil {
			return 0, err
		}
		dev.Sync(t)
		start := time.Now()
		err := run()
		dev.Sync(t)
		return float32(time.Since(start).Seconds() * 1e3), err
	})
	defer h.SetTimer(nil)
	plans, err := h.Search(d, xp, wp, yp, wsp, 1<<30)
	if err != nil {
		t.Fatalf("Search: %v", err)
	}
	graph := 0
	for _, p := range plans {
		t.Logf("search: %v %.3f ms", p, p.TimeMs)
		if graphRank(p.Algo) >= 0 {
			graph++
		}
	}
	if h.lib.vendor == NVIDIA && h.lib.graph && graph == 0 {
		t.Error("the search timed no engine of the graph API")
	}
	run("search best", tolerance(F32, false))
	if best, _ := h.Plan(d); best.Name != plans[0].Name {
		t.Errorf("after the search the plan is %v, want the fastest, %v", best, plans[0])
	} else {
		given(best)
	}
}

// VAE-sized convolutions: 512→512 channels, 3×3×3, five output frames from
// seven (the causal padding is applied outside), as the decoder runs them.
func BenchmarkConv3dVAE(b *testing.B) {
	dev, h := openGPU(b)
	const c, maxHW = 512, 136
	x := dev.Upload(b, gputest.Tiled(gputest.F32, c*7*maxHW*maxHW/2)) // bytes for a 2-byte dtype
	w := dev.Upload(b, gputest.Tiled(gputest.F32, c*c*27/2))
	y := dev.Alloc(b, c*5*maxHW*maxHW*2)
	for _, hw := range []int{68, 136} {
		for _, dt := range []DType{BF16, F16} {
			for _, l := range []Layout{NDHWC, NCDHW} {
				d := ConvDesc{N: 1, C: c, D: 7, H: hw, W: hw, K: c, KD: 3, KH: 3, KW: 3,
					Pad: [3]int{0, 1, 1}, DType: dt, Layout: l}
				b.Run(fmt.Sprintf("%dx%d-%v-%v", hw, hw, dt, l), func(b *testing.B) {
					dev.Bind(b)
					dev.Write(b, x, gputest.Tiled(dt, int(d.XElems())))
					dev.Write(b, w, gputest.Tiled(dt, int(d.WElems())))
					p, err := h.Plan(d)
					if err != nil {
						b.Fatal(err)
					}
					var ws uintptr
					if p.WorkspaceBytes > 0 {
						ws = dev.Alloc(b, p.WorkspaceBytes)
					}
					for range 3 {
						if err := h.Conv3dForward(d, x, w, y, ws); err != nil {
							b.Fatal(err)
						}
					}
					dev.Sync(b)
					b.ResetTimer()
					for range b.N {
						if err := h.Conv3dForward(d, x, w, y, ws); err != nil {
							b.Fatal(err)
						}
					}
					dev.Sync(b)
					b.StopTimer()
					b.ReportMetric(d.FLOPs()*float64(b.N)/b.Elapsed().Seconds()/1e12, "TFLOP/s")
					b.ReportMetric(float64(p.WorkspaceBytes)/1e6, "ws-MB")
					b.Logf("%v: %v", d, p)
				})
			}
		}
	}
}

// TestConv2dAgainstFloat64: the 2-D path (TwoD: 4-d descriptors, a 2-d
// convolution) on the cases' frames, in NCHW and NHWC, every dtype, and
// adding to y on NVIDIA (cuDNN's β = 1; MIOpen refuses it), against
// float64 math.
func TestConv2dAgainstFloat64(t *testing.T) {
	dev, h := openGPU(t)
	rng := rand.New(rand.NewPCG(17, 18))
	worst := map[string]float64{}
	for _, acc := range []bool{false, true} {
		eachConv([]DType{F32, F16, BF16}, func(d ConvDesc) {
			d.TwoD, d.D, d.KD, d.Stride[0], d.Pad[0], d.Accumulate = true, 1, 1, 1, 0, acc
			if acc && h.Lib().Vendor() == AMD {
				if _, err := h.Plan(d); err == nil {
					t.Errorf("%v: MIOpen planned an accumulating convolution", d)
				}
				return
			}
			p, e, ok := checkConv(t, dev, h, rng, d, 0)
			if !ok {
				return
			}
			key := fmt.Sprintf("%v %v accumulate %v", d.DType, d.Layout, acc)
			worst[key] = max(worst[key], e)
			if e > tolerance(d.DType, false) {
				t.Errorf("%v: %v: rel L2 %.3g > %.3g", d, p, e, tolerance(d.DType, false))
			}
		})
	}
	for k, v := range worst {
		t.Logf("conv2d %s: worst rel L2 %.3g over %d shapes", k, v, len(convCases()))
	}
}
