package testdevice

import (
	"testing"

	"github.com/framepack-go/framepack/tensor/backendtest"
)

// TestFakeOps runs the op suite on the CPU posing as a device: its buffers
// go through uploads and downloads, and its fused kernels are the CPU
// reference's.
func TestFakeOps(t *testing.T) { backendtest.Run(t, NewFake()) }
