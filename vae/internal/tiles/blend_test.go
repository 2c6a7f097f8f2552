package tiles

import (
	"math"
	"testing"

	"github.com/framepack-go/framepack/tensor"
)

// TestRoundF16 checks the fast half rounding against the reference one on a
// spread of bit patterns (all exponents, ties included).
func TestRoundF16(t *testing.T) {
	check := func(u uint32) {
		f := math.Float32frombits(u)
		got, want := roundF16(f), tensor.RoundF16(f)
		if math.Float32bits(got) != math.Float32bits(want) && !(got != got && want != want) {
			t.Fatalf("roundF16(%g [%#08x]) = %g, want %g", f, u, got, want)
		}
	}
	for u := uint64(0); u < 1<<32; u += 4093 {
		check(uint32(u))
	}
	for e := uint32(100); e < 150; e++ { // exact ties and their neighbours
		for _, m := range []uint32{0x1000, 0x3000, 0x0fff, 0x1001, 0x7fefff, 0x7ff000, 0x7fffff} {
			check(e<<23 | m)
			check(1<<31 | e<<23 | m)
		}
	}
}

// TestBlend checks blend_t/v/h on a small case against the formula.
func TestBlend(t *testing.T) {
	a, b := New(1, 2, 3, 4, 5), New(1, 2, 3, 4, 5)
	for i := range a.data {
		a.data[i], b.data[i] = float32(i), float32(-i)
	}
	orig := append([]float32(nil), b.data...)
	RoundTo(tensor.F32).BlendH(a, b, 2)
	for c := 0; c < 2; c++ {
		for tt := 0; tt < 3; tt++ {
			for y := 0; y < 4; y++ {
				for x := 0; x < 5; x++ {
					i := b.idx(0, c, tt, y, x)
					want := orig[i]
					if x < 2 {
						w := float32(x) / 2
						want = a.data[a.idx(0, c, tt, y, 3+x)]*(1-w) + orig[i]*w
					}
					if b.data[i] != want {
						t.Fatalf("blendH at c%d t%d y%d x%d: %v, want %v", c, tt, y, x, b.data[i], want)
					}
				}
			}
		}
	}
	// blend_t over more frames than b has: the extent shrinks to b's.
	short := New(1, 2, 1, 4, 5)
	for i := range short.data {
		short.data[i] = 7
	}
	RoundTo(tensor.F32).BlendT(a, short, 4)
	for i, v := range short.data {
		if want := a.data[a.idx(0, i/20, 2, 0, 0)+i%20]; v != want {
			t.Fatalf("blendT of one frame: %v, want a's last frame %v", v, want)
		}
	}
}
