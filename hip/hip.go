// Package hip is framepack's GPU runtime binding: the subset of HIP an
// inference engine needs (devices, memory and stream-ordered pools, pinned
// host memory, async copies, streams, events, modules, kernel launches and
// run-time compilation), over two tables found at run time with dlopen:
//
//   - AMD: libamdhip64.so.{7,6,5} and hiprtc (libhiprtc.so.{7,6,5} or the
//     hiprtc symbols inside libamdhip64);
//   - NVIDIA: libcuda.so.1 (driver API, _v2 symbols, primary context) and
//     libnvrtc.so.{13,12}: the calls HIP's own NVIDIA platform makes.
//
// No SDK is needed to build, only cgo. Without cgo, or on a machine with
// neither library or no device, Open returns an error that says why for each
// library tried, and callers use the CPU backend.
//
// Every call makes its device current on the calling OS thread first, so the
// API may be used from any goroutine. Code that calls vendor libraries
// directly (rocBLAS, MIOpen) with the device's stream uses Bind.
//
// Environment: FRAMEPACK_GPU=hip|cuda|none picks or disables the platform;
// ROCM_PATH and CUDA_PATH add library directories to the loader's search
// (/opt/rocm/lib and /usr/local/cuda/lib64 are tried too), and
// FRAMEPACK_NVRTC_DIR names the directory of libnvrtc.so.{13,12}. libcuda
// is only ever loaded by its soname.
package hip

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"unsafe"

	"github.com/framepack-go/framepack/internal/dynlib"
	"github.com/framepack-go/framepack/internal/envconfig"
)

// Vendor is the platform behind a Device.
type Vendor = dynlib.Vendor

const (
	AMD    = dynlib.AMD    // HIP runtime + hiprtc
	NVIDIA = dynlib.NVIDIA // CUDA driver API + NVRTC
)

// Platform names v with its runtime: "AMD (HIP)", "NVIDIA (CUDA)".
func Platform(v Vendor) string {
	switch v {
	case AMD:
		return "AMD (HIP)"
	case NVIDIA:
		return "NVIDIA (CUDA)"
	}
	return v.String()
}

// ErrOutOfMemory is wrapped by errors of allocations the driver refused.
var ErrOutOfMemory = errors.New("device out of memory")

// ErrNoGPU is wrapped by Open's error when no usable device was found.
var ErrNoGPU = errors.New("no GPU")

// Error is a failed runtime call.
type Error struct {
	Op   string // the function, e.g. "hipMalloc" / "cuMemAlloc"
	Code int
	Name string // e.g. hipErrorOutOfMemory
	Msg  string
}

func (e *Error) Error() string {
	if e.Name != "" {
		return fmt.Sprintf("%s: %s (%s %d)", e.Op, e.Msg, e.Name, e.Code)
	}
	return fmt.Sprintf("%s: %s (error %d)", e.Op, e.Msg, e.Code)
}

// Unwrap maps out-of-memory codes (2 in HIP, CUDA and the driver API; 1052
// is HIP's HSA runtime memory error) to ErrOutOfMemory.
func (e *Error) Unwrap() error {
	if e.Code == 2 || e.Code == 1052 {
		return ErrOutOfMemory
	}
	return nil
}

// Pool attributes (same numbers in HIP, CUDA runtime and driver API).
const (
	PoolReservedMemCurrent = 5
	PoolReservedMemHigh    = 6
	PoolUsedMemCurrent     = 7
	PoolUsedMemHigh        = 8
)

