package miopen

import (
	"slices"
	"strings"
	"testing"

	"github.com/framepack-go/framepack/internal/testutil/dynlibtest"
	"github.com/framepack-go/framepack/internal/testutil/errtest"
)

func TestConvDescOutDims(t *testing.T) {
	cases := []struct {
		d          ConvDesc
		do, ho, wo int
	}{
		{ConvDesc{N: 1, C: 4, D: 7, H: 60, W: 104, K: 4, KD: 3, KH: 3, KW: 3, Pad: [3]int{0, 1, 1}}, 5, 60, 104},
		{ConvDesc{N: 1, C: 4, D: 7, H: 12, W: 10, K: 4, KD: 3, KH: 3, KW: 3, Stride: [3]int{2, 2, 2}, Pad: [3]int{1, 1, 1}}, 4, 6, 5},
		{ConvDesc{N: 1, C: 4, D: 3, H: 7, W: 5, K: 4, KD: 1, KH: 1, KW: 1}, 3, 7, 5},
		{ConvDesc{N: 1, C: 4, D: 9, H: 9, W: 9, K: 4, KD: 3, KH: 3, KW: 3, Dilation: [3]int{2, 2, 2}}, 5, 5, 5},
	}
	for _, c := range cases {
		do, ho, wo := c.d.OutDims()
		if do != c.do || ho != c.ho || wo != c.wo {
			t.Errorf("%v: out %dx%dx%d, want %dx%dx%d", c.d, do, ho, wo, c.do, c.ho, c.wo)
		}
	}
	d := ConvDesc{N: 2, C: 3, D: 4, H: 5, W: 6, K: 7, KD: 1, KH: 1, KW: 1}
	if f := d.FLOPs(); f != 2*2*7*4*5*6*3 {
		t.Errorf("FLOPs %v", f)
	}
}

func TestConvDescValidate(t *testing.T) {
	ok := ConvDesc{N: 1, C: 8, D: 5, H: 9, W: 11, K: 16, KD: 3, KH: 3, KW: 3, Pad: [3]int{1, 1, 1}, DType: BF16, Layout: NDHWC}
	errtest.Rejects(t, ok, (*ConvDesc).Validate, []errtest.Edit[ConvDesc]{
		{Name: "channels", Edit: func(d *ConvDesc) { d.C = 0 }, Want: "sizes must be positive"},
		{Name: "kernel", Edit: func(d *ConvDesc) { d.KH = 0 }, Want: "kernel sizes"},
		{Name: "stride", Edit: func(d *ConvDesc) { d.Stride[1] = -1 }, Want: "strides"},
		{Name: "dtype", Edit: func(d *ConvDesc) { d.DType = 0 }, Want: "unsupported dtype"},
		{Name: "layout", Edit: func(d *ConvDesc) { d.Layout = 7 }, Want: "unsupported layout"},
		{Name: "kernel over input", Edit: func(d *ConvDesc) { d.Pad = [3]int{}; d.D = 2 }, Want: "kernel larger than the padded input"},
		{Name: "too large", Edit: func(d *ConvDesc) { d.N, d.C, d.D, d.H, d.W = 1, 512, 64, 512, 512 }, Want: "split the convolution"},
	})
}

// The strides describe the layouts: NDHWC keeps C innermost.
func TestDims5(t *testing.T) {
	dims, str := dims5(2, 3, 4, 5, 6, NCDHW)
	if dims != [5]int32{2, 3, 4, 5, 6} || str != [5]int32{360, 120, 30, 6, 1} {
		t.Errorf("NCDHW: %v %v", dims, str)
	}
	_, str = dims5(2, 3, 4, 5, 6, NDHWC)
	if str != [5]int32{360, 1, 90, 18, 3} {
		t.Errorf("NDHWC strides %v", str)
	}
}

