package device

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/framepack-go/framepack/backend/gpu"
	"github.com/framepack-go/framepack/convchain"
	"github.com/framepack-go/framepack/hip"
	"github.com/framepack-go/framepack/internal/testutil/testdevice"
	"github.com/framepack-go/framepack/memory"
	"github.com/framepack-go/framepack/tensor"
)

func TestParseChoice(t *testing.T) {
	for in, want := range map[string]string{"": Auto, "auto": Auto, "cpu": CPU, "GPU": GPU, " gpu ": GPU} {
		got, err := ParseChoice(in)
		if err != nil || got != want {
			t.Errorf("ParseChoice(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"cuda", "gpu0", "rocm", "x"} {
		if _, err := ParseChoice(in); err == nil || !strings.Contains(err.Error(), "want auto, cpu or gpu") {
			t.Errorf("ParseChoice(%q): %v, want an error listing the choices", in, err)
		}
	}
}

func TestBadFlags(t *testing.T) {
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{Choice: "tpu"}, `--device "tpu"`},
		{Options{Choice: "cpu", VRAMLimit: memory.Bytes(64 * memory.MiB), Preserve: memory.Bytes(64 * memory.MiB)}, "preserved memory"},
		{Options{Choice: "cpu", VRAMLimit: memory.Bytes(1000 * memory.TiB)}, "is more than"},
		{Options{Choice: "cpu", VRAMLimit: memory.Fraction(1e-9)}, "--vram-limit 1e-09 ("},
		// A cap below the least fails before any device opens, also for "gpu".
		{Options{Choice: "gpu", VRAMLimit: memory.Bytes(8 * memory.MiB)}, "--vram-limit 8M (8.0 MiB) is below the 64.0 MiB"},
		{Options{Choice: "gpu", Conv: gpu.ConvOptions{Layout: "nhwc"}}, "conv3d layout"},
	} {
		c.o.Log = quiet()
		d, err := Open(c.o)
		if err == nil {
			d.Close()
			t.Errorf("%+v: no error", c.o)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %q does not say %q", c.o, err, c.want)
		}
	}
}