// driver is the C table behind the API; nil without cgo.
type driver interface {
	load(v Vendor) (paths, missing []string, err error)
	reset()
	code(op string, r int) error
	init() int
	deviceCount() (int, int)
	deviceOpen(dev int) int
	deviceClose(dev int)
	makeCurrent(dev int) int
	deviceName(dev int) (string, int)
	totalMem(dev int) (uint64, int)
	attr(dev, a int) (int, int)
	arch(dev int) (string, int, int)
	driverVersion() (int, int)
	runtimeVersion() (int, int)

	memInfo(dev int) (uint64, uint64, int)
	malloc(dev int, n uint64) (uintptr, int)
	free(dev int, p uintptr) int
	haveAsync() bool
	mallocAsync(dev int, n uint64, s uintptr) (uintptr, int)
	freeAsync(dev int, p, s uintptr) int
	defaultPool(dev int) (uintptr, int)
	poolTrim(dev int, pool uintptr, keep uint64) int
	poolSetThreshold(dev int, pool uintptr, n uint64) int
	poolGetAttr(dev int, pool uintptr, attr int) (uint64, int)
	hostAlloc(dev int, n uint64) (unsafe.Pointer, int)
	hostFree(dev int, p unsafe.Pointer) int

	h2dAsync(dev int, dst uintptr, src unsafe.Pointer, n uint64, s uintptr) int
	d2hAsync(dev int, dst unsafe.Pointer, src uintptr, n uint64, s uintptr) int
	d2dAsync(dev int, dst, src uintptr, n uint64, s uintptr) int
	h2dSync(dev int, dst uintptr, src []byte, s uintptr) int
	d2hSync(dev int, dst []byte, src uintptr, s uintptr) int
	memsetAsync(dev int, dst uintptr, v byte, n uint64, s uintptr) int

	streamCreate(dev int) (uintptr, int)
	streamDestroy(dev int, s uintptr) int
	streamSync(dev int, s uintptr) int
	streamWaitEvent(dev int, s, e uintptr) int
	deviceSync(dev int) int
	eventCreate(dev int, timing bool) (uintptr, int)
	eventDestroy(dev int, e uintptr) int
	eventRecord(dev int, e, s uintptr) int
	eventSync(dev int, e uintptr) int
	eventQuery(dev int, e uintptr) int
	eventElapsed(dev int, a, b uintptr) (float32, int)

	moduleLoad(dev int, image []byte) (uintptr, int)
	moduleUnload(dev int, m uintptr) int
	moduleFunction(dev int, m uintptr, name string) (uintptr, int)
	funcSetMaxDynamicShared(dev int, f uintptr, n int) int
	launch(dev int, f uintptr, grid, block [3]uint32, shmem uint32, s uintptr, buf []byte, offs []int32) int

	haveRTC() bool
	rtcCompile(src, name string, opts []string, ptx bool) ([]byte, string, int)
	rtcError(r int) string
	rtcVersion() (int, int, int)
	rtcSupportedArchs() []int
}

// the is the process's driver table (set by cgo.go).
var the driver

// Device is one opened GPU and what is known about it.
type Device struct {
	Ordinal int
	Vendor  Vendor
	Name    string
	// Arch is the compile target: gcnArchName on AMD (e.g. "gfx1100",
	// "gfx90a:sramecc+:xnack-"), "sm_XY" on NVIDIA.
	Arch string
	// PropsLayout is the hipDeviceProp_t layout read for Arch (600 for
	// R0600, 0 for R0000); -1 on NVIDIA.
	PropsLayout         int
	TotalMem            uint64
	Multiprocessors     int
	WarpSize            int
	SharedPerBlock      int
	SharedPerBlockOptin int
	ComputeMajor        int
	ComputeMinor        int
	Integrated          bool
	PoolsSupported      bool
	DriverVersion       int
	RuntimeVersion      int
	// Libraries are the paths of the vendor libraries loaded.
	Libraries []string
	// MissingOptional names optional entry points (or a compiler) absent
	// from the loaded libraries.
	MissingOptional []string

	drv driver
}

var (
	openMu sync.Mutex
	loaded Vendor // vendor whose table is live, 0 when none
	loadP  []string
	loadM  []string
	inited bool
)

// LoadReport is what Load found.
type LoadReport struct {
	Vendor          Vendor
	Libraries       []string
	MissingOptional []string
}

// Load opens one vendor's libraries and resolves every entry point of its
// table without touching a device. It fails when a library is absent or a
// required symbol is missing.
func Load(v Vendor) (*LoadReport, error) {
	openMu.Lock()
	defer openMu.Unlock()
	if err := loadLocked(v); err != nil {
		return nil, err
	}
	return &LoadReport{Vendor: v, Libraries: loadP, MissingOptional: loadM}, nil
}

