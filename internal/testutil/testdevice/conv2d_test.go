package testdevice

import (
	"testing"

	"github.com/framepack-go/framepack/backend/cpu"
	"github.com/framepack-go/framepack/convchain"
	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/tensor/backendtest"
)

// conv2dOnly is be behind a chain of the conv2d tier alone: a convolution
// it cannot run fails.
func conv2dOnly(t *testing.T, be convchain.Conv2dBackend) (tensor.Backend, *convchain.Chain) {
	t.Helper()
	ch, err := convchain.New([]convchain.Tier{convchain.Conv2dTier(be)}, convchain.Options{CachePath: "off", Faults: &convchain.Faults{}})
	if err != nil {
		t.Fatal(err)
	}
	return convchain.Wrap(be, ch), ch
}

// The conv2d tier on the CPU and on the simulated device: the conv3d
// cases against float64 math, and the op suite's convolutions (plain,
// through a padding, channels-last) against the CPU backend.
func TestConv2dTier(t *testing.T) {
	for _, tc := range []struct {
		name string
		be   convchain.Conv2dBackend
	}{{"cpu", cpu.New()}, {"fake", NewFake()}} {
		t.Run(tc.name, func(t *testing.T) {
			be, ch := conv2dOnly(t, tc.be)
			backendtest.ConvAgainstFloat64(t, be, "conv3d as conv2d: "+tc.name)
			backendtest.Run(t, be, backendtest.Select("conv3d", "conv3d_padded", "conv3d_last")...)
			if s := ch.Summary()[0]; s.Tier != "conv2d" || s.Convs == 0 {
				t.Errorf("the conv2d tier ran no convolution: %v", s)
			}
		})
	}
}