func TestCPU(t *testing.T) {
	d, err := Open(Options{Choice: CPU, VRAMLimit: memory.Bytes(64 * memory.MiB), Preserve: memory.Bytes(16 * memory.MiB), Log: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.GPU != nil || d.CPU == nil || d.IsGPU() {
		t.Fatalf("cpu device: GPU %v, CPU %v", d.GPU, d.CPU)
	}
	if !strings.HasPrefix(d.Name, "CPU (") {
		t.Errorf("name %q", d.Name)
	}
	if d.Budget.Cap != 64*memory.MiB || d.Budget.Preserve != 16*memory.MiB || d.Backend.Budget() != d.Budget {
		t.Errorf("budget %v, backend's %v", d.Budget, d.Backend.Budget())
	}
	// The cap holds: 48 MiB fits, 32 more do not.
	a, err := tensor.Alloc(d.Backend, tensor.F32, 12<<20)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tensor.Alloc(d.Backend, tensor.F32, 8<<20); err == nil {
		t.Error("an allocation above the cap succeeded")
	}
	tensor.Release(a)
	if s := d.Backend.Stats(); s.InUse != 0 || s.Peak != 48*memory.MiB {
		t.Errorf("stats %v", s)
	}
	d.Close()
	d.Close() // twice is harmless
}

// Without a GPU (FRAMEPACK_GPU=none makes any machine one), "gpu" is an
// error saying why and "auto" opens the CPU, logging why.
func TestNoGPU(t *testing.T) {
	t.Setenv("FRAMEPACK_GPU", "none")
	_, err := Open(Options{Choice: GPU, Log: quiet()})
	if err == nil {
		t.Fatal("--device gpu opened without a GPU")
	}
	if !strings.Contains(err.Error(), "--device gpu") || !strings.Contains(err.Error(), "FRAMEPACK_GPU=none") {
		t.Errorf("error %q does not give the reason", err)
	}
	var logs bytes.Buffer
	d, err := Open(Options{Choice: Auto, Log: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.GPU != nil {
		t.Fatal("auto opened a GPU with FRAMEPACK_GPU=none")
	}
	if !strings.Contains(logs.String(), "using the CPU") || !strings.Contains(logs.String(), "FRAMEPACK_GPU=none") {
		t.Errorf("no log line saying why the CPU was chosen:\n%s", logs.String())
	}
}

// On this machine (no GPU, or one): "auto" always opens something, and a
// GPU it opens is budgeted with the backend's cap at the budget's.
func TestAuto(t *testing.T) {
	var logs bytes.Buffer
	d, err := Open(Options{Log: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	t.Logf("%s; %s", d.Name, d.Budget)
	if d.GPU == nil {
		if _, err := hip.Open(0); err == nil {
			t.Errorf("auto chose the CPU although a GPU opens:\n%s", logs.String())
		}
		return
	}
	if d.Backend.Budget().Cap != d.Budget.Cap || d.Budget.Cap <= 0 {
		t.Errorf("budget %v", d.Budget)
	}
	x, err := tensor.Alloc(d.Backend, tensor.F32, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if s := d.GPU.Stats(); s.Limit != d.Budget.Cap {
		t.Errorf("GPU backend's cap %d, want the budget's %d", s.Limit, d.Budget.Cap)
	}
	if d.Conv == nil || convchain.ChainOf(d.Backend) != d.Conv.Chain() {
		t.Error("no conv3d chain between the budget and the GPU backend")
	} else {
		t.Logf("conv3d tiers %v", d.Conv.Chain().Tiers())
	}
	tensor.Release(x)
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil)) }

// FRAMEPACK_FAULTS is read by Open on every device: malformed, it is an
// error naming the variable, also on the CPU; on the CPU, alloc.nth and
// conv3d.cpu take effect and the GPU tiers' faults are logged as not
// applying.
func TestFaultsOnCPU(t *testing.T) {
	t.Setenv(convchain.FaultsEnv, "alloc.nth=often")
	if d, err := Open(Options{Choice: CPU, Log: quiet()}); err == nil || !strings.Contains(err.Error(), "FRAMEPACK_FAULTS") {
		d.Close()
		t.Fatalf("malformed FRAMEPACK_FAULTS on the CPU: %v", err)
	}

	t.Setenv(convchain.FaultsEnv, "alloc.nth=2")
	d, err := Open(Options{Choice: CPU, Log: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	a, err1 := tensor.Alloc(d.Backend, tensor.F32, 4)
	_, err2 := tensor.Alloc(d.Backend, tensor.F32, 4)
	if err1 != nil || !errors.Is(err2, tensor.ErrOutOfMemory) || !strings.Contains(err2.Error(), "alloc.nth=2") {
		t.Errorf("alloc.nth=2 on the CPU: first %v, second %v", err1, err2)
	}
	tensor.Release(a)
	d.Close()

	conv := func(d *Device) error {
		s := tensor.NewScope(d.Backend)
		defer s.Close()
		return tensor.Catch(func() {
			s.Conv3d(s.Full(tensor.F32, 1, 1, 2, 2, 3, 3), s.Full(tensor.F32, 1, 2, 2, 1, 1, 1), nil, [3]int{1, 1, 1}, [3]int{})
		})
	}
	var logs bytes.Buffer
	t.Setenv(convchain.FaultsEnv, "conv3d.cpu=error,conv3d.gemm=oom")
	d, err = Open(Options{Choice: CPU, Log: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := conv(d); err == nil || !strings.Contains(err.Error(), "injected fault conv3d.cpu=error") {
		t.Errorf("conv3d.cpu=error on the CPU: %v", err)
	}
	d.Close()
	if !strings.Contains(logs.String(), "conv3d.gemm do not apply on the CPU") {
		t.Errorf("no line about conv3d.gemm not applying:\n%s", logs.String())
	}

	t.Setenv(convchain.FaultsEnv, "")
	d, err = Open(Options{Choice: CPU, Log: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := conv(d); err != nil {
		t.Errorf("no faults: %v", err)
	}
}

// Options.Hook runs around the device's kernels, made from the compute
// backend under the budget; OpByOp reaches the scopes made on the device.
func TestHookAndOpByOp(t *testing.T) {
	var under tensor.Backend
	var classes []string
	hook := func(be tensor.Backend) tensor.Hook {
		under = be
		return func(op tensor.Op, run func() error) error {
			classes = append(classes, op.Class)
			return run()
		}
	}
	d, err := Open(Options{Choice: CPU, Hook: hook, OpByOp: true, Log: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if under == nil || under == tensor.Backend(d.Backend) {
		t.Fatalf("the hook was made on %T, want the compute backend under the budget", under)
	}
	s := tensor.NewScope(d.Backend)
	defer s.Close()
	if err := tensor.Catch(func() {
		x := s.To(tensor.FromFloat32([]float32{1, 2}, 2))
		s.Add(x, x)
	}); err != nil {
		t.Fatal(err)
	}
	if len(classes) == 0 {
		t.Error("the hook saw no kernel")
	}
	// On a backend with fused kernels (the CPU posing as a device), OpByOp
	// leaves them unused.
	fake := testdevice.NewFake()
	if !tensor.NewScope(withSettings(fake, Options{}, false)).Fused() {
		t.Fatal("the fake device has no fused kernels")
	}
	if tensor.NewScope(withSettings(fake, Options{OpByOp: true}, false)).Fused() {
		t.Error("with OpByOp, the fused kernels run")
	}
}