// A 2-D convolution is described with 4-d tensors (the depth dropped) and
// its (H, W) pairs; its depth fields are ignored.
func TestConv2dDesc(t *testing.T) {
	d := ConvDesc{N: 2, C: 3, D: 9, H: 5, W: 6, K: 4, KD: 3, KH: 3, KW: 3, Stride: [3]int{2, 1, 2}, Pad: [3]int{4, 1, 0}, DType: F16, TwoD: true}
	n := d.norm()
	if n.D != 1 || n.KD != 1 || n.Stride != [3]int{1, 1, 2} || n.Pad != [3]int{0, 1, 0} {
		t.Errorf("norm: %+v", n)
	}
	dims, str := n.tensorDims(2, 3, 1, 5, 6)
	if !slices.Equal(dims, []int32{2, 3, 5, 6}) || !slices.Equal(str, []int32{90, 30, 6, 1}) {
		t.Errorf("NCHW: %v %v", dims, str)
	}
	n.Layout = NDHWC
	if _, str = n.tensorDims(2, 3, 1, 5, 6); !slices.Equal(str, []int32{90, 1, 18, 3}) {
		t.Errorf("NHWC strides %v", str)
	}
	if s := n.spatial(n.Stride); !slices.Equal(s, []int{1, 2}) {
		t.Errorf("spatial %v", s)
	}
	if got, want := d.String(), "conv2d f16 NCHW x(2,3,5,6) k=4 kernel 3x3 stride [1 2] pad [1 0]"; got != want {
		t.Errorf("String %q, want %q", got, want)
	}
	if err := d.Validate(); err != nil {
		t.Error(err)
	}
	if d.XElems() != 2*3*5*6 || d.WElems() != 4*3*3*3 || d.YElems() != 2*4*5*2 {
		t.Errorf("elements %d %d %d", d.XElems(), d.WElems(), d.YElems())
	}
}

func TestSolverNames(t *testing.T) {
	for id, want := range map[uint64]string{
		SolverNaiveFwd: "ConvDirectNaiveConvFwd",
		91:             "GemmFwdRest",
		138:            "ConvHipImplicitGemm3DGroupFwdXdlops",
		100000:         "solver#100000",
	} {
		if got := solverName(id); got != want {
			t.Errorf("solver %d: %q, want %q", id, got, want)
		}
	}
}

// A missing library gives one error naming every file tried.
func TestOpenMissingLibrary(t *testing.T) { dynlibtest.CheckMissing(t, libs, NVIDIA) }

func TestLayoutPermutation(t *testing.T) {
	s := [5]int{2, 3, 4, 5, 6}
	v := make([]float64, 2*3*4*5*6)
	for i := range v {
		v[i] = float64(i)
	}
	cl := toLayout(v, s, NDHWC)
	// Element (n, c, d, h, w) sits at (((n·D+d)·H+h)·W+w)·C+c.
	n, c, d, h, w := 1, 2, 3, 4, 5
	logical := (((n*3+c)*4+d)*5+h)*6 + w
	stored := (((n*4+d)*5+h)*6+w)*3 + c
	if cl[stored] != v[logical] {
		t.Errorf("NDHWC element at %d = %v, want %v", stored, cl[stored], v[logical])
	}
	back := fromLayout(cl, s, NDHWC)
	for i := range v {
		if back[i] != v[i] {
			t.Fatalf("round trip differs at %d", i)
		}
	}
}

// FRAMEPACK_CUDNN_CONV takes the API's names; anything else is an error.
func TestParseConvAPI(t *testing.T) {
	for s, want := range map[string]ConvAPI{"": ConvAPIAuto, "auto": ConvAPIAuto, "legacy": ConvAPILegacy, "graph": ConvAPIGraph} {
		if got, err := ParseConvAPI(s); err != nil || got != want {
			t.Errorf("ParseConvAPI(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	if _, err := ParseConvAPI("Graph"); err == nil || !strings.Contains(err.Error(), `"Graph"`) {
		t.Errorf("ParseConvAPI(\"Graph\"): %v, want an error naming the value", err)
	}
}