func loadLocked(v Vendor) error {
	if the == nil {
		return errors.New("GPU support needs cgo (this binary was built with CGO_ENABLED=0)")
	}
	if loaded == v {
		return nil
	}
	if loaded != 0 {
		the.reset()
		loaded, inited = 0, false
	}
	p, m, err := the.load(v)
	if err != nil {
		return err
	}
	loaded, loadP, loadM = v, p, m
	return nil
}

// Open opens device ordinal of the first platform that has one: AMD, then
// NVIDIA, or only the one FRAMEPACK_GPU names ("hip" or "cuda"; "none"
// disables the GPU). The error wraps ErrNoGPU and says why for each library
// tried.
func Open(ordinal int) (*Device, error) {
	var order []Vendor
	gpu := envconfig.Read().GPU
	switch gpu {
	case "", "auto":
		order = []Vendor{AMD, NVIDIA}
	case "hip", "amd", "rocm":
		order = []Vendor{AMD}
	case "cuda", "nvidia":
		order = []Vendor{NVIDIA}
	case "none", "cpu", "off":
		return nil, fmt.Errorf("%w: disabled by %s=%s", ErrNoGPU, envconfig.GPU, gpu)
	default:
		return nil, fmt.Errorf("%w: %s=%q, want hip, cuda or none", ErrNoGPU, envconfig.GPU, gpu)
	}
	openMu.Lock()
	defer openMu.Unlock()
	if the == nil {
		return nil, fmt.Errorf("%w: GPU support needs cgo (this binary was built with CGO_ENABLED=0)", ErrNoGPU)
	}
	// A platform already live is tried first, and alone if it has devices.
	if loaded != 0 && inited {
		order = append([]Vendor{loaded}, order...)
	}
	var why []string
	tried := map[Vendor]bool{}
	for _, v := range order {
		if tried[v] {
			continue
		}
		tried[v] = true
		d, err := openLocked(v, ordinal)
		if err == nil {
			return d, nil
		}
		why = append(why, fmt.Sprintf("%s: %v", v, err))
	}
	return nil, fmt.Errorf("%w: %s", ErrNoGPU, strings.Join(why, "; "))
}

func openLocked(v Vendor, ordinal int) (*Device, error) {
	if err := loadLocked(v); err != nil {
		return nil, err
	}
	drv := the
	if !inited {
		if r := drv.init(); r != 0 {
			return nil, fmt.Errorf("no device (%v)", drv.code(initName(v), r))
		}
		inited = true
	}
	n, r := drv.deviceCount()
	if r != 0 {
		return nil, fmt.Errorf("no device (%v)", drv.code("device count", r))
	}
	if n == 0 {
		return nil, errors.New("no device (the driver reports 0 devices)")
	}
	if ordinal < 0 || ordinal >= n {
		return nil, fmt.Errorf("device %d requested, %d present", ordinal, n)
	}
	if r := drv.deviceOpen(ordinal); r != 0 {
		return nil, drv.code("open device", r)
	}
	d := &Device{Ordinal: ordinal, Vendor: v, drv: drv, Libraries: loadP, MissingOptional: loadM}
	var err error
	chk := func(op string, r int) {
		if r != 0 && err == nil {
			err = drv.code(op, r)
		}
	}
	d.Name, r = drv.deviceName(ordinal)
	chk("device name", r)
	d.TotalMem, r = drv.totalMem(ordinal)
	chk("device total memory", r)
	d.Arch, d.PropsLayout, r = drv.arch(ordinal)
	chk("device properties", r)
	attr := func(a int) int {
		x, r := drv.attr(ordinal, a)
		chk("device attribute", r)
		return x
	}
	d.Multiprocessors = attr(attrMPCount)
	d.Integrated = attr(attrIntegrated) != 0
	d.ComputeMajor = attr(attrCCMajor)
	d.ComputeMinor = attr(attrCCMinor)
	d.WarpSize = attr(attrWarpSize)
	d.SharedPerBlock = attr(attrSharedPerBlock)
	d.SharedPerBlockOptin = attr(attrSharedPerBlockOptin)
	d.PoolsSupported = attr(attrPoolsSupported) != 0 && drv.haveAsync()
	d.DriverVersion, _ = drv.driverVersion()
	d.RuntimeVersion, _ = drv.runtimeVersion()
	if err != nil {
		return nil, err
	}
	if d.Arch == "" {
		return nil, errors.New("device reports no architecture name")
	}
	return d, nil
}

