package section

import (
	"reflect"
	"testing"

	"github.com/framepack-go/framepack/tensor"
)

func TestPlanSections(t *testing.T) {
	for _, c := range []struct {
		seconds float64
		lws     int
		want    int
		frames  int
	}{
		{5, 9, 4, 145}, {60, 9, 50, 1801}, {3, 9, 2, 73}, // 2.5 rounds to even
		{0.2, 1, 2, 9}, {1, 9, 1, 37}, {0.1, 9, 1, 37}, {120, 9, 100, 3601},
		{4.2, 9, 4, 145}, // 3.5 rounds half to even
		{1.34, 2, 5, 41}, // §8.3's tiny loop
	} {
		p, err := NewPlan(c.seconds, c.lws)
		if err != nil {
			t.Fatal(err)
		}
		if p.Sections != c.want || p.VideoFrames() != c.frames || len(p.Paddings) != c.want {
			t.Errorf("%vs lws %d: %d sections, %d frames; want %d, %d", c.seconds, c.lws, p.Sections, p.VideoFrames(), c.want, c.frames)
		}
	}
	p, _ := NewPlan(5, 9)
	if !reflect.DeepEqual(p.Paddings, []int{3, 2, 1, 0}) || p.SectionFrames() != 33 {
		t.Errorf("5 s: paddings %v, section frames %d", p.Paddings, p.SectionFrames())
	}
	p, _ = NewPlan(7, 9) // 5.83 → 6 sections
	if !reflect.DeepEqual(p.Paddings, []int{3, 2, 2, 2, 1, 0}) {
		t.Errorf("6 sections: paddings %v", p.Paddings)
	}
	p, _ = NewPlan(3, 9)
	if !reflect.DeepEqual(p.Paddings, []int{1, 0}) {
		t.Errorf("2 sections: paddings %v", p.Paddings)
	}
	p, _ = NewPlan(1.34, 2)
	if !reflect.DeepEqual(p.Paddings, []int{3, 2, 2, 1, 0}) {
		t.Errorf("5 sections: paddings %v", p.Paddings)
	}
	p, _ = NewPlan(1, 9)
	if !reflect.DeepEqual(p.Paddings, []int{0}) || !p.Section(0).Last {
		t.Errorf("1 section: paddings %v", p.Paddings)
	}
	// §8.1's tiny case: lws 2, padding 1 → 24 indices in all.
	p, _ = NewPlan(0.5, 2) // round(15/8) = 2 sections: paddings [1, 0]
	if sec := p.Section(0); sec.Padding != 1 || len(sec.LatentIndices)+2+len(sec.Clean2xIndices)+len(sec.Clean4xIndices)+2 != 24 ||
		sec.Clean4xIndices[15] != 23 {
		t.Errorf("lws 2, padding 1: %+v", sec)
	}
	for _, bad := range []struct {
		s   float64
		lws int
	}{{0, 9}, {-1, 9}, {5, 0}, {1e9, 9}} {
		if _, err := NewPlan(bad.s, bad.lws); err == nil {
			t.Errorf("NewPlan(%v, %d) accepted", bad.s, bad.lws)
		}
	}
}

func seq(a, b int64) []int64 {
	var out []int64
	for i := a; i <= b; i++ {
		out = append(out, i)
	}
	return out
}

