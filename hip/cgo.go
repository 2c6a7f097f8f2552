//go:build cgo

package hip

/*
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "framepack_hip_shim.h"
*/
import "C"

import (
	"errors"
	"strings"
	"unsafe"
)

func init() { the = cDriver{} }

type cDriver struct{}

func u64(p uintptr) C.uint64_t { return C.uint64_t(p) }

func (cDriver) load(v Vendor) ([]string, []string, error) {
	var buf [4096]C.char
	if C.fp_load(C.int(v), &buf[0], C.int(len(buf))) != 0 {
		msg := C.GoString(&buf[0])
		if msg == "" {
			msg = "cannot load"
		}
		return nil, nil, errors.New(msg)
	}
	var paths, missing [4096]C.char
	C.fp_lib_paths(&paths[0], C.int(len(paths)))
	C.fp_missing_optional(&missing[0], C.int(len(missing)))
	return splitNonEmpty(C.GoString(&paths[0]), "\n"), splitNonEmpty(C.GoString(&missing[0]), ","), nil
}

func splitNonEmpty(s, sep string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, sep)
}

func (cDriver) reset() { C.fp_reset() }

func (cDriver) code(op string, r int) error {
	if r == 0 {
		return nil
	}
	return &Error{Op: op, Code: r, Name: C.GoString(C.fp_error_name(C.int(r))), Msg: C.GoString(C.fp_error_string(C.int(r)))}
}

func (cDriver) init() int { return int(C.fp_init()) }

func (cDriver) deviceCount() (int, int) {
	var n C.int
	r := C.fp_device_count(&n)
	return int(n), int(r)
}

func (cDriver) deviceOpen(dev int) int  { return int(C.fp_device_open(C.int(dev))) }
func (cDriver) deviceClose(dev int)     { C.fp_device_close(C.int(dev)) }
func (cDriver) makeCurrent(dev int) int { return int(C.fp_make_current(C.int(dev))) }

func (cDriver) deviceName(dev int) (string, int) {
	var buf [256]C.char
	r := C.fp_device_name(C.int(dev), &buf[0], C.int(len(buf)))
	return C.GoString(&buf[0]), int(r)
}

func (cDriver) totalMem(dev int) (uint64, int) {
	var n C.uint64_t
	r := C.fp_device_total_mem(C.int(dev), &n)
	return uint64(n), int(r)
}

func (cDriver) attr(dev, a int) (int, int) {
	var v C.int
	r := C.fp_device_attr(C.int(dev), C.int(a), &v)
	return int(v), int(r)
}

func (cDriver) arch(dev int) (string, int, int) {
	var buf [256]C.char
	var layout C.int
	r := C.fp_device_arch(C.int(dev), &buf[0], C.int(len(buf)), &layout)
	return C.GoString(&buf[0]), int(layout), int(r)
}

func (cDriver) driverVersion() (int, int) {
	var v C.int
	r := C.fp_driver_version(&v)
	return int(v), int(r)
}

func (cDriver) runtimeVersion() (int, int) {
	var v C.int
	r := C.fp_runtime_version(&v)
	return int(v), int(r)
}

func (cDriver) memInfo(dev int) (uint64, uint64, int) {
	var f, t C.uint64_t
	r := C.fp_mem_info(C.int(dev), &f, &t)
	return uint64(f), uint64(t), int(r)
}

func (cDriver) malloc(dev int, n uint64) (uintptr, int) {
	var p C.uint64_t
	r := C.fp_malloc(C.int(dev), &p, C.uint64_t(n))
	return uintptr(p), int(r)
}

func (cDriver) free(dev int, p uintptr) int { return int(C.fp_free(C.int(dev), u64(p))) }
func (cDriver) haveAsync() bool             { return C.fp_have_async_alloc() != 0 }

func (cDriver) mallocAsync(dev int, n uint64, s uintptr) (uintptr, int) {
	var p C.uint64_t
	r := C.fp_malloc_async(C.int(dev), &p, C.uint64_t(n), u64(s))
	return uintptr(p), int(r)
}

func (cDriver) freeAsync(dev int, p, s uintptr) int {
	return int(C.fp_free_async(C.int(dev), u64(p), u64(s)))
}

