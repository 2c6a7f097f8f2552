package hip

import (
	"errors"
	"math"
	"strings"
	"testing"
	"unsafe"
)

// openOrSkip opens device 0 or skips with the reason there is none.
func openOrSkip(t *testing.T) *Device {
	t.Helper()
	d, err := Open(0)
	if err != nil {
		if errors.Is(err, ErrNoGPU) {
			t.Skipf("no GPU here: %v", err)
		}
		t.Fatal(err)
	}
	t.Logf("device: %v; arch layout %d; driver %d, runtime %d; compiler %s", d, d.PropsLayout, d.DriverVersion,
		d.RuntimeVersion, d.CompilerVersion())
	t.Logf("libraries: %v; missing optional: %v", d.Libraries, d.MissingOptional)
	return d
}

// TestAMDTable checks the AMD table against the installed libamdhip64
// (Debian's libamdhip64-5 on CI): every required symbol resolves, and on a
// machine without an AMD GPU Open reports "no device" instead of crashing.
func TestAMDTable(t *testing.T) {
	if the == nil {
		t.Skip("built without cgo: no driver table (TestNoCgo covers this build)")
	}
	rep, err := Load(AMD)
	if err != nil {
		if strings.Contains(err.Error(), "cannot open") {
			t.Skipf("libamdhip64 is not installed (apt-get install libamdhip64-5): %v", err)
		}
		t.Fatalf("AMD table: %v", err)
	}
	t.Logf("loaded %v; optional entry points missing: %v", rep.Libraries, rep.MissingOptional)
	for _, m := range rep.MissingOptional {
		if strings.HasPrefix(m, "hiprtc") {
			t.Errorf("hiprtc not found: %s", m)
		}
	}
	t.Setenv("FRAMEPACK_GPU", "hip")
	d, err := Open(0)
	if err == nil {
		t.Logf("an AMD GPU is present: %v", d)
		return
	}
	if !errors.Is(err, ErrNoGPU) || !strings.Contains(err.Error(), "no device") {
		t.Fatalf("want a no-device error, have %v", err)
	}
	t.Logf("as expected without an AMD GPU: %v", err)
}

// TestNoCgo: a binary built without cgo reports why it has no GPU.
func TestNoCgo(t *testing.T) {
	if the != nil {
		t.Skip("built with cgo")
	}
	_, err := Open(0)
	if !errors.Is(err, ErrNoGPU) || !strings.Contains(err.Error(), "needs cgo") {
		t.Fatalf("want a needs-cgo error, have %v", err)
	}
}

func TestNoGPUForced(t *testing.T) {
	t.Setenv("FRAMEPACK_GPU", "none")
	if _, err := Open(0); !errors.Is(err, ErrNoGPU) {
		t.Fatalf("FRAMEPACK_GPU=none: want ErrNoGPU, have %v", err)
	}
}

const axpySrc = `
extern "C" __global__ void axpy(float* y, const float* x, float a, int n) {
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) y[i] += a * x[i];
}
extern "C" __global__ void broken(float* y) { y[0] = undeclared; }
`

