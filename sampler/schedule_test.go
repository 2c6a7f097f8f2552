package sampler

import (
	"math"
	"testing"

	"github.com/framepack-go/framepack/internal/testutil/golden"
)

// The spec's 25-step table (640 buckets: mu capped at ln 7): σ as torch
// computes it in float32, and the bf16 timestep the transformer sees.
var sigmaTable25 = []struct {
	sigma    float32
	timestep float32
}{
	{1.0, 1000}, {0.9940827, 996}, {0.9877301, 988}, {0.9808917, 980}, {0.9735100, 972},
	{0.9655172, 964}, {0.9568346, 956}, {0.9473684, 948}, {0.9370078, 936}, {0.9256198, 924},
	{0.9130435, 912}, {0.8990825, 900}, {0.8834952, 884}, {0.8659793, 864}, {0.8461539, 848},
	{0.8235294, 824}, {0.7974684, 796}, {0.7671233, 768}, {0.7313433, 732}, {0.6885245, 688},
	{0.6363636, 636}, {0.5714285, 572}, {0.4883721, 488}, {0.3783784, 378}, {0.2258064, 226},
	{0, 0},
}

func TestSigmas25(t *testing.T) {
	// 640×608 bucket: T=9, h=80, w=76 latents → 13 680 tokens.
	mu := FluxMu(9 * 80 * 76 / 4)
	if mu != math.Log(7) {
		t.Fatalf("mu = %v, want ln 7", mu)
	}
	s, err := Sigmas(25, mu)
	if err != nil {
		t.Fatal(err)
	}
	if len(s) != 26 {
		t.Fatalf("%d sigmas", len(s))
	}
	for i, want := range sigmaTable25 {
		if math.Abs(float64(s[i]-want.sigma)) > 1e-7 {
			t.Errorf("σ[%d] = %.9g, want %.7g", i, s[i], want.sigma)
		}
		if i < 25 {
			if ts := Timestep(s[i], true); ts != want.timestep {
				t.Errorf("bf16 timestep[%d] = %v, want %v", i, ts, want.timestep)
			}
		}
	}
	// Shift 7 is the same schedule, 7t/(1+6t).
	s7, _ := Sigmas(25, ShiftMu(7))
	for i := range s7 {
		tt := 1 - float64(i)/25
		if want := 7 * tt / (1 + 6*tt); math.Abs(float64(s7[i])-want) > 3e-7 {
			t.Errorf("shift 7: σ[%d] = %v, want %v", i, s7[i], want)
		}
	}
}

func TestFluxMu(t *testing.T) {
	k := (1.15 - 0.5) / (4096.0 - 256.0)
	if got, want := FluxMu(192), 0.5+(192-256)*k; math.Abs(got-want) > 1e-15 {
		t.Errorf("FluxMu(192) = %v, want %v", got, want)
	}
	if FluxMu(256) != 0.5 || math.Abs(FluxMu(4096)-1.15) > 1e-15 {
		t.Errorf("FluxMu endpoints: %v %v", FluxMu(256), FluxMu(4096))
	}
	// Every 640 bucket is far past the cap.
	if FluxMu(13464) != math.Log(7) {
		t.Error("not capped at ln 7")
	}
}

func TestGuidanceValue(t *testing.T) {
	if g := GuidanceValue(10, true); g != 9984 {
		t.Errorf("bf16 guidance for gs=10: %v, want 9984", g)
	}
	if g := GuidanceValue(10, false); g != 10000 {
		t.Errorf("f32 guidance for gs=10: %v", g)
	}
}

func TestSigmasErrors(t *testing.T) {
	if _, err := Sigmas(0, 1); err == nil {
		t.Error("steps 0 accepted")
	}
	if _, err := Sigmas(4, math.NaN()); err == nil {
		t.Error("NaN mu accepted")
	}
}

// The sampler goldens record their mu and sigmas.
func TestSigmasGolden(t *testing.T) {
	for _, c := range golden.Cases(t, "sampler") {
		var steps, frames, height, width int
		var mu float64
		c.Param("steps", &steps)
		c.Param("frames", &frames)
		c.Param("height", &height)
		c.Param("width", &width)
		c.Param("mu", &mu)
		shape := []int{1, 16, (frames + 3) / 4, height / 8, width / 8}
		if got := MuFor(shape, 0); got != mu {
			t.Errorf("%s: mu %v, want %v", c.Name, got, mu)
		}
		s, err := Sigmas(steps, mu)
		if err != nil {
			t.Fatal(err)
		}
		ref := c.Tensor("sigmas").Float32s()
		if d := maxAbsDiff(s, ref); d != 0 || len(s) != len(ref) {
			t.Errorf("%s: sigmas %v, want %v", c.Name, s, ref)
		}
	}
}
