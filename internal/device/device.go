// Package device opens the compute device every framepack command runs on:
// the GPU when one opens (or when asked for), else the CPU, with the memory
// budget of that device (--vram-limit, --preserve) enforced by a
// memory.Backend that every allocation goes through.
package device

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/framepack-go/framepack/backend/cpu"
	"github.com/framepack-go/framepack/backend/gpu"
	"github.com/framepack-go/framepack/convchain"
	"github.com/framepack-go/framepack/hip"
	"github.com/framepack-go/framepack/internal/envconfig"
	"github.com/framepack-go/framepack/memory"
	"github.com/framepack-go/framepack/tensor"
)

// Device choices, the --device flag's values.
const (
	Auto = "auto" // the GPU when one opens, else the CPU (the reason logged)
	CPU  = "cpu"
	GPU  = "gpu"
)

// Options configure Open.
type Options struct {
	// Choice is Auto (also ""), CPU or GPU.
	Choice string
	// Ordinal is the GPU to open (0: the first), for one process per GPU
	// with every GPU visible to the collective library.
	Ordinal int
	// VRAMLimit is --vram-limit, the cap on the engine's device memory (a
	// fraction is of the device's total); unset keeps the device's default
	// budget.
	VRAMLimit memory.Size
	// Preserve is --preserve, the memory kept free for activations while
	// weights stream; unset keeps the default.
	Preserve memory.Size
	// Conv configures the conv3d chain on a GPU (vendor library, GEMM,
	// naive kernel, CPU); its Log defaults to Log.
	Conv gpu.ConvOptions
	// Hook, when set, makes the hook that runs around every kernel of the
	// device (a profiler's, as tensor.Settings.Hook); it is given the
	// compute backend under the budget.
	Hook func(compute tensor.Backend) tensor.Hook
	// OpByOp leaves the fused kernels unused, as FRAMEPACK_OP_BY_OP does on
	// a GPU.
	OpByOp bool
	// Log receives the device line and, for Auto, why the CPU was chosen;
	// nil means slog.Default().
	Log *slog.Logger
}

// Device is an opened compute device.
type Device struct {
	// Backend is the budgeted compute backend: allocate everything on it
	// so that the cap holds (Stats, String report its accounting).
	Backend *memory.Backend
	// Budget is the budget in force when the device was opened.
	Budget memory.Budget
	// GPU is the GPU backend at the bottom of Backend; nil on the CPU.
	GPU *gpu.Backend
	// Conv is the conv3d chain between the GPU backend and the budget,
	// Backend = budget(Conv(GPU)); Conv.Chain() has the tiers' summary.
	// Nil on the CPU.
	Conv *convchain.Backend
	// CPU is a CPU backend for host-side work; on the CPU it is also the
	// backend under Backend.
	CPU *cpu.Backend
	// Name describes the device: "NVIDIA H200 (sm_90), GEMM through cuBLAS"
	// or "CPU (2 threads, GEMM through openblas)".
	Name string

	closed bool
}

// IsGPU reports whether the compute backend is a GPU.
func (d *Device) IsGPU() bool { return d.GPU != nil }

// ConvScratch is what the conv3d chain may take on a GPU beside any plan:
// the optimized tier's workspace and room for the GEMM tier's chunks.
const ConvScratch = gpu.DefaultChunkBytes + 64*memory.MiB

// DecodeRoom is the memory a VAE decode plans its tiles in (vae.VAE.Plan):
// what the cap leaves for activations once, on a GPU, ConvScratch is set
// aside. The weight copies the conv3d chain keeps are part of that reserve
// (they are bounded to half its chunk and let go of when a convolution
// runs short), so the room is the same whether they are held or not. None
// left is an out-of-memory error (memory.Backend.Room).
func (d *Device) DecodeRoom() (int64, error) {
	var scratch int64
	if d.IsGPU() {
		scratch = max(0, ConvScratch-d.GPU.KeptWeightBytes())
	}
	return d.Backend.Room(scratch)
}

// ParseChoice checks a --device value; "" is Auto.
func ParseChoice(s string) (string, error) {
	switch c := strings.ToLower(strings.TrimSpace(s)); c {
	case "", Auto:
		return Auto, nil
	case CPU, GPU:
		return c, nil
	}
	return "", fmt.Errorf("--device %q: want auto, cpu or gpu", s)
}

