// Package testdevice picks the backend that tests run on, so that one test
// binary checks the CPU, the GPU or a simulated device: the CPU by default;
// the GPU when FRAMEPACK_TEST_DEVICE=gpu (a test skips, saying why, when
// none opens), "gpu-noblas" for the GPU with framepack's own GEMM kernel
// instead of the vendor BLAS; "fake": the CPU's kernels behind a backend that is not host
// backed, so tests exercise the uploads, downloads, buffer views and
// streamed weights that a device needs.
package testdevice

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/framepack-go/framepack/backend/cpu"
	"github.com/framepack-go/framepack/backend/gpu"
	"github.com/framepack-go/framepack/convchain"
	"github.com/framepack-go/framepack/internal/envconfig"
	"github.com/framepack-go/framepack/memory"
	"github.com/framepack-go/framepack/tensor"
)

// Env names the environment variable that chooses the device: "" or
// "cpu", "gpu", "gpu-noblas", "fake".
const Env = "FRAMEPACK_TEST_DEVICE"

// Name is the chosen device.
func Name() string {
	switch v := os.Getenv(Env); v {
	case "", "cpu":
		return "cpu"
	default:
		return v
	}
}

var gpuOnce struct {
	sync.Once
	be  *gpu.Backend
	err error
}

// GPU is the process's GPU backend (opened once, never closed, without
// the vendor BLAS for "gpu-noblas"), or why none opened.
func GPU() (*gpu.Backend, error) {
	gpuOnce.Do(func() {
		gpuOnce.be, gpuOnce.err = gpu.New(gpu.Options{NoBLAS: Name() == "gpu-noblas"})
	})
	return gpuOnce.be, gpuOnce.err
}

// Backend returns the chosen device's backend; for "gpu" without a GPU it
// skips the test with the reason. With a conv3d tier order set
// (FRAMEPACK_CONV3D=conv2d, say) its convolutions go through a chain of
// those tiers alone, so that a forced tier is the one that runs: on the
// CPU and the simulated device the tiers they have (conv2d and cpu).
func Backend(t testing.TB) tensor.Backend {
	t.Helper()
	order, err := convchain.ParseOrder(envconfig.Read().Conv3d)
	if err != nil {
		t.Fatalf("%s: %v", envconfig.Conv3d, err)
	}
	switch n := Name(); n {
	case "cpu":
		return withOrder(t, cpu.New(), order)
	case "fake":
		return withOrder(t, NewFake(), order)
	case "gpu", "gpu-noblas":
		be, err := GPU()
		if err != nil {
			t.Skipf("%s=gpu: no GPU: %v", Env, err)
		}
		if order != nil {
			ch, err := be.WithConvChain(cpu.New(), gpu.ConvOptions{Order: order, CachePath: "off"})
			if err != nil {
				t.Fatal(err)
			}
			return ch
		}
		return be
	default:
		t.Fatalf("%s=%q: want cpu, gpu, gpu-noblas or fake", Env, n)
		return nil
	}
}

// withOrder is be behind a chain of the tiers of order it has (conv2d on
// its own 2-D convolution, cpu), or be itself without an order.
func withOrder(t testing.TB, be convchain.Conv2dBackend, order []string) tensor.Backend {
	t.Helper()
	if order == nil {
		return be
	}
	var tiers []convchain.Tier
	for _, name := range order {
		switch name {
		case convchain.Conv2dTierName:
			tiers = append(tiers, convchain.Conv2dTier(be))
		case "cpu":
			tiers = append(tiers, convchain.CPUTier(cpu.New()))
		}
	}
	if len(tiers) == 0 {
		t.Fatalf("%s=%s: none of these conv3d tiers runs on %s (conv2d and cpu do)", envconfig.Conv3d, strings.Join(order, ","), be.Name())
	}
	ch, err := convchain.New(tiers, convchain.Options{Device: be.Name(), CachePath: "off", Faults: &convchain.Faults{}})
	if err != nil {
		t.Fatal(err)
	}
	return convchain.Wrap(be, ch)
}

// Fake is the CPU backend presented as a device: its buffers are not
// usable as host tensors (Scope.To uploads and ToHost downloads), it makes
// views of buffers, has "pinned" memory with uploads that complete at once,
// and the fused kernels' CPU reference.
type Fake struct {
	*cpu.Backend
	cpu.Fused
	// CopyDelay, when set, makes UploadQueued copy on a goroutine after
	// this long, as a copy stream would run behind the host: a caller that
	// reuses its source before done returns uploads changed bytes.
	CopyDelay time.Duration
}

// NewFake returns a simulated device.
func NewFake() *Fake { return &Fake{Backend: cpu.New()} }

func (f *Fake) Name() string { return "fake-device" }

// HostBacked is false: host tensors must be uploaded.
func (f *Fake) HostBacked() bool { return false }

// View is n bytes of buf at off.
func (f *Fake) View(buf tensor.Buffer, off, n int64) (tensor.Buffer, error) {
	hb, ok := buf.(*tensor.HostBuffer)
	if !ok || off < 0 || n < 0 || off+n > hb.Bytes() {
		return nil, fmt.Errorf("fake: view of %d bytes at %d of %v", n, off, buf)
	}
	return tensor.HostBufferOf(hb.Data()[off : off+n]), nil
}

// AllocPinned is plain host memory.
func (f *Fake) AllocPinned(n int64) (*tensor.HostBuffer, error) { return tensor.NewHostBuffer(n), nil }

// FreePinned does nothing.
func (f *Fake) FreePinned(*tensor.HostBuffer) error { return nil }

// UploadQueued copies at once, or after CopyDelay on a goroutine; done
// waits for the copy.
func (f *Fake) UploadQueued(dst tensor.Buffer, off int64, src []byte) (func() error, error) {
	if f.CopyDelay <= 0 {
		if err := f.Upload(dst, off, src); err != nil {
			return nil, err
		}
		return func() error { return nil }, nil
	}
	hb, ok := dst.(*tensor.HostBuffer)
	if !ok || off < 0 || off+int64(len(src)) > hb.Bytes() {
		return nil, fmt.Errorf("fake: upload of %d bytes at %d into %v", len(src), off, dst)
	}
	finished := make(chan struct{})
	go func() {
		time.Sleep(f.CopyDelay)
		copy(hb.Data()[off:], src)
		close(finished)
	}()
	return func() error { <-finished; return nil }, nil
}

// UploadAsync copies at once.
func (f *Fake) UploadAsync(dst tensor.Buffer, off int64, src []byte) (func() error, error) {
	if err := f.Upload(dst, off, src); err != nil {
		return nil, err
	}
	return func() error { return nil }, nil
}

// Chained is the CPU behind the conv3d chain (its CPU tier alone, no cache,
// no faults) and an unlimited memory budget: the padded convolutions go
// through Conv3dPadded as on a GPU, and the budget measures the peak.
func Chained(t testing.TB) (*memory.Backend, *convchain.Chain) {
	t.Helper()
	host := cpu.New()
	ch, err := convchain.New([]convchain.Tier{convchain.CPUTier(host)}, convchain.Options{CachePath: "off", Faults: &convchain.Faults{}})
	if err != nil {
		t.Fatal(err)
	}
	return memory.Budgeted(convchain.Wrap(host, ch), memory.Budget{Device: "test", Cap: 1 << 40}), ch
}
