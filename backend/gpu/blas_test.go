package gpu

import (
	"testing"

	"github.com/framepack-go/framepack/internal/envconfig"
)

// The GEMM library by architecture: hipBLASLt on RDNA3, RDNA3.5 and RDNA4,
// the plain BLAS elsewhere.
func TestBLASFor(t *testing.T) {
	for arch, lt := range map[string]bool{
		"gfx1100": true, "gfx1101": true, "gfx1102": true, "gfx1103": true,
		"gfx1150": true, "gfx1151": true, "gfx1152": true,
		"gfx1200": true, "gfx1201": true, "gfx1100:xnack-": true,
		"gfx90a": false, "gfx942": false, "gfx950": false, "gfx1030": false,
		"sm_90": false, "sm_89": false, "": false,
	} {
		c := BLASFor(arch)
		if c.Lt != lt || c.Why == "" {
			t.Errorf("%s: %+v, want Lt %v", arch, c, lt)
		}
	}
}

// The conv3d order a GPU gets: the architecture's, --conv-search on puts
// MIOpen's 3-D tier first on gfx11, FRAMEPACK_CONV3D and Order override.
func TestConvOrder(t *testing.T) {
	t.Setenv(envconfig.Conv3d, "")
	for _, c := range []struct {
		arch string
		o    ConvOptions
		want string
	}{
		{"gfx1100", ConvOptions{}, "conv2d → gemm → naive → cpu"},
		{"gfx1151", ConvOptions{Search: SearchAuto}, "conv2d → gemm → naive → cpu"},
		{"gfx1151", ConvOptions{Search: SearchOn}, "optimized → conv2d → gemm → naive → cpu"},
		{"gfx1201", ConvOptions{Search: SearchOn}, "optimized → gemm → naive → cpu"},
		{"sm_90", ConvOptions{Order: []string{"conv2d"}}, "conv2d"},
	} {
		o, err := ConvOrder(c.arch, c.o)
		if err != nil || o.String() != c.want {
			t.Errorf("%s %+v: %v %v, want %s", c.arch, c.o, o, err, c.want)
		}
	}
	t.Setenv(envconfig.Conv3d, "conv2d,cpu")
	if o, err := ConvOrder("sm_90", ConvOptions{}); err != nil || o.String() != "conv2d → cpu" {
		t.Errorf("FRAMEPACK_CONV3D=conv2d,cpu: %v %v", o, err)
	}
	t.Setenv(envconfig.Conv3d, "fast")
	if _, err := ConvOrder("sm_90", ConvOptions{}); err == nil {
		t.Error("a bad FRAMEPACK_CONV3D was taken")
	}
}