// checkOptions checks the options before a device is opened; whether the
// sizes fit the device is checked against its budget.
func checkOptions(o Options) error {
	if o.Ordinal < 0 {
		return fmt.Errorf("GPU ordinal %d: want 0 or more", o.Ordinal)
	}
	if _, err := gpu.ParseLayout(string(o.Conv.Layout)); err != nil {
		return err
	}
	if err := memory.CheckCap(o.VRAMLimit); err != nil {
		return fmt.Errorf("--vram-limit %w", err)
	}
	return nil
}

// configError is an option that is invalid on the opened device (a budget
// the flags make impossible, conv3d options): reported as it is, never a
// reason to fall back to the CPU.
type configError struct{ err error }

func (e *configError) Error() string { return e.err.Error() }
func (e *configError) Unwrap() error { return e.err }

// Open opens the device o chooses with its budget: the one way the
// library (framepack.Load) and every command open a device. For Auto, a GPU
// that does not open (none present, no runtime, no memory free) leaves the
// CPU, with a log line saying why; for GPU it is an error with the reason.
func Open(o Options) (*Device, error) {
	log := o.Log
	if log == nil {
		log = slog.Default()
	}
	choice, err := ParseChoice(o.Choice)
	if err != nil {
		return nil, err
	}
	if err := checkOptions(o); err != nil {
		return nil, err
	}
	// FRAMEPACK_FAULTS is read here, once, whatever the device: a malformed
	// value is an error on the CPU too, and the parsed faults go down to
	// the conv3d chain instead of being read again.
	if o.Conv.Faults == nil {
		f, err := convchain.FaultsFromEnv()
		if err != nil {
			return nil, err
		}
		o.Conv.Faults = f
	}
	if f := o.Conv.Faults; f.Any() {
		log.Warn(fmt.Sprintf("device: %s=%s: faults will be injected", convchain.FaultsEnv, f))
	}
	host, err := cpu.NewWithOptions(cpu.Options{})
	if err != nil {
		return nil, fmt.Errorf("cpu backend: %w", err)
	}
	if choice != CPU {
		d, err := openGPU(o, host, log)
		if err == nil {
			log.Info("device: " + d.Name)
			log.Info("memory: " + d.Budget.String())
			return d, nil
		}
		var be *configError
		if errors.As(err, &be) {
			return nil, err
		}
		if choice == GPU {
			return nil, fmt.Errorf("--device gpu: %w", err)
		}
		log.Info("device: using the CPU: " + err.Error())
	}
	d, err := openCPU(o, host, log)
	if err != nil {
		return nil, err
	}
	log.Info("device: " + d.Name)
	log.Info("memory: " + d.Budget.String())
	return d, nil
}

// openCPU budgets the CPU from system memory.
func openCPU(o Options, host *cpu.Backend, log *slog.Logger) (*Device, error) {
	// No GPU here: the amdgpu counters ReadSysMem also reads are unused.
	sys, err := memory.ReadSysMem("/", "", 0)
	total, avail := sys.MemTotal, sys.MemAvailable
	if err != nil || total <= 0 {
		total, avail = 16*memory.GiB, 0 // no /proc/meminfo: a modest guess
	}
	b := memory.NewBudget("cpu", total, avail)
	b.Source = "system memory"
	if err != nil || sys.MemTotal <= 0 {
		b.Source = "system memory unknown, 16 GiB assumed"
	}
	b, err = b.With(o.VRAMLimit, o.Preserve)
	if err != nil {
		return nil, err
	}
	compute, err := cpuFaults(host, o.Conv.Faults, log)
	if err != nil {
		return nil, err
	}
	return &Device{
		Backend: memory.Budgeted(withSettings(compute, o, false), b),
		Budget:  b,
		CPU:     host,
		Name:    fmt.Sprintf("CPU (%d threads, GEMM through %s)", host.Threads(), host.BLAS()),
	}, nil
}

