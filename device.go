package framepack

import (
	"bufio"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strings"

	"github.com/framepack-go/framepack/backend/cpu"
	"github.com/framepack-go/framepack/backend/gpu"
	"github.com/framepack-go/framepack/hip"
	"github.com/framepack-go/framepack/memory"
	"github.com/framepack-go/framepack/tensor"
)

// Device choices for Options.Device.
const (
	DeviceAuto = "auto"
	DeviceCPU  = "cpu"
	DeviceGPU  = "gpu"
)

// device is the compute backend chosen for a Pipeline.
type device struct {
	be     tensor.Backend // the inner backend
	budget memory.Budget
	gpu    bool
	close  func()
}

// openDevice picks the backend: the GPU when asked or, for auto, when one
// opens; otherwise the CPU, with a log line saying why.
func openDevice(choice string, log *slog.Logger) (*device, error) {
	switch choice {
	case "", DeviceAuto, DeviceCPU, DeviceGPU:
	default:
		return nil, fmt.Errorf("unknown device %q (want auto, cpu or gpu)", choice)
	}
	if choice == DeviceGPU || choice == "" || choice == DeviceAuto {
		d, err := openGPU(log)
		if err == nil {
			return d, nil
		}
		if choice == DeviceGPU {
			return nil, fmt.Errorf("--device gpu: %w", err)
		}
		log.Info("using the CPU backend: " + err.Error())
	}
	be, err := cpu.NewWithOptions(cpu.Options{})
	if err != nil {
		return nil, fmt.Errorf("cpu backend: %w", err)
	}
	total, avail := hostMemory()
	b := memory.NewBudget("cpu", total, avail)
	b.Source = "system memory"
	log.Info(fmt.Sprintf("device: CPU, %d threads, GEMM through %s", be.Threads(), be.BLAS()))
	return &device{be: be, budget: b, close: func() {}}, nil
}

// openGPU opens the GPU backend on device 0 with the device's default
// budget (system memory for an integrated GPU).
func openGPU(log *slog.Logger) (*device, error) {
	be, err := gpu.New(gpu.Options{Log: log})
	if err != nil {
		if errors.Is(err, hip.ErrNoGPU) {
			return nil, err
		}
		return nil, fmt.Errorf("opening the GPU: %w", err)
	}
	d := be.Device()
	closeAll := func() {
		be.Close()
		d.Close()
	}
	free, total, err := d.MemGetInfo()
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("GPU %s: %w", d.Name, err)
	}
	b, err := memory.BudgetFor(memory.DeviceInfo{Name: d.Name, Arch: d.Arch, Integrated: d.Integrated,
		TotalMem: int64(total), FreeMem: int64(free)}, "/")
	if err != nil {
		closeAll()
		return nil, err
	}
	log.Info(fmt.Sprintf("device: %s (%s), GEMM through %s", d.Name, d.Arch, be.BLAS()))
	return &device{be: be, budget: b, gpu: true, close: closeAll}, nil
}

// hostMemory is MemTotal and MemAvailable from /proc/meminfo (a 16 GiB
// guess elsewhere).
func hostMemory() (total, avail int64) {
	total, avail = 16*memory.GiB, 0
	if runtime.GOOS != "linux" {
		return
	}
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var kb int64
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		if _, err := fmt.Sscanf(strings.TrimSpace(v), "%d kB", &kb); err != nil {
			continue
		}
		switch k {
		case "MemTotal":
			total = kb << 10
		case "MemAvailable":
			avail = kb << 10
		}
	}
	return total, avail
}

// hostBackend is the CPU backend for the host-side work beside a GPU.
func hostBackend() (tensor.Backend, error) {
	be, err := cpu.NewWithOptions(cpu.Options{})
	if err != nil {
		return nil, fmt.Errorf("cpu backend: %w", err)
	}
	return be, nil
}
