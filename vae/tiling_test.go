package vae

import (
	"strings"
	"testing"
)

// TestParseTiling reads the commands' tilings and refuses the rest with
// the form to write.
func TestParseTiling(t *testing.T) {
	for in, want := range map[string]Tiling{
		"framewise":       DefaultTiling(),
		"none":            {},
		"spatial":         SpatialTiling(256, 192),
		"spatial:384:288": SpatialTiling(384, 288),
		"spatial:64:32":   SpatialTiling(64, 32),
	} {
		got, auto, err := ParseTiling(in)
		if err != nil || auto || got != want {
			t.Errorf("ParseTiling(%q) = %v, %v, %v; want %v", in, got, auto, err, want)
		}
	}
	if _, auto, err := ParseTiling("auto"); err != nil || !auto {
		t.Errorf("ParseTiling(auto): auto %v, %v", auto, err)
	}
	for in, want := range map[string]string{
		"spatial:9":       `"spatial:9": want spatial:TILE:STRIDE in pixels`,
		"spatial:a:b":     `want spatial:TILE:STRIDE in pixels`,
		"spatial:256:256": "0 < STRIDE < TILE",
		"spatial:0:0":     "0 < STRIDE < TILE",
		"spatial:260:192": "multiples of 8",
		"tiled":           `"tiled": want framewise, spatial:TILE:STRIDE, none or auto`,
	} {
		if _, _, err := ParseTiling(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseTiling(%q) = %v, want an error with %q", in, err, want)
		}
	}
}
