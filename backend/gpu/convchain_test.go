package gpu

import (
	"strings"
	"testing"

	"github.com/framepack-go/framepack/backend/cpu"
	"github.com/framepack-go/framepack/convchain"
	"github.com/framepack-go/framepack/hip"
	"github.com/framepack-go/framepack/memory"
	"github.com/framepack-go/framepack/miopen"
	"github.com/framepack-go/framepack/tensor"
)

func TestChunkFrames(t *testing.T) {
	k := convchain.KeyOf("", tensor.New(tensor.F16, 1, 128, 19, 546, 706), tensor.New(tensor.F16, 128, 128, 3, 3, 3), nil, tensor.ConvParams{})
	g, err := geomOf(k)
	if err != nil {
		t.Fatal(err)
	}
	if g.To != 17 || g.Ho != 544 || g.Wo != 704 {
		t.Fatalf("output %dx%dx%d", g.To, g.Ho, g.Wo)
	}
	for _, limit := range []int64{1, 64 << 20, DefaultChunkBytes, 1 << 40} {
		tc := g.chunkFrames(limit)
		if tc < 1 || tc > g.To {
			t.Fatalf("limit %d: %d frames", limit, tc)
		}
		if tc > 1 && g.scratch(tc) > limit {
			t.Errorf("limit %d: %d frames need %d bytes", limit, tc, g.scratch(tc))
		}
		if tc < g.To && g.scratch(tc+1) <= limit {
			t.Errorf("limit %d: %d frames chosen, %d fit", limit, tc, tc+1)
		}
	}
	if tc := g.chunkFrames(1 << 40); tc != 17 {
		t.Errorf("unbounded: %d frames, want all 17", tc)
	}
	// A chunk's desc: temporal padding is the packing's, the rest the
	// library's.
	k = convchain.KeyOf("", tensor.New(tensor.F16, 1, 16, 5, 9, 11), tensor.New(tensor.F16, 16, 16, 3, 3, 3), nil,
		tensor.ConvParams{Padding: [3]int{1, 1, 1}, Stride: [3]int{2, 2, 2}})
	g, _ = geomOf(k)
	d := g.desc(miopen.F16, miopen.NDHWC, 2)
	if d.D != 5 || d.Pad != [3]int{0, 1, 1} || g.To != 3 {
		t.Errorf("chunk desc %v, To %d", d, g.To)
	}
	if do, _, _ := d.OutDims(); do != 2 {
		t.Errorf("chunk of 2 frames computes %d", do)
	}
	if d := g.desc(miopen.F16, miopen.NCDHW, 0); d.D != 5 || d.Pad != [3]int{1, 1, 1} {
		t.Errorf("whole desc %v", d)
	}
}