func (cDriver) defaultPool(dev int) (uintptr, int) {
	var p C.uint64_t
	r := C.fp_default_pool(C.int(dev), &p)
	return uintptr(p), int(r)
}

func (cDriver) poolTrim(dev int, pool uintptr, keep uint64) int {
	return int(C.fp_pool_trim(C.int(dev), u64(pool), C.uint64_t(keep)))
}

func (cDriver) poolSetThreshold(dev int, pool uintptr, n uint64) int {
	return int(C.fp_pool_set_threshold(C.int(dev), u64(pool), C.uint64_t(n)))
}

func (cDriver) poolGetAttr(dev int, pool uintptr, attr int) (uint64, int) {
	var v C.uint64_t
	r := C.fp_pool_get_attr(C.int(dev), u64(pool), C.int(attr), &v)
	return uint64(v), int(r)
}

func (cDriver) hostAlloc(dev int, n uint64) (unsafe.Pointer, int) {
	var p unsafe.Pointer
	r := C.fp_host_alloc(C.int(dev), &p, C.uint64_t(n))
	return p, int(r)
}

func (cDriver) hostFree(dev int, p unsafe.Pointer) int { return int(C.fp_host_free(C.int(dev), p)) }

func (cDriver) h2dAsync(dev int, dst uintptr, src unsafe.Pointer, n uint64, s uintptr) int {
	return int(C.fp_memcpy_h2d_async(C.int(dev), u64(dst), src, C.uint64_t(n), u64(s)))
}

func (cDriver) d2hAsync(dev int, dst unsafe.Pointer, src uintptr, n uint64, s uintptr) int {
	return int(C.fp_memcpy_d2h_async(C.int(dev), dst, u64(src), C.uint64_t(n), u64(s)))
}

func (cDriver) d2dAsync(dev int, dst, src uintptr, n uint64, s uintptr) int {
	return int(C.fp_memcpy_d2d_async(C.int(dev), u64(dst), u64(src), C.uint64_t(n), u64(s)))
}

// The sync copies take Go memory: the C call returns only after the stream
// has finished with it.
func (cDriver) h2dSync(dev int, dst uintptr, src []byte, s uintptr) int {
	return int(C.fp_memcpy_h2d_sync(C.int(dev), u64(dst), unsafe.Pointer(&src[0]), C.uint64_t(len(src)), u64(s)))
}

func (cDriver) d2hSync(dev int, dst []byte, src uintptr, s uintptr) int {
	return int(C.fp_memcpy_d2h_sync(C.int(dev), unsafe.Pointer(&dst[0]), u64(src), C.uint64_t(len(dst)), u64(s)))
}

func (cDriver) memsetAsync(dev int, dst uintptr, v byte, n uint64, s uintptr) int {
	return int(C.fp_memset_async(C.int(dev), u64(dst), C.int(v), C.uint64_t(n), u64(s)))
}

func (cDriver) streamCreate(dev int) (uintptr, int) {
	var s C.uint64_t
	r := C.fp_stream_create(C.int(dev), &s)
	return uintptr(s), int(r)
}

func (cDriver) streamDestroy(dev int, s uintptr) int {
	return int(C.fp_stream_destroy(C.int(dev), u64(s)))
}
func (cDriver) streamSync(dev int, s uintptr) int { return int(C.fp_stream_sync(C.int(dev), u64(s))) }
func (cDriver) streamWaitEvent(dev int, s, e uintptr) int {
	return int(C.fp_stream_wait_event(C.int(dev), u64(s), u64(e)))
}
func (cDriver) deviceSync(dev int) int { return int(C.fp_device_sync(C.int(dev))) }

func (cDriver) eventCreate(dev int, timing bool) (uintptr, int) {
	var e C.uint64_t
	t := 0
	if timing {
		t = 1
	}
	r := C.fp_event_create(C.int(dev), &e, C.int(t))
	return uintptr(e), int(r)
}