func initName(v Vendor) string {
	if v == AMD {
		return "hipInit"
	}
	return "cuInit"
}

// attribute indices of the C shim (framepack_hip_shim.h).
const (
	attrMPCount = iota
	attrIntegrated
	attrCCMajor
	attrCCMinor
	attrWarpSize
	attrSharedPerBlock
	attrSharedPerBlockOptin
	attrPoolsSupported
)

func (d *Device) err(op string, r int) error {
	if r == 0 {
		return nil
	}
	return d.drv.code(op, r)
}

// Close releases the device's context (NVIDIA's primary context).
func (d *Device) Close() { d.drv.deviceClose(d.Ordinal) }

// String is a one-line description.
func (d *Device) String() string {
	kind := "discrete"
	if d.Integrated {
		kind = "integrated"
	}
	return fmt.Sprintf("%s %q (%s, %s, %.1f GiB, %d compute units)", Platform(d.Vendor), d.Name, d.Arch, kind,
		float64(d.TotalMem)/(1<<30), d.Multiprocessors)
}

// Bind locks the calling goroutine to its OS thread and makes the device
// current there, for calls into other vendor libraries (rocBLAS, MIOpen,
// cuBLAS, cuDNN) that use the thread's current device. Call the returned
// function when done.
func (d *Device) Bind() (unbind func(), err error) {
	runtime.LockOSThread()
	if err := d.err("set device", d.drv.makeCurrent(d.Ordinal)); err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	return runtime.UnlockOSThread, nil
}

// MemGetInfo returns the free and total device memory as the driver sees
// it (on integrated AMD parts only the VRAM carve-out).
func (d *Device) MemGetInfo() (free, total uint64, err error) {
	f, t, r := d.drv.memInfo(d.Ordinal)
	return f, t, d.err("memory info", r)
}

// Malloc allocates n bytes of device memory (synchronous allocator).
func (d *Device) Malloc(n uint64) (uintptr, error) {
	p, r := d.drv.malloc(d.Ordinal, n)
	return p, d.err("malloc", r)
}

// Free releases memory from Malloc.
func (d *Device) Free(p uintptr) error { return d.err("free", d.drv.free(d.Ordinal, p)) }

// MallocAsync allocates from the device's default stream-ordered pool; the
// memory is usable by work queued on s after this call.
func (d *Device) MallocAsync(n uint64, s Stream) (uintptr, error) {
	if !d.PoolsSupported {
		return 0, errors.New("stream-ordered allocation not supported")
	}
	p, r := d.drv.mallocAsync(d.Ordinal, n, uintptr(s))
	return p, d.err("malloc async", r)
}

// FreeAsync returns memory to the pool once the work queued on s is done.
func (d *Device) FreeAsync(p uintptr, s Stream) error {
	return d.err("free async", d.drv.freeAsync(d.Ordinal, p, uintptr(s)))
}

// MemPool is a stream-ordered memory pool.
type MemPool uintptr

// DefaultPool is the device's default memory pool.
func (d *Device) DefaultPool() (MemPool, error) {
	p, r := d.drv.defaultPool(d.Ordinal)
	return MemPool(p), d.err("default mem pool", r)
}

// TrimPool releases memory the pool holds beyond keep bytes (free blocks
// only) back to the driver.
func (d *Device) TrimPool(p MemPool, keep uint64) error {
	return d.err("mem pool trim", d.drv.poolTrim(d.Ordinal, uintptr(p), keep))
}

// SetPoolReleaseThreshold sets how much free memory the pool keeps cached
// across synchronisations (^uint64(0): everything, until trimmed).
func (d *Device) SetPoolReleaseThreshold(p MemPool, n uint64) error {
	return d.err("mem pool set attribute", d.drv.poolSetThreshold(d.Ordinal, uintptr(p), n))
}