// The spec's worked example: 5 s, paddings [3, 2, 1, 0].
func TestSectionLayout(t *testing.T) {
	p, _ := NewPlan(5, 9)
	want := []struct {
		window, twoX, fourX []int64
		clean               []int64
		decode, pixels      int // latents decoded, pixel frames after the append
		generated           int
	}{
		{seq(28, 36), seq(38, 39), seq(40, 55), []int64{0, 37}, 9, 33, 9},
		{seq(19, 27), seq(29, 30), seq(31, 46), []int64{0, 28}, 18, 69, 18},
		{seq(10, 18), seq(20, 21), seq(22, 37), []int64{0, 19}, 18, 105, 27},
		{seq(1, 9), seq(11, 12), seq(13, 28), []int64{0, 10}, 19, 145, 37},
	}
	h, w := 2, 3
	hist := NewHistory(h, w)
	start := filled(100, 1, h, w)
	pixels := 0
	for i, wt := range want {
		sec := p.Section(i)
		if !reflect.DeepEqual(sec.LatentIndices, wt.window) || !reflect.DeepEqual(sec.CleanIndices, wt.clean) ||
			!reflect.DeepEqual(sec.Clean2xIndices, wt.twoX) || !reflect.DeepEqual(sec.Clean4xIndices, wt.fourX) {
			t.Errorf("section %d: %+v", i, sec)
		}
		if sec.Last != (i == 3) {
			t.Errorf("section %d: last %v", i, sec.Last)
		}

		// The context: [start, newest], then the next 2 and 16 history frames
		// (zeros until generated).
		clean, c2, c4, err := hist.Context(start)
		if err != nil {
			t.Fatal(err)
		}
		wantFrames := func(name string, got *tensor.Tensor, vals ...float32) {
			t.Helper()
			if got.Dim(2) != len(vals) {
				t.Fatalf("section %d %s: %d frames, want %d", i, name, got.Dim(2), len(vals))
			}
			for f, v := range vals {
				if x := frameValue(got, f); x != v {
					t.Errorf("section %d %s frame %d = %v, want %v", i, name, f, x, v)
				}
			}
		}
		// Section k generates 9 frames of value k+1; history holds the newest first.
		histVal := func(f int) float32 {
			if f >= hist.Generated {
				return 0
			}
			return float32(i - f/9) // section i−1−f/9 made it, with value i−f/9
		}
		wantFrames("clean_latents", clean, 100, histVal(0))
		wantFrames("clean_latents_2x", c2, histVal(1), histVal(2))
		fours := make([]float32, 16)
		for f := range fours {
			fours[f] = histVal(3 + f)
		}
		wantFrames("clean_latents_4x", c4, fours...)

		if err := hist.Add(filled(float32(i+1), 9, h, w), start, sec.Last); err != nil {
			t.Fatal(err)
		}
		if hist.Generated != wt.generated {
			t.Errorf("section %d: %d generated, want %d", i, hist.Generated, wt.generated)
		}
		n, overlap := p.DecodeLatents(i)
		dec := hist.Newest(n)
		if dec.Dim(2) != wt.decode {
			t.Errorf("section %d decodes %d latents, want %d", i, dec.Dim(2), wt.decode)
		}
		if i == 0 {
			pixels = PixelFrames(dec.Dim(2))
		} else {
			pixels += PixelFrames(dec.Dim(2)) - overlap
		}
		if pixels != wt.pixels {
			t.Errorf("section %d: %d pixel frames, want %d", i, pixels, wt.pixels)
		}
	}
	if pixels != p.VideoFrames() {
		t.Errorf("video has %d frames, plan says %d", pixels, p.VideoFrames())
	}
	// The finished history starts with the start latent.
	if v := frameValue(hist.Latents, 0); v != 100 {
		t.Errorf("history starts with %v", v)
	}
}

func filled(v float32, frames, h, w int) *tensor.Tensor {
	t := tensor.New(tensor.F32, 1, 16, frames, h, w)
	for i := range t.Float32s() {
		t.Float32s()[i] = v
	}
	return t
}

// frameValue returns the value of frame f, checking it is uniform over
// channels and pixels.
func frameValue(t *tensor.Tensor, f int) float32 {
	s := t.Shape()
	plane := s[3] * s[4]
	v := t.Float32s()
	first := v[f*plane]
	for c := 0; c < s[1]; c++ {
		for _, x := range v[(c*s[2]+f)*plane : (c*s[2]+f+1)*plane] {
			if x != first {
				return -1
			}
		}
	}
	return first
}

func TestHistoryErrors(t *testing.T) {
	hist := NewHistory(2, 3)
	if _, _, _, err := hist.Context(filled(1, 1, 4, 3)); err == nil {
		t.Error("start latent of the wrong size accepted")
	}
	if _, _, _, err := hist.Context(filled(1, 2, 2, 3)); err == nil {
		t.Error("two-frame start latent accepted")
	}
	if err := hist.Add(filled(1, 9, 2, 4), nil, false); err == nil {
		t.Error("generated latents of the wrong size accepted")
	}
	if err := hist.Add(filled(1, 9, 2, 3), nil, true); err == nil {
		t.Error("last section without a start latent accepted")
	}
}

