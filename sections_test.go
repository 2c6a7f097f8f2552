package framepack

import (
	"reflect"
	"testing"

	"github.com/framepack-go/framepack/pipeline"
)

func TestSectionArithmetic(t *testing.T) {
	for _, c := range []struct {
		seconds       float64
		lws, sections int
		frames        int
	}{
		{5, 9, 4, 145},    // §1.2: 150/36 = 4.17
		{60, 9, 50, 1801}, // §1.2
		{1, 9, 1, 37},     // 0.83 rounds to 1
		{0.1, 9, 1, 37},   // at least one section
		{3, 9, 2, 73},     // 2.5 rounds half to even
		{4.2, 9, 4, 145},  // 3.5 rounds half to even
		{1.34, 2, 5, 41},  // §8.3's tiny loop
		{120, 9, 100, 3601},
	} {
		if got := Sections(c.seconds, c.lws); got != c.sections {
			t.Errorf("Sections(%v, %d) = %d, want %d", c.seconds, c.lws, got, c.sections)
		}
		if got := FrameCount(c.sections, c.lws); got != c.frames {
			t.Errorf("FrameCount(%d, %d) = %d, want %d", c.sections, c.lws, got, c.frames)
		}
	}
	for n, want := range map[int][]int{
		1: {0}, 2: {1, 0}, 4: {3, 2, 1, 0}, 5: {3, 2, 2, 1, 0}, 7: {3, 2, 2, 2, 2, 1, 0},
	} {
		if got := LatentPaddings(n); !reflect.DeepEqual(got, want) {
			t.Errorf("LatentPaddings(%d) = %v, want %v", n, got, want)
		}
	}
}

func TestIndices(t *testing.T) {
	ar := func(a, b int) []int64 {
		var out []int64
		for i := a; i <= b; i++ {
			out = append(out, int64(i))
		}
		return out
	}
	// §1.7's worked example (lws 9).
	for _, c := range []struct {
		p                     int
		window, clean, x2, x4 []int64
	}{
		{3, ar(28, 36), []int64{0, 37}, ar(38, 39), ar(40, 55)},
		{2, ar(19, 27), []int64{0, 28}, ar(29, 30), ar(31, 46)},
		{1, ar(10, 18), []int64{0, 19}, ar(20, 21), ar(22, 37)},
		{0, ar(1, 9), []int64{0, 10}, ar(11, 12), ar(13, 28)},
	} {
		got := IndicesFor(c.p, 9)
		want := SectionIndices{Latent: c.window, Clean: c.clean, Clean2x: c.x2, Clean4x: c.x4}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("padding %d: %+v, want %+v", c.p, got, want)
		}
	}
	// §8.1's tiny case: lws 2, padding 1 → 24 indices in all.
	got := IndicesFor(1, 2)
	if n := len(got.Latent) + 2 + len(got.Clean2x) + len(got.Clean4x) + 2; n != 24 || got.Clean4x[15] != 23 {
		t.Errorf("lws 2, padding 1: %+v", got)
	}
}

func TestBuckets(t *testing.T) {
	b, err := Buckets(640)
	if err != nil || !reflect.DeepEqual(b, pipeline.Buckets640) {
		t.Fatalf("Buckets(640) = %v, %v", b, err)
	}
	for _, hw := range [][2]int{{480, 640}, {640, 480}, {1080, 1920}, {100, 100}, {192, 256}, {1, 5000}} {
		h, w, err := NearestBucket(hw[0], hw[1], 640)
		if ph, pw := pipeline.NearestBucket(hw[0], hw[1]); err != nil || h != ph || w != pw {
			t.Errorf("NearestBucket(%v, 640) = %d×%d, want %d×%d", hw, h, w, ph, pw)
		}
	}
	for _, res := range []int{64, 128, 256, 320, 960, 1280} {
		list, err := Buckets(res)
		if err != nil {
			t.Fatal(err)
		}
		for i, b := range list {
			if b[0]%32 != 0 || b[1]%32 != 0 || b[0] < 32 || b[1] < 32 {
				t.Errorf("resolution %d bucket %d: %v", res, i, b)
			}
			// Within rounding of the scaled 640 bucket.
			for k := range b {
				if d := float64(b[k]) - float64(pipeline.Buckets640[i][k]*res)/640; d > 16 || d < -16 && b[k] > 32 {
					t.Errorf("resolution %d bucket %v is far from the scaled %v", res, b, pipeline.Buckets640[i])
				}
			}
		}
	}
	// Portrait and landscape images land on portrait and landscape buckets.
	if h, w, _ := NearestBucket(192, 256, 128); h >= w {
		t.Errorf("a 256×192 image at 128: bucket %d×%d", w, h)
	}
	if h, w, _ := NearestBucket(256, 192, 128); h <= w {
		t.Errorf("a 192×256 image at 128: bucket %d×%d", w, h)
	}
	for _, res := range []int{0, 63, 1281, -640} {
		if _, err := Buckets(res); err == nil {
			t.Errorf("resolution %d accepted", res)
		}
	}
}