// PoolAttr reads a uint64 pool attribute (PoolReservedMemCurrent, …).
func (d *Device) PoolAttr(p MemPool, attr int) (uint64, error) {
	v, r := d.drv.poolGetAttr(d.Ordinal, uintptr(p), attr)
	return v, d.err("mem pool get attribute", r)
}

// HostMem is page-locked host memory, usable for asynchronous copies.
type HostMem struct {
	Ptr unsafe.Pointer
	N   int
}

// Bytes is the memory as a byte slice.
func (h HostMem) Bytes() []byte {
	if h.Ptr == nil {
		return nil
	}
	return unsafe.Slice((*byte)(h.Ptr), h.N)
}

// HostAlloc allocates n bytes of pinned host memory.
func (d *Device) HostAlloc(n int) (HostMem, error) {
	p, r := d.drv.hostAlloc(d.Ordinal, uint64(n))
	if r != 0 {
		return HostMem{}, d.err("host alloc", r)
	}
	return HostMem{Ptr: p, N: n}, nil
}

// HostFree releases pinned host memory.
func (d *Device) HostFree(h HostMem) error {
	if h.Ptr == nil {
		return nil
	}
	return d.err("host free", d.drv.hostFree(d.Ordinal, h.Ptr))
}

// CopyH2DAsync queues a host-to-device copy. src must be pinned or C
// memory that stays valid until the copy completes (not Go memory).
func (d *Device) CopyH2DAsync(dst uintptr, src unsafe.Pointer, n int, s Stream) error {
	return d.err("memcpy H2D", d.drv.h2dAsync(d.Ordinal, dst, src, uint64(n), uintptr(s)))
}

// CopyD2HAsync queues a device-to-host copy into pinned or C memory.
func (d *Device) CopyD2HAsync(dst unsafe.Pointer, src uintptr, n int, s Stream) error {
	return d.err("memcpy D2H", d.drv.d2hAsync(d.Ordinal, dst, src, uint64(n), uintptr(s)))
}

// CopyD2DAsync queues a device-to-device copy.
func (d *Device) CopyD2DAsync(dst, src uintptr, n int64, s Stream) error {
	return d.err("memcpy D2D", d.drv.d2dAsync(d.Ordinal, dst, src, uint64(n), uintptr(s)))
}

// CopyH2D copies Go memory to the device in stream order and waits for it.
func (d *Device) CopyH2D(dst uintptr, src []byte, s Stream) error {
	if len(src) == 0 {
		return nil
	}
	return d.err("memcpy H2D", d.drv.h2dSync(d.Ordinal, dst, src, uintptr(s)))
}

// CopyD2H waits for s and copies device memory into Go memory.
func (d *Device) CopyD2H(dst []byte, src uintptr, s Stream) error {
	if len(dst) == 0 {
		return nil
	}
	return d.err("memcpy D2H", d.drv.d2hSync(d.Ordinal, dst, src, uintptr(s)))
}

// MemsetAsync queues setting n bytes to v.
func (d *Device) MemsetAsync(dst uintptr, v byte, n int64, s Stream) error {
	return d.err("memset", d.drv.memsetAsync(d.Ordinal, dst, v, uint64(n), uintptr(s)))
}

// Stream is a non-blocking stream handle (hipStream_t / CUstream).
type Stream uintptr

// NewStream creates a non-blocking stream.
func (d *Device) NewStream() (Stream, error) {
	s, r := d.drv.streamCreate(d.Ordinal)
	return Stream(s), d.err("stream create", r)
}

// DestroyStream destroys s.
func (d *Device) DestroyStream(s Stream) error {
	return d.err("stream destroy", d.drv.streamDestroy(d.Ordinal, uintptr(s)))
}

// Sync waits for all work queued on s.
func (d *Device) Sync(s Stream) error {
	return d.err("stream synchronize", d.drv.streamSync(d.Ordinal, uintptr(s)))
}

// SyncDevice waits for all work on the device.
func (d *Device) SyncDevice() error { return d.err("device synchronize", d.drv.deviceSync(d.Ordinal)) }

// WaitEvent makes work queued on s after this call wait for e.
func (d *Device) WaitEvent(s Stream, e Event) error {
	return d.err("stream wait event", d.drv.streamWaitEvent(d.Ordinal, uintptr(s), uintptr(e)))
}

