package convchain_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/framepack-go/framepack/convchain"
)

// Taps covers exactly the (output frame, tap) pairs whose input frame lies
// inside the input, and puts a tap covering every output frame first.
func TestTaps(t *testing.T) {
	for T := 1; T <= 7; T++ {
		for kT := 1; kT <= 4; kT++ {
			for s := 1; s <= 3; s++ {
				for pad := 0; pad <= kT; pad++ {
					if T+2*pad < kT {
						continue
					}
					To := (T+2*pad-kT)/s + 1
					taps, full := convchain.Taps(T, To, kT, s, pad)
					name := fmt.Sprintf("T %d kT %d s %d pad %d", T, kT, s, pad)
					got := map[[2]int]bool{}
					for i, tp := range taps {
						if tp.Frames() <= 0 {
							t.Errorf("%s: tap %+v reads nothing", name, tp)
						}
						if i > 1 && taps[i-1].K > tp.K {
							t.Errorf("%s: taps after the first out of order: %+v", name, taps)
						}
						for o := tp.Lo; o < tp.Hi; o++ {
							if f := tp.In0 + (o-tp.Lo)*s; f != o*s+tp.K-pad {
								t.Errorf("%s: tap %+v: output %d reads %d", name, tp, o, f)
							}
							got[[2]int{o, tp.K}] = true
						}
					}
					anyFull := false
					for k := 0; k < kT; k++ {
						n := 0
						for o := 0; o < To; o++ {
							f := o*s + k - pad
							if want := f >= 0 && f < T; want != got[[2]int{o, k}] {
								t.Errorf("%s: output %d tap %d: covered %v, want %v", name, o, k, got[[2]int{o, k}], want)
							} else if want {
								n++
							}
						}
						anyFull = anyFull || n == To
					}
					if full != anyFull || (full && (taps[0].Lo != 0 || taps[0].Hi != To)) {
						t.Errorf("%s: full %v, first %+v (a full tap exists: %v)", name, full, taps, anyFull)
					}
				}
			}
		}
	}
}

// The tier order by architecture: conv2d first and no library 3-D tier on
// RDNA3/3.5 unless searches are asked for (then it comes first, searched);
// the library first elsewhere; a setting overrides, checked.
func TestDefaultOrder(t *testing.T) {
	conv2d, lib := "conv2d → gemm → naive → cpu", "optimized → gemm → naive → cpu"
	for _, c := range []struct {
		arch   string
		search bool
		want   string
	}{
		{"gfx1100", false, conv2d}, {"gfx1101", false, conv2d}, {"gfx1103", false, conv2d},
		{"gfx1150", false, conv2d}, {"gfx1151", false, conv2d}, {"gfx1151:xnack-", false, conv2d},
		{"gfx1100", true, "optimized → " + conv2d}, {"gfx1151", true, "optimized → " + conv2d},
		{"gfx1200", false, lib}, {"gfx1201", true, lib}, {"gfx90a", false, lib}, {"gfx942", false, lib},
		{"gfx1030", false, lib}, {"sm_90", false, lib}, {"", false, lib},
	} {
		o := convchain.DefaultOrder(c.arch, c.search)
		if o.String() != c.want || o.Why == "" || o.SearchFirst != convchain.RDNA3(c.arch) {
			t.Errorf("%s search %v: %s (%s), search first %v; want %s", c.arch, c.search, o, o.Why, o.SearchFirst, c.want)
		}
	}
	if o := convchain.OrderFor("gfx1151", []string{"optimized", "conv2d"}, false); o.String() != "optimized → conv2d" || !o.SearchFirst {
		t.Errorf("a set order on gfx1151: %+v", o)
	}
	for s, want := range map[string]string{"": "", "auto": "", " Conv2d , cpu": "conv2d,cpu", "optimized,conv2d,gemm,naive,cpu": "optimized,conv2d,gemm,naive,cpu"} {
		got, err := convchain.ParseOrder(s)
		if err != nil || fmt.Sprint(got) != fmt.Sprint(strings.Split(want, ",")) && want != "" || (want == "" && got != nil) {
			t.Errorf("ParseOrder(%q): %v, %v", s, got, err)
		}
	}
	for _, bad := range []string{"conv3", "conv2d,conv2d", "conv2d,,cpu"} {
		if _, err := convchain.ParseOrder(bad); err == nil {
			t.Errorf("ParseOrder(%q) took it", bad)
		}
	}
}