func TestOptions(t *testing.T) {
	for s, want := range map[string]Layout{"": LayoutAuto, "auto": LayoutAuto, "NDHWC": LayoutNDHWC, "ncdhw": LayoutNCDHW} {
		if l, err := ParseLayout(s); err != nil || l != want {
			t.Errorf("ParseLayout(%q) = %q, %v", s, l, err)
		}
	}
	if _, err := ParseLayout("nhwc"); err == nil || !strings.Contains(err.Error(), "want auto, ncdhw or ndhwc") {
		t.Errorf("ParseLayout(nhwc): %v", err)
	}
	for _, tc := range []struct {
		mode string
		v    hip.Vendor
		want bool
	}{{"", hip.AMD, true}, {"", hip.NVIDIA, false}, {"on", hip.NVIDIA, true}, {"off", hip.AMD, false}} {
		if got, err := searchOn(tc.mode, tc.v); err != nil || got != tc.want {
			t.Errorf("searchOn(%q, %v) = %v, %v", tc.mode, tc.v, got, err)
		}
	}
	if _, err := searchOn("sometimes", hip.AMD); err == nil {
		t.Error("searchOn accepted a bad mode")
	}
	o := &ConvOptions{}
	if o.chunkBytes() != DefaultChunkBytes {
		t.Error("default chunk")
	}
	order := (&optimized{o: &ConvOptions{}}).layouts(geom{Cin: 128, Cout: 3})
	if len(order) != 2 || order[0] != miopen.NDHWC {
		t.Errorf("auto tries %v, want channels-last then NCDHW", order)
	}
	if order := (&optimized{o: &ConvOptions{Layout: LayoutNCDHW}}).layouts(geom{}); len(order) != 1 || order[0] != miopen.NCDHW {
		t.Errorf("ncdhw tries %v", order)
	}
	// Strict f32 on NVIDIA: NCDHW first (cuDNN's FMA engines on the
	// tensors as they are); other dtypes and AMD channels-last first.
	for _, c := range []struct {
		v    miopen.Vendor
		es   int
		want miopen.Layout
	}{{miopen.NVIDIA, 4, miopen.NCDHW}, {miopen.NVIDIA, 2, miopen.NDHWC}, {miopen.AMD, 4, miopen.NDHWC}} {
		order := (&optimized{handle: &handle{vendor: c.v}, o: &ConvOptions{}}).layouts(geom{Cin: 128, Cout: 128, es: c.es})
		if len(order) != 2 || order[0] != c.want {
			t.Errorf("auto on %v, %d-byte elements, tries %v, want %v first", c.v, c.es, order, c.want)
		}
	}
	if !(geom{kT: 1, kH: 1, kW: 1, st: [3]int{1, 1, 1}}).pointwise() || (geom{kT: 1, kH: 1, kW: 1, st: [3]int{1, 2, 2}}).pointwise() {
		t.Error("pointwise")
	}
}

// TestProfileHookAndChainOf times ops on the CPU through a Scope hook and
// finds a chain through a budget and the hook's settings.
func TestProfileHookAndChainOf(t *testing.T) {
	c := cpu.New()
	chain, err := convchain.New([]convchain.Tier{convchain.CPUTier(c)}, convchain.Options{CachePath: "off", Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	p := NewProfile()
	cb := convchain.Wrap(c, chain)
	be := memory.Budgeted(tensor.WithSettings(cb, tensor.Settings{Hook: p.Hook(cb)}), memory.Budget{Device: "test", Cap: 1 << 30})
	if convchain.ChainOf(be) != chain {
		t.Fatal("ChainOf did not find the chain")
	}
	if convchain.ChainOf(c) != nil {
		t.Fatal("a chain on the bare CPU backend")
	}
	s := tensor.NewScope(be)
	defer s.Close()
	x := s.Full(tensor.F32, 1, 1, 4, 3, 5, 5)
	w := s.Full(tensor.F32, 0.5, 8, 4, 3, 3, 3)
	y := s.Conv3d(x, w, nil, [3]int{1, 1, 1}, [3]int{})
	s.GroupNormSiLU(y, s.Full(tensor.F32, 1, 8), s.Full(tensor.F32, 0, 8), 2, 1e-6)
	got := map[string]ProfileLine{}
	for _, l := range p.Lines() {
		got[l.Class] = l
	}
	if l := got["conv3d 4→8 k3"]; l.Calls != 1 || l.TFLOPS <= 0 {
		t.Errorf("conv3d line %+v (have %v)", l, p.Lines())
	}
	if got["group_norm+silu"].Calls != 1 || got["fill"].Calls != 4 {
		t.Errorf("lines %v", p.Lines())
	}
	if v := tensor.Float32s(y)[0]; v != 0.5*4*27 {
		t.Errorf("conv through the profiler: %v", v)
	}
	p.Reset()
	if len(p.Lines()) != 0 {
		t.Error("Reset kept lines")
	}
	var np *Profile
	if err := np.time("x", c, 0, func() error { return nil }); err != nil || np.Lines() != nil {
		t.Error("nil profile")
	}
}