// Event is an event handle.
type Event uintptr

// NewEvent creates an event; timing events can measure elapsed time.
func (d *Device) NewEvent(timing bool) (Event, error) {
	e, r := d.drv.eventCreate(d.Ordinal, timing)
	return Event(e), d.err("event create", r)
}

// DestroyEvent destroys e.
func (d *Device) DestroyEvent(e Event) error {
	return d.err("event destroy", d.drv.eventDestroy(d.Ordinal, uintptr(e)))
}

// Record records e on s.
func (d *Device) Record(e Event, s Stream) error {
	return d.err("event record", d.drv.eventRecord(d.Ordinal, uintptr(e), uintptr(s)))
}

// EventSync waits for e.
func (d *Device) EventSync(e Event) error {
	return d.err("event synchronize", d.drv.eventSync(d.Ordinal, uintptr(e)))
}

// EventDone reports whether the work before e has completed.
func (d *Device) EventDone(e Event) (bool, error) {
	switch r := d.drv.eventQuery(d.Ordinal, uintptr(e)); r {
	case 0:
		return true, nil
	case 600: // not ready
		return false, nil
	default:
		return false, d.err("event query", r)
	}
}

// Elapsed is the time in milliseconds between two recorded timing events.
func (d *Device) Elapsed(start, end Event) (float32, error) {
	ms, r := d.drv.eventElapsed(d.Ordinal, uintptr(start), uintptr(end))
	return ms, d.err("event elapsed time", r)
}

// Module is a loaded code object.
type Module struct {
	d *Device
	h uintptr
}

// LoadModule loads a code object (AMD ELF / bundle, NVIDIA CUBIN, fatbin
// or PTX).
func (d *Device) LoadModule(image []byte) (*Module, error) {
	if len(image) == 0 {
		return nil, errors.New("load module: empty image")
	}
	m, r := d.drv.moduleLoad(d.Ordinal, image)
	if r != 0 {
		return nil, d.err("module load", r)
	}
	return &Module{d: d, h: m}, nil
}

// Unload unloads the module.
func (m *Module) Unload() error {
	return m.d.err("module unload", m.d.drv.moduleUnload(m.d.Ordinal, m.h))
}

// Function is a kernel of a module.
type Function struct {
	d    *Device
	h    uintptr
	Name string
}

// Function looks up an extern "C" kernel by name.
func (m *Module) Function(name string) (*Function, error) {
	f, r := m.d.drv.moduleFunction(m.d.Ordinal, m.h, name)
	if r != 0 {
		return nil, fmt.Errorf("kernel %s: %w", name, m.d.err("module get function", r))
	}
	return &Function{d: m.d, h: f, Name: name}, nil
}

// SetMaxDynamicShared allows launches with up to n bytes of dynamic shared
// memory (needed above 48 KiB on NVIDIA; a no-op on AMD).
func (f *Function) SetMaxDynamicShared(n int) error {
	return f.d.err("func set attribute", f.d.drv.funcSetMaxDynamicShared(f.d.Ordinal, f.h, n))
}

// Dim3 is a grid or block size.
type Dim3 [3]uint32

// Launch queues the kernel on s.
func (f *Function) Launch(grid, block Dim3, shmem int, s Stream, a *Args) error {
	for i := range grid {
		if grid[i] == 0 {
			grid[i] = 1
		}
		if block[i] == 0 {
			block[i] = 1
		}
	}
	var buf []byte
	var offs []int32
	if a != nil {
		buf, offs = a.buf, a.offs
	}
	if r := f.d.drv.launch(f.d.Ordinal, f.h, grid, block, uint32(shmem), uintptr(s), buf, offs); r != 0 {
		return fmt.Errorf("launch %s grid %v block %v: %w", f.Name, grid, block, f.d.err("launch", r))
	}
	return nil
}

// Args packs kernel arguments, each at its natural alignment, as the
// kernel's parameter list expects.
type Args struct {
	buf  []byte
	offs []int32
}

func (a *Args) put(b []byte, align int) *Args {
	for len(a.buf)%align != 0 {
		a.buf = append(a.buf, 0)
	}
	a.offs = append(a.offs, int32(len(a.buf)))
	a.buf = append(a.buf, b...)
	return a
}

