//go:build cgo

package gputest

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdint.h>
#include <stddef.h>
#include <stdio.h>

// One table for either platform: the CUDA driver API or the HIP runtime.
enum { F_INIT, F_SET, F_MALLOC, F_FREE, F_HTOD, F_DTOH, F_MEMSET, F_STREAM, F_SYNC,
       F_GET, F_NAME, F_RETAIN, F_N };
static void* f[F_N];
static int plat; // 1 cuda, 2 hip
static uintptr_t ctx;

static const char* cuda_names[F_N] = {
	"cuInit", "cuCtxSetCurrent", "cuMemAlloc_v2", "cuMemFree_v2", "cuMemcpyHtoD_v2",
	"cuMemcpyDtoH_v2", "cuMemsetD8_v2", "cuStreamCreate", "cuStreamSynchronize",
	"cuDeviceGet", "cuDeviceGetName", "cuDevicePrimaryCtxRetain" };
static const char* hip_names[F_N] = {
	"hipInit", "hipSetDevice", "hipMalloc", "hipFree", "hipMemcpyHtoD",
	"hipMemcpyDtoH", "hipMemset", "hipStreamCreate", "hipStreamSynchronize",
	"hipGetDeviceCount", "hipDeviceGetName", 0 };

static int rt_open(int p, char* err, size_t n) {
	const char* libs_cuda[] = {"libcuda.so.1", 0};
	const char* libs_hip[] = {"libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5", 0};
	const char** libs = p == 1 ? libs_cuda : libs_hip;
	const char** names = p == 1 ? cuda_names : hip_names;
	void* h = 0;
	for (int i = 0; libs[i] && !h; i++) h = dlopen(libs[i], RTLD_NOW | RTLD_LOCAL);
	if (!h) { snprintf(err, n, "%s", dlerror()); return -1; }
	for (int i = 0; i < F_N; i++) {
		if (!names[i]) continue;
		f[i] = dlsym(h, names[i]);
		if (!f[i]) { snprintf(err, n, "missing %s", names[i]); return -1; }
	}
	plat = p;
	int s = ((int (*)(unsigned))f[F_INIT])(0);
	if (s) { snprintf(err, n, "%sInit: error %d", p == 1 ? "cu" : "hip", s); return -1; }
	if (p == 1) {
		int dev = 0;
		if ((s = ((int (*)(int*, int))f[F_GET])(&dev, 0))) { snprintf(err, n, "cuDeviceGet: %d", s); return -1; }
		void* c = 0;
		if ((s = ((int (*)(void**, int))f[F_RETAIN])(&c, dev))) { snprintf(err, n, "cuDevicePrimaryCtxRetain: %d", s); return -1; }
		ctx = (uintptr_t)c;
	} else {
		int count = 0;
		if ((s = ((int (*)(int*))f[F_GET])(&count)) || count == 0) { snprintf(err, n, "hipGetDeviceCount: %d, %d devices", s, count); return -1; }
	}
	return 0;
}
static int rt_bind(void) {
	return plat == 1 ? ((int (*)(void*))f[F_SET])((void*)ctx) : ((int (*)(int))f[F_SET])(0);
}
static int rt_name(char* buf, int n) { return ((int (*)(char*, int, int))f[F_NAME])(buf, n, 0); }
static int rt_malloc(uintptr_t* p, size_t n) {
	if (plat == 1) { unsigned long long d = 0; int s = ((int (*)(unsigned long long*, size_t))f[F_MALLOC])(&d, n); *p = d; return s; }
	void* d = 0; int s = ((int (*)(void**, size_t))f[F_MALLOC])(&d, n); *p = (uintptr_t)d; return s;
}
static int rt_free(uintptr_t p) {
	return plat == 1 ? ((int (*)(unsigned long long))f[F_FREE])(p) : ((int (*)(void*))f[F_FREE])((void*)p);
}
static int rt_htod(uintptr_t d, const void* h, size_t n) {
	return plat == 1 ? ((int (*)(unsigned long long, const void*, size_t))f[F_HTOD])(d, h, n)
	                 : ((int (*)(void*, const void*, size_t))f[F_HTOD])((void*)d, h, n);
}
static int rt_dtoh(void* h, uintptr_t d, size_t n) {
	return plat == 1 ? ((int (*)(void*, unsigned long long, size_t))f[F_DTOH])(h, d, n)
	                 : ((int (*)(void*, void*, size_t))f[F_DTOH])(h, (void*)d, n);
}
static int rt_memset(uintptr_t d, unsigned char b, size_t n) {
	return plat == 1 ? ((int (*)(unsigned long long, unsigned char, size_t))f[F_MEMSET])(d, b, n)
	                 : ((int (*)(void*, int, size_t))f[F_MEMSET])((void*)d, b, n);
}
static int rt_stream(uintptr_t* s) {
	void* p = 0; int r = plat == 1 ? ((int (*)(void**, unsigned))f[F_STREAM])(&p, 0)
	                               : ((int (*)(void**))f[F_STREAM])(&p);
	*s = (uintptr_t)p; return r;
}
static int rt_sync(uintptr_t s) { return ((int (*)(void*))f[F_SYNC])((void*)s); }
*/
import "C"

import (
	"fmt"
	"unsafe"
)

type cRuntime struct{ plat string }

func openPlatform(p int, name string) (runtimeAPI, string, error) {
	var e [512]C.char
	if C.rt_open(C.int(p), &e[0], C.size_t(len(e))) != 0 {
		return nil, "", fmt.Errorf("%s", C.GoString(&e[0]))
	}
	var buf [256]C.char
	C.rt_name(&buf[0], C.int(len(buf)))
	return cRuntime{name}, C.GoString(&buf[0]), nil
}

func openCUDA() (runtimeAPI, string, error) { return openPlatform(1, "cuda") }
func openHIP() (runtimeAPI, string, error)  { return openPlatform(2, "hip") }

func (r cRuntime) check(fn string, s C.int) error {
	if s != 0 {
		return fmt.Errorf("%s %s: error %d", r.plat, fn, int(s))
	}
	return nil
}

func (r cRuntime) bind() error { return r.check("set device", C.rt_bind()) }

func (r cRuntime) malloc(n int64) (uintptr, error) {
	var p C.uintptr_t
	err := r.check("malloc", C.rt_malloc(&p, C.size_t(n)))
	return uintptr(p), err
}

func (r cRuntime) free(p uintptr) { C.rt_free(C.uintptr_t(p)) }

func (r cRuntime) htod(dst uintptr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	return r.check("memcpy HtoD", C.rt_htod(C.uintptr_t(dst), unsafe.Pointer(&src[0]), C.size_t(len(src))))
}

func (r cRuntime) dtoh(dst []byte, src uintptr) error {
	if len(dst) == 0 {
		return nil
	}
	return r.check("memcpy DtoH", C.rt_dtoh(unsafe.Pointer(&dst[0]), C.uintptr_t(src), C.size_t(len(dst))))
}

func (r cRuntime) memset(p uintptr, b byte, n int64) error {
	return r.check("memset", C.rt_memset(C.uintptr_t(p), C.uchar(b), C.size_t(n)))
}

func (r cRuntime) newStream() (uintptr, error) {
	var s C.uintptr_t
	err := r.check("stream create", C.rt_stream(&s))
	return uintptr(s), err
}

func (r cRuntime) sync(s uintptr) error { return r.check("stream sync", C.rt_sync(C.uintptr_t(s))) }