// TestRuntime exercises the whole API on a real device: memory, pools,
// pinned memory, copies, memset, streams, events, compile, load, launch.
func TestRuntime(t *testing.T) {
	d := openOrSkip(t)
	free, total, err := d.MemGetInfo()
	if err != nil || total == 0 || free > total {
		t.Fatalf("MemGetInfo: %d / %d, %v", free, total, err)
	}
	s, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer d.DestroyStream(s)

	const n = 1000
	x := make([]float32, n)
	y := make([]float32, n)
	for i := range x {
		x[i] = float32(i)
		y[i] = 1
	}
	bytes := func(f []float32) []byte { return unsafe.Slice((*byte)(unsafe.Pointer(&f[0])), len(f)*4) }
	dx, err := d.Malloc(n * 4)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Free(dx)
	var dy uintptr
	if d.PoolsSupported {
		dy, err = d.MallocAsync(n*4, s)
	} else {
		dy, err = d.Malloc(n * 4)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := d.CopyH2D(dx, bytes(x), s); err != nil {
		t.Fatal(err)
	}
	// y through pinned memory and the async path.
	pin, err := d.HostAlloc(n * 4)
	if err != nil {
		t.Fatal(err)
	}
	defer d.HostFree(pin)
	copy(pin.Bytes(), bytes(y))
	if err := d.CopyH2DAsync(dy, pin.Ptr, n*4, s); err != nil {
		t.Fatal(err)
	}

	code, err := d.Compile(axpySrc[:strings.Index(axpySrc, "extern \"C\" __global__ void broken")], "axpy.cu", nil)
	if err != nil {
		t.Fatal(err)
	}
	mod, err := d.LoadModule(code)
	if err != nil {
		t.Fatal(err)
	}
	defer mod.Unload()
	fn, err := mod.Function("axpy")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mod.Function("nope"); err == nil {
		t.Error("lookup of a missing kernel succeeded")
	}
	start, _ := d.NewEvent(true)
	end, _ := d.NewEvent(true)
	defer d.DestroyEvent(start)
	defer d.DestroyEvent(end)
	d.Record(start, s)
	args := (&Args{}).Ptr(dy).Ptr(dx).F32(2).I32(n)
	if err := fn.Launch(Dim3{(n + 127) / 128}, Dim3{128}, 0, s, args); err != nil {
		t.Fatal(err)
	}
	d.Record(end, s)
	if err := d.EventSync(end); err != nil {
		t.Fatal(err)
	}
	ms, err := d.Elapsed(start, end)
	if err != nil || ms < 0 || ms > 1000 {
		t.Errorf("elapsed %v ms, %v", ms, err)
	}
	if done, err := d.EventDone(end); !done || err != nil {
		t.Errorf("event done %v, %v", done, err)
	}
	got := make([]float32, n)
	if err := d.CopyD2H(bytes(got), dy, s); err != nil {
		t.Fatal(err)
	}
	for i := range got {
		if got[i] != 1+2*float32(i) {
			t.Fatalf("axpy[%d] = %v, want %v", i, got[i], 1+2*float32(i))
		}
	}
	// D2D + memset + async D2H into pinned memory.
	if err := d.CopyD2DAsync(dx, dy, n*4, s); err != nil {
		t.Fatal(err)
	}
	if err := d.MemsetAsync(dy, 0, n*4, s); err != nil {
		t.Fatal(err)
	}
	if err := d.CopyD2HAsync(pin.Ptr, dx, n*4, s); err != nil {
		t.Fatal(err)
	}
	if err := d.Sync(s); err != nil {
		t.Fatal(err)
	}
	pf := unsafe.Slice((*float32)(pin.Ptr), n)
	if pf[7] != 15 {
		t.Errorf("D2D copy: %v", pf[7])
	}
	d.CopyD2H(bytes(got), dy, s)
	if got[5] != 0 {
		t.Errorf("memset: %v", got[5])
	}

	// A compile error carries the compiler's log.
	_, err = d.Compile(axpySrc, "broken.cu", nil)
	var ce *CompileError
	if !errors.As(err, &ce) || !strings.Contains(ce.Log, "undeclared") {
		t.Errorf("compile error without a log: %v", err)
	}

	// Pools: free, trim, read attributes; a huge allocation is an OOM.
	if d.PoolsSupported {
		pool, err := d.DefaultPool()
		if err != nil {
			t.Fatal(err)
		}
		if err := d.FreeAsync(dy, s); err != nil {
			t.Fatal(err)
		}
		d.Sync(s)
		if err := d.TrimPool(pool, 0); err != nil {
			t.Fatal(err)
		}
		res, err := d.PoolAttr(pool, PoolReservedMemCurrent)
		t.Logf("pool reserved after trim: %d bytes (%v)", res, err)
	} else {
		d.Free(dy)
	}
	_, err = d.Malloc(1 << 60)
	if !errors.Is(err, ErrOutOfMemory) {
		t.Errorf("2^60-byte malloc: want ErrOutOfMemory, have %v", err)
	}
	if math.IsNaN(float64(ms)) {
		t.Error("NaN elapsed time")
	}
}