// Ptr adds a device pointer.
func (a *Args) Ptr(p uintptr) *Args { return a.U64(uint64(p)) }

// U64 adds a 64-bit integer.
func (a *Args) U64(v uint64) *Args {
	return a.put(unsafe.Slice((*byte)(unsafe.Pointer(&v)), 8), 8)
}

// I64 adds a 64-bit signed integer.
func (a *Args) I64(v int64) *Args { return a.U64(uint64(v)) }

// I32 adds a 32-bit integer.
func (a *Args) I32(v int32) *Args {
	return a.put(unsafe.Slice((*byte)(unsafe.Pointer(&v)), 4), 4)
}

// F32 adds a float.
func (a *Args) F32(v float32) *Args {
	return a.put(unsafe.Slice((*byte)(unsafe.Pointer(&v)), 4), 4)
}

// Struct adds a struct passed by value: its bytes and alignment.
func (a *Args) Struct(b []byte, align int) *Args { return a.put(b, align) }

// HaveCompiler reports whether a run-time compiler was found.
func (d *Device) HaveCompiler() bool { return d.drv.haveRTC() }

// CompilerVersion names the run-time compiler and runtime, for cache keys:
// e.g. "hiprtc 6.2 (runtime 60243000)" or "nvrtc 13.0 (driver 13000)".
func (d *Device) CompilerVersion() string {
	maj, min, _ := d.drv.rtcVersion()
	name := "nvrtc"
	ver := d.DriverVersion
	if d.Vendor == AMD {
		name = "hiprtc"
		ver = d.RuntimeVersion
	}
	return fmt.Sprintf("%s %d.%d (runtime %d)", name, maj, min, ver)
}

// CompileError is a failed run-time compilation with the compiler's log.
type CompileError struct {
	Name string
	Msg  string
	Log  string
}

func (e *CompileError) Error() string {
	log := strings.TrimSpace(e.Log)
	if len(log) > 4000 {
		log = log[:4000] + "\n…"
	}
	if log == "" {
		return fmt.Sprintf("compile %s: %s", e.Name, e.Msg)
	}
	return fmt.Sprintf("compile %s: %s:\n%s", e.Name, e.Msg, log)
}

// Compile compiles source for this device with hiprtc (--gpu-architecture
// = gcnArchName, -O3) or NVRTC (--gpu-architecture=sm_XY, CUBIN). When
// NVRTC does not know the device's architecture, it compiles PTX for the
// newest it knows, which the driver JIT-compiles. opts are added.
func (d *Device) Compile(src, name string, opts []string) ([]byte, error) {
	if !d.drv.haveRTC() {
		return nil, &CompileError{Name: name, Msg: "no run-time compiler (hiprtc / NVRTC) was found"}
	}
	if d.Vendor == AMD {
		o := append([]string{"--gpu-architecture=" + d.Arch, "-O3"}, opts...)
		return d.compile(src, name, o, false)
	}
	o := append([]string{"--gpu-architecture=" + d.Arch}, opts...)
	code, err := d.compile(src, name, o, false)
	if err == nil {
		return code, nil
	}
	// An NVRTC older than the GPU: PTX for the newest architecture it
	// supports.
	cc := d.ComputeMajor*10 + d.ComputeMinor
	best := 0
	for _, a := range d.drv.rtcSupportedArchs() {
		if a <= cc && a > best {
			best = a
		}
	}
	if best == 0 || best == cc {
		return nil, err
	}
	o = append([]string{fmt.Sprintf("--gpu-architecture=compute_%d", best)}, opts...)
	if code, err2 := d.compile(src, name, o, true); err2 == nil {
		return code, nil
	}
	return nil, err
}

func (d *Device) compile(src, name string, opts []string, ptx bool) ([]byte, error) {
	code, log, r := d.drv.rtcCompile(src, name, opts, ptx)
	if r != 0 {
		return nil, &CompileError{Name: name, Msg: fmt.Sprintf("%s (%d), options %v", d.drv.rtcError(r), r, opts), Log: log}
	}
	if ptx {
		code = append(code, 0) // the driver reads PTX as a C string
	}
	return code, nil
}