func (cDriver) eventDestroy(dev int, e uintptr) int {
	return int(C.fp_event_destroy(C.int(dev), u64(e)))
}
func (cDriver) eventRecord(dev int, e, s uintptr) int {
	return int(C.fp_event_record(C.int(dev), u64(e), u64(s)))
}
func (cDriver) eventSync(dev int, e uintptr) int  { return int(C.fp_event_sync(C.int(dev), u64(e))) }
func (cDriver) eventQuery(dev int, e uintptr) int { return int(C.fp_event_query(C.int(dev), u64(e))) }

func (cDriver) eventElapsed(dev int, a, b uintptr) (float32, int) {
	var ms C.float
	r := C.fp_event_elapsed(C.int(dev), &ms, u64(a), u64(b))
	return float32(ms), int(r)
}

func (cDriver) moduleLoad(dev int, image []byte) (uintptr, int) {
	// The image is copied to C memory: loaders may keep reading it lazily.
	p := C.CBytes(image)
	defer C.free(p)
	var m C.uint64_t
	r := C.fp_module_load(C.int(dev), &m, p)
	return uintptr(m), int(r)
}

func (cDriver) moduleUnload(dev int, m uintptr) int {
	return int(C.fp_module_unload(C.int(dev), u64(m)))
}

func (cDriver) moduleFunction(dev int, m uintptr, name string) (uintptr, int) {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	var f C.uint64_t
	r := C.fp_module_function(C.int(dev), &f, u64(m), cs)
	return uintptr(f), int(r)
}

func (cDriver) funcSetMaxDynamicShared(dev int, f uintptr, n int) int {
	return int(C.fp_func_set_max_dynamic_shared(C.int(dev), u64(f), C.int(n)))
}

func (cDriver) launch(dev int, f uintptr, grid, block [3]uint32, shmem uint32, s uintptr, buf []byte, offs []int32) int {
	var bp unsafe.Pointer
	var op *C.int32_t
	if len(buf) > 0 {
		bp = unsafe.Pointer(&buf[0])
	}
	if len(offs) > 0 {
		op = (*C.int32_t)(unsafe.Pointer(&offs[0]))
	}
	return int(C.fp_launch(C.int(dev), u64(f), C.uint(grid[0]), C.uint(grid[1]), C.uint(grid[2]),
		C.uint(block[0]), C.uint(block[1]), C.uint(block[2]), C.uint(shmem), u64(s), bp, op, C.int(len(offs))))
}

func (cDriver) haveRTC() bool { return C.fp_have_rtc() != 0 }

func (cDriver) rtcCompile(src, name string, opts []string, ptx bool) ([]byte, string, int) {
	csrc := C.CString(src)
	defer C.free(unsafe.Pointer(csrc))
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	n := len(opts)
	arr := (**C.char)(C.malloc(C.size_t(max(n, 1)) * C.size_t(unsafe.Sizeof(uintptr(0)))))
	defer C.free(unsafe.Pointer(arr))
	list := unsafe.Slice(arr, max(n, 1))
	for i, o := range opts {
		list[i] = C.CString(o)
	}
	defer func() {
		for i := range opts {
			C.free(unsafe.Pointer(list[i]))
		}
	}()
	want := 0
	if ptx {
		want = 1
	}
	var code unsafe.Pointer
	var size C.size_t
	var log *C.char
	r := C.fp_rtc_compile(csrc, cname, C.int(n), arr, C.int(want), &code, &size, &log)
	var logs string
	if log != nil {
		logs = C.GoString(log)
		C.free(unsafe.Pointer(log))
	}
	var out []byte
	if code != nil {
		out = C.GoBytes(code, C.int(size))
		C.free(code)
	}
	return out, logs, int(r)
}

func (cDriver) rtcError(r int) string { return C.GoString(C.fp_rtc_error_string(C.int(r))) }

func (cDriver) rtcVersion() (int, int, int) {
	var a, b C.int
	r := C.fp_rtc_version(&a, &b)
	return int(a), int(b), int(r)
}

func (cDriver) rtcSupportedArchs() []int {
	var buf [64]C.int
	n := int(C.fp_rtc_supported_archs(&buf[0], C.int(len(buf))))
	if n <= 0 {
		return nil
	}
	out := make([]int, n)
	for i := range out {
		out[i] = int(buf[i])
	}
	return out
}