// TestForwardLayout checks F1's plan and history against demo_gradio_f1.py:
// indices [start 0 | 4x 1–16 | 2x 17–18 | 1x 19 | window], the context read
// from the history's end, latents appended, the last 2·lws decoded.
func TestForwardLayout(t *testing.T) {
	p, err := NewForwardPlan(1.2, 3)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Forward || p.Sections != 3 || !reflect.DeepEqual(p.Paddings, []int{0, 0, 0}) || p.VideoFrames() != 37 {
		t.Fatalf("plan %+v, %d frames", p, p.VideoFrames())
	}
	seq := func(a, n int64) []int64 {
		out := make([]int64, n)
		for i := range out {
			out[i] = a + int64(i)
		}
		return out
	}
	for i := range p.Sections {
		s := p.Section(i)
		want := Section{Index: i, Last: i == 2, LatentIndices: seq(20, 3), CleanIndices: []int64{0, 19},
			Clean2xIndices: seq(17, 2), Clean4xIndices: seq(1, 16)}
		if !reflect.DeepEqual(s, want) {
			t.Errorf("section %d: %+v, want %+v", i, s, want)
		}
		n, overlap := p.DecodeLatents(i)
		if i == 0 && (n != 0 || overlap != 0) || i > 0 && (n != 6 || overlap != 9) {
			t.Errorf("section %d decodes %d latents overlapping %d frames", i, n, overlap)
		}
	}

	// Frames hold their time index k+1 (the start latent 0.5).
	frame := func(v float32) *tensor.Tensor {
		x := tensor.New(tensor.F32, 1, 16, 1, 2, 2)
		for i := range x.Float32s() {
			x.Float32s()[i] = v
		}
		return x
	}
	hs, err := NewForwardHistory(frame(0.5))
	if err != nil {
		t.Fatal(err)
	}
	first := func(x *tensor.Tensor) []float32 {
		out := make([]float32, x.Dim(2))
		for k := range out {
			out[k] = Frames(x, k, k+1).Float32s()[0]
		}
		return out
	}
	clean, c2, c4, err := hs.Context(frame(0.5))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(first(clean), []float32{0.5, 0.5}) || !reflect.DeepEqual(first(c2), []float32{0, 0}) || first(c4)[15] != 0 {
		t.Errorf("initial context %v %v %v", first(clean), first(c2), first(c4))
	}
	for k := 0; k < 6; k += 3 {
		g := Concat(Concat(frame(float32(k+1)), frame(float32(k+2))), frame(float32(k+3)))
		if err := hs.Add(g, nil, false); err != nil {
			t.Fatal(err)
		}
	}
	if hs.Generated != 7 || !reflect.DeepEqual(first(hs.Newest(0)), []float32{0.5, 1, 2, 3, 4, 5, 6}) ||
		!reflect.DeepEqual(first(hs.Newest(2)), []float32{5, 6}) {
		t.Errorf("history %d: %v", hs.Generated, first(hs.Newest(0)))
	}
	clean, c2, c4, _ = hs.Context(frame(0.5))
	if !reflect.DeepEqual(first(clean), []float32{0.5, 6}) || !reflect.DeepEqual(first(c2), []float32{4, 5}) ||
		!reflect.DeepEqual(first(c4)[12:], []float32{0.5, 1, 2, 3}) || first(c4)[11] != 0 {
		t.Errorf("context %v %v %v", first(clean), first(c2), first(c4))
	}
}

func TestMix(t *testing.T) {
	x := tensor.FromFloat32([]float32{1, 2, 3}, 1, 3)
	y := tensor.FromFloat32([]float32{10, 20, 30}, 1, 3)
	if got := Mix(x, 0.25, y, 0.75).Float32s(); !reflect.DeepEqual(got, []float32{7.75, 15.5, 23.25}) {
		t.Errorf("Mix %v", got)
	}
	if got := Mix(x, 0.5, nil, 0).Float32s(); !reflect.DeepEqual(got, []float32{0.5, 1, 1.5}) {
		t.Errorf("Mix without y %v", got)
	}
}