// cpuFaults applies the faults that exist on the CPU to its compute
// backend: alloc.nth, and conv3d.cpu through a chain of the one CPU tier
// (the GPU's last tier). Faults of the GPU's tiers are logged as not
// applying; the host backend itself (Device.CPU) stays unwrapped.
func cpuFaults(host *cpu.Backend, f *convchain.Faults, log *slog.Logger) (tensor.Backend, error) {
	if !f.Any() {
		return host, nil
	}
	cf := &convchain.Faults{Conv3d: map[string]convchain.Fault{}, AllocNth: f.AllocNth}
	var skipped []string
	for tier, fault := range f.Conv3d {
		if tier == "cpu" {
			cf.Conv3d[tier] = fault
		} else {
			skipped = append(skipped, "conv3d."+tier)
		}
	}
	if len(skipped) > 0 {
		slices.Sort(skipped)
		log.Warn(fmt.Sprintf("device: %s: %s do not apply on the CPU (its one conv3d tier is cpu)", convchain.FaultsEnv, strings.Join(skipped, ", ")))
	}
	be := cf.WrapBackend(host)
	if len(cf.Conv3d) > 0 {
		chain, err := convchain.New([]convchain.Tier{convchain.CPUTier(host)},
			convchain.Options{Device: "cpu", CachePath: "off", NoSearch: true, Faults: cf, Log: log})
		if err != nil {
			return nil, err
		}
		be = convchain.Wrap(be, chain)
	}
	return be, nil
}

// openGPU opens GPU 0: its budget from the runtime's memory figures (system
// memory for an integrated GPU), the flags applied, the GPU backend capped
// at the budget's cap, the conv3d chain and the budget on top.
func openGPU(o Options, host *cpu.Backend, log *slog.Logger) (*Device, error) {
	// The device is opened first to read its memory: the GPU backend's
	// allocator takes its cap when it is made. (hip.Open of an open
	// device shares its context; one Close releases it.)
	hd, err := hip.Open(o.Ordinal)
	if err != nil {
		if errors.Is(err, hip.ErrNoGPU) {
			return nil, err
		}
		return nil, fmt.Errorf("opening the GPU: %w", err)
	}
	free, total, err := hd.MemGetInfo()
	if err != nil {
		hd.Close()
		return nil, fmt.Errorf("GPU %s: %w", hd.Name, err)
	}
	b, err := memory.BudgetFor(memory.DeviceInfo{Name: hd.Name, Arch: hd.Arch, Integrated: hd.Integrated,
		TotalMem: int64(total), FreeMem: int64(free)}, "/")
	if err != nil {
		hd.Close()
		return nil, err
	}
	if b, err = b.With(o.VRAMLimit, o.Preserve); err != nil {
		hd.Close()
		return nil, &configError{err}
	}
	g, err := gpu.New(gpu.Options{Device: o.Ordinal, Limit: b.Cap, Log: log})
	if err != nil {
		hd.Close()
		return nil, fmt.Errorf("opening the GPU backend on %s: %w", hd.Name, err)
	}
	closeGPU := func() {
		g.Close()
		hd.Close()
	}
	co := o.Conv
	if co.Log == nil {
		co.Log = log
	}
	conv, err := g.WithConvChain(host, co)
	if err != nil {
		closeGPU()
		return nil, &configError{fmt.Errorf("conv3d on %s: %w", hd.Name, err)}
	}
	return &Device{
		Backend: memory.Budgeted(withSettings(conv, o, true), b),
		Budget:  b,
		GPU:     g,
		Conv:    conv,
		CPU:     host,
		Name:    fmt.Sprintf("%s (%s), GEMM through %s", hd.Name, hd.Arch, g.BLAS()),
	}, nil
}

// Close releases the device. Tensors still allocated on it become invalid.
// Closing twice does nothing.
func (d *Device) Close() {
	if d == nil || d.closed {
		return
	}
	d.closed = true
	if d.GPU != nil {
		d.GPU.Close()
		d.GPU.Device().Close()
	}
}

// withSettings gives the compute backend the settings every scope made on
// it honours: o's hook and op-by-op, and on a GPU FRAMEPACK_OP_BY_OP.
func withSettings(be tensor.Backend, o Options, onGPU bool) tensor.Backend {
	st := tensor.Settings{OpByOp: o.OpByOp || (onGPU && envconfig.Read().OpByOp)}
	if o.Hook != nil {
		st.Hook = o.Hook(be)
	}
	if st.Hook == nil && !st.OpByOp {
		return be
	}
	return tensor.WithSettings(be, st)
}
