// See framepack_hip_shim.h (named uniquely: cgo compiles the preamble from
// the temp directory, where a stray shim.h would be found first). Function
// pointer types are written with plain C types: every vendor handle
// (stream, event, module, function, pool, context) is a pointer, device
// pointers are 64-bit integers.
#define _GNU_SOURCE
#include "framepack_hip_shim.h"

#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void *P;
typedef uint64_t U64;

static int g_vendor;
static void *g_lib, *g_rtclib;
static char g_paths[2048];
static char g_missing[2048];
static char g_found_soname[64];

// ---- AMD: libamdhip64 ----
static struct {
	int (*Init)(unsigned);
	int (*GetDeviceCount)(int *);
	int (*SetDevice)(int);
	int (*DeviceGetName)(char *, int, int);
	int (*DeviceTotalMem)(size_t *, int);
	int (*DeviceGetAttribute)(int *, int, int);
	int (*GetDevicePropertiesR0600)(void *, int);
	int (*GetDeviceProperties)(void *, int);
	int (*DriverGetVersion)(int *);
	int (*RuntimeGetVersion)(int *);
	const char *(*GetErrorString)(int);
	const char *(*GetErrorName)(int);
	int (*MemGetInfo)(size_t *, size_t *);
	int (*Malloc)(P *, size_t);
	int (*Free)(P);
	int (*MallocAsync)(P *, size_t, P);
	int (*FreeAsync)(P, P);
	int (*DeviceGetDefaultMemPool)(P *, int);
	int (*MemPoolTrimTo)(P, size_t);
	int (*MemPoolSetAttribute)(P, int, P);
	int (*MemPoolGetAttribute)(P, int, P);
	int (*HostMalloc)(P *, size_t, unsigned);
	int (*HostFree)(P);
	int (*MemcpyAsync)(P, const void *, size_t, int, P);
	int (*MemsetAsync)(P, int, size_t, P);
	int (*StreamCreateWithFlags)(P *, unsigned);
	int (*StreamDestroy)(P);
	int (*StreamSynchronize)(P);
	int (*StreamWaitEvent)(P, P, unsigned);
	int (*DeviceSynchronize)(void);
	int (*EventCreateWithFlags)(P *, unsigned);
	int (*EventDestroy)(P);
	int (*EventRecord)(P, P);
	int (*EventSynchronize)(P);
	int (*EventQuery)(P);
	int (*EventElapsedTime)(float *, P, P);
	int (*ModuleLoadData)(P *, const void *);
	int (*ModuleUnload)(P);
	int (*ModuleGetFunction)(P *, P, const char *);
	int (*ModuleLaunchKernel)(P, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, P, P *, P *);
	int (*FuncGetAttribute)(int *, int, P);
} hip;

// ---- NVIDIA: libcuda driver API ----
static struct {
	int (*Init)(unsigned);
	int (*DeviceGetCount)(int *);
	int (*DeviceGet)(int *, int);
	int (*DeviceGetName)(char *, int, int);
	int (*DeviceTotalMem)(size_t *, int);
	int (*DeviceGetAttribute)(int *, int, int);
	int (*DriverGetVersion)(int *);
	int (*DevicePrimaryCtxRetain)(P *, int);
	int (*DevicePrimaryCtxRelease)(int);
	int (*CtxSetCurrent)(P);
	int (*CtxSynchronize)(void);
	int (*GetErrorString)(int, const char **);
	int (*GetErrorName)(int, const char **);
	int (*MemGetInfo)(size_t *, size_t *);
	int (*MemAlloc)(U64 *, size_t);
	int (*MemFree)(U64);
	int (*MemAllocAsync)(U64 *, size_t, P);
	int (*MemFreeAsync)(U64, P);
	int (*DeviceGetDefaultMemPool)(P *, int);
	int (*MemPoolTrimTo)(P, size_t);
	int (*MemPoolSetAttribute)(P, int, P);
	int (*MemPoolGetAttribute)(P, int, P);
	int (*MemHostAlloc)(P *, size_t, unsigned);
	int (*MemFreeHost)(P);
	int (*MemcpyHtoDAsync)(U64, const void *, size_t, P);
	int (*MemcpyDtoHAsync)(P, U64, size_t, P);
	int (*MemcpyDtoDAsync)(U64, U64, size_t, P);
	int (*MemsetD8Async)(U64, unsigned char, size_t, P);
	int (*StreamCreate)(P *, unsigned);
	int (*StreamDestroy)(P);
	int (*StreamSynchronize)(P);
	int (*StreamWaitEvent)(P, P, unsigned);
	int (*EventCreate)(P *, unsigned);
	int (*EventDestroy)(P);
	int (*EventRecord)(P, P);
	int (*EventSynchronize)(P);
	int (*EventQuery)(P);
	int (*EventElapsedTime)(float *, P, P);
	int (*ModuleLoadData)(P *, const void *);
	int (*ModuleUnload)(P);
	int (*ModuleGetFunction)(P *, P, const char *);
	int (*LaunchKernel)(P, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, P, P *, P *);
	int (*FuncSetAttribute)(P, int, int);
	int (*FuncGetAttribute)(int *, int, P);
} cu;

// ---- run-time compilers: hiprtc and NVRTC share one signature set ----
static struct {
	int (*CreateProgram)(P *, const char *, const char *, int, const char **, const char **);
	int (*CompileProgram)(P, int, const char **);
	int (*GetProgramLogSize)(P, size_t *);
	int (*GetProgramLog)(P, char *);
	int (*GetCodeSize)(P, size_t *); // hiprtcGetCodeSize / nvrtcGetCUBINSize
	int (*GetCode)(P, char *);
	int (*GetPTXSize)(P, size_t *);
	int (*GetPTX)(P, char *);
	int (*DestroyProgram)(P *);
	const char *(*GetErrorString)(int);
	int (*Version)(int *, int *);
	int (*GetNumSupportedArchs)(int *);
	int (*GetSupportedArchs)(int *);
} rtc;

// ---- symbol tables ----
typedef struct {
	const char *name;
	void **slot;
	int optional;
} sym;

#define S(tab, field, name) {name, (void **)&tab.field, 0}
#define O(tab, field, name) {name, (void **)&tab.field, 1}

static sym hip_syms[] = {
	S(hip, Init, "hipInit"),
	S(hip, GetDeviceCount, "hipGetDeviceCount"),
	S(hip, SetDevice, "hipSetDevice"),
	S(hip, DeviceGetName, "hipDeviceGetName"),
	S(hip, DeviceTotalMem, "hipDeviceTotalMem"),
	S(hip, DeviceGetAttribute, "hipDeviceGetAttribute"),
	O(hip, GetDevicePropertiesR0600, "hipGetDevicePropertiesR0600"),
	S(hip, GetDeviceProperties, "hipGetDeviceProperties"),
	S(hip, DriverGetVersion, "hipDriverGetVersion"),
	S(hip, RuntimeGetVersion, "hipRuntimeGetVersion"),
	S(hip, GetErrorString, "hipGetErrorString"),
	S(hip, GetErrorName, "hipGetErrorName"),
	S(hip, MemGetInfo, "hipMemGetInfo"),
	S(hip, Malloc, "hipMalloc"),
	S(hip, Free, "hipFree"),
	O(hip, MallocAsync, "hipMallocAsync"),
	O(hip, FreeAsync, "hipFreeAsync"),
	O(hip, DeviceGetDefaultMemPool, "hipDeviceGetDefaultMemPool"),
	O(hip, MemPoolTrimTo, "hipMemPoolTrimTo"),
	O(hip, MemPoolSetAttribute, "hipMemPoolSetAttribute"),
	O(hip, MemPoolGetAttribute, "hipMemPoolGetAttribute"),
	S(hip, HostMalloc, "hipHostMalloc"),
	S(hip, HostFree, "hipHostFree"),
	S(hip, MemcpyAsync, "hipMemcpyAsync"),
	S(hip, MemsetAsync, "hipMemsetAsync"),
	S(hip, StreamCreateWithFlags, "hipStreamCreateWithFlags"),
	S(hip, StreamDestroy, "hipStreamDestroy"),
	S(hip, StreamSynchronize, "hipStreamSynchronize"),
	S(hip, StreamWaitEvent, "hipStreamWaitEvent"),
	S(hip, DeviceSynchronize, "hipDeviceSynchronize"),
	S(hip, EventCreateWithFlags, "hipEventCreateWithFlags"),
	S(hip, EventDestroy, "hipEventDestroy"),
	S(hip, EventRecord, "hipEventRecord"),
	S(hip, EventSynchronize, "hipEventSynchronize"),
	S(hip, EventQuery, "hipEventQuery"),
	S(hip, EventElapsedTime, "hipEventElapsedTime"),
	S(hip, ModuleLoadData, "hipModuleLoadData"),
	S(hip, ModuleUnload, "hipModuleUnload"),
	S(hip, ModuleGetFunction, "hipModuleGetFunction"),
	S(hip, ModuleLaunchKernel, "hipModuleLaunchKernel"),
	O(hip, FuncGetAttribute, "hipFuncGetAttribute"),
	{0, 0, 0},
};

static sym hiprtc_syms[] = {
	S(rtc, CreateProgram, "hiprtcCreateProgram"),
	S(rtc, CompileProgram, "hiprtcCompileProgram"),
	S(rtc, GetProgramLogSize, "hiprtcGetProgramLogSize"),
	S(rtc, GetProgramLog, "hiprtcGetProgramLog"),
	S(rtc, GetCodeSize, "hiprtcGetCodeSize"),
	S(rtc, GetCode, "hiprtcGetCode"),
	S(rtc, DestroyProgram, "hiprtcDestroyProgram"),
	S(rtc, GetErrorString, "hiprtcGetErrorString"),
	S(rtc, Version, "hiprtcVersion"),
	{0, 0, 0},
};

static sym cu_syms[] = {
	S(cu, Init, "cuInit"),
	S(cu, DeviceGetCount, "cuDeviceGetCount"),
	S(cu, DeviceGet, "cuDeviceGet"),
	S(cu, DeviceGetName, "cuDeviceGetName"),
	S(cu, DeviceTotalMem, "cuDeviceTotalMem_v2"),
	S(cu, DeviceGetAttribute, "cuDeviceGetAttribute"),
	S(cu, DriverGetVersion, "cuDriverGetVersion"),
	S(cu, DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"),
	S(cu, DevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2"),
	S(cu, CtxSetCurrent, "cuCtxSetCurrent"),
	S(cu, CtxSynchronize, "cuCtxSynchronize"),
	S(cu, GetErrorString, "cuGetErrorString"),
	S(cu, GetErrorName, "cuGetErrorName"),
	S(cu, MemGetInfo, "cuMemGetInfo_v2"),
	S(cu, MemAlloc, "cuMemAlloc_v2"),
	S(cu, MemFree, "cuMemFree_v2"),
	O(cu, MemAllocAsync, "cuMemAllocAsync"),
	O(cu, MemFreeAsync, "cuMemFreeAsync"),
	O(cu, DeviceGetDefaultMemPool, "cuDeviceGetDefaultMemPool"),
	O(cu, MemPoolTrimTo, "cuMemPoolTrimTo"),
	O(cu, MemPoolSetAttribute, "cuMemPoolSetAttribute"),
	O(cu, MemPoolGetAttribute, "cuMemPoolGetAttribute"),
	S(cu, MemHostAlloc, "cuMemHostAlloc"),
	S(cu, MemFreeHost, "cuMemFreeHost"),
	S(cu, MemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2"),
	S(cu, MemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2"),
	S(cu, MemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2"),
	S(cu, MemsetD8Async, "cuMemsetD8Async"),
	S(cu, StreamCreate, "cuStreamCreate"),
	S(cu, StreamDestroy, "cuStreamDestroy_v2"),
	S(cu, StreamSynchronize, "cuStreamSynchronize"),
	S(cu, StreamWaitEvent, "cuStreamWaitEvent"),
	S(cu, EventCreate, "cuEventCreate"),
	S(cu, EventDestroy, "cuEventDestroy_v2"),
	S(cu, EventRecord, "cuEventRecord"),
	S(cu, EventSynchronize, "cuEventSynchronize"),
	S(cu, EventQuery, "cuEventQuery"),
	S(cu, EventElapsedTime, "cuEventElapsedTime"),
	S(cu, ModuleLoadData, "cuModuleLoadData"),
	S(cu, ModuleUnload, "cuModuleUnload"),
	S(cu, ModuleGetFunction, "cuModuleGetFunction"),
	S(cu, LaunchKernel, "cuLaunchKernel"),
	O(cu, FuncSetAttribute, "cuFuncSetAttribute"),
	O(cu, FuncGetAttribute, "cuFuncGetAttribute"),
	{0, 0, 0},
};

static sym nvrtc_syms[] = {
	S(rtc, CreateProgram, "nvrtcCreateProgram"),
	S(rtc, CompileProgram, "nvrtcCompileProgram"),
	S(rtc, GetProgramLogSize, "nvrtcGetProgramLogSize"),
	S(rtc, GetProgramLog, "nvrtcGetProgramLog"),
	S(rtc, GetCodeSize, "nvrtcGetCUBINSize"),
	S(rtc, GetCode, "nvrtcGetCUBIN"),
	S(rtc, GetPTXSize, "nvrtcGetPTXSize"),
	S(rtc, GetPTX, "nvrtcGetPTX"),
	S(rtc, DestroyProgram, "nvrtcDestroyProgram"),
	S(rtc, GetErrorString, "nvrtcGetErrorString"),
	S(rtc, Version, "nvrtcVersion"),
	O(rtc, GetNumSupportedArchs, "nvrtcGetNumSupportedArchs"),
	O(rtc, GetSupportedArchs, "nvrtcGetSupportedArchs"),
	{0, 0, 0},
};

static void appendf(char *buf, int len, const char *fmt, const char *a, const char *b) {
	int n = (int)strlen(buf);
	if (n < len - 1)
		snprintf(buf + n, len - n, fmt, a, b);
}

// resolve fills a table; missing required names are listed in err.
static int resolve(void *lib, sym *t, char *err, int errlen) {
	int bad = 0;
	for (; t->name; t++) {
		*t->slot = dlsym(lib, t->name);
		if (*t->slot)
			continue;
		if (t->optional) {
			appendf(g_missing, sizeof g_missing, "%s%s", g_missing[0] ? "," : "", t->name);
			continue;
		}
		if (!bad)
			appendf(err, errlen, "%s%s", err[0] ? "; " : "", "missing symbols:");
		appendf(err, errlen, " %s%s", t->name, "");
		bad = 1;
	}
	return bad ? -1 : 0;
}

static void note_path(void *lib) {
	struct link_map *lm = 0;
	if (dlinfo(lib, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name)
		appendf(g_paths, sizeof g_paths, "%s%s", g_paths[0] ? "\n" : "", lm->l_name);
}

// try_open dlopens the first of names found, also under the given
// directories; failures are appended to err.
static void *try_open(const char *const *names, const char *const *dirs, char *err, int errlen) {
	for (int i = 0; names[i]; i++) {
		void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
		if (h) {
			snprintf(g_found_soname, sizeof g_found_soname, "%s", names[i]);
			return h;
		}
		for (int d = 0; dirs && dirs[d]; d++) {
			if (!dirs[d][0])
				continue;
			char path[1024];
			snprintf(path, sizeof path, "%s/%s", dirs[d], names[i]);
			h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
			if (h) {
				snprintf(g_found_soname, sizeof g_found_soname, "%s", names[i]);
				return h;
			}
		}
	}
	const char *e = dlerror();
	appendf(err, errlen, "%scannot open %s", err[0] ? "; " : "", names[0]);
	if (names[1])
		appendf(err, errlen, "%s%s", " (or another version)", "");
	if (e)
		appendf(err, errlen, ": %s%s", e, "");
	return 0;
}

static const char *env_or(const char *name) {
	const char *v = getenv(name);
	return v ? v : "";
}

static int load_amd(char *err, int errlen) {
	static const char *libs[] = {"libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5", "libamdhip64.so", 0};
	char rocm[512];
	snprintf(rocm, sizeof rocm, "%s/lib", env_or("ROCM_PATH"));
	const char *dirs[] = {getenv("ROCM_PATH") ? rocm : "", "/opt/rocm/lib", 0};
	g_lib = try_open(libs, dirs, err, errlen);
	if (!g_lib)
		return -1;
	note_path(g_lib);
	if (resolve(g_lib, hip_syms, err, errlen))
		return -1;
	// hiprtc: its own library of the runtime's major version first, then
	// the runtime itself (ROCm 5.x, 6.x), then other versions.
	char same[64] = "libhiprtc.so";
	const char *dot = strrchr(g_found_soname, '.');
	if (dot && dot[1] >= '0' && dot[1] <= '9')
		snprintf(same, sizeof same, "libhiprtc.so%s", dot);
	const char *rlibs[] = {same, 0};
	char rerr[512] = "";
	g_rtclib = try_open(rlibs, dirs, rerr, sizeof rerr);
	if (!g_rtclib && dlsym(g_lib, "hiprtcCreateProgram"))
		g_rtclib = g_lib;
	if (!g_rtclib) {
		static const char *others[] = {"libhiprtc.so.7", "libhiprtc.so.6", "libhiprtc.so.5", "libhiprtc.so", 0};
		g_rtclib = try_open(others, dirs, rerr, sizeof rerr);
	}
	if (g_rtclib) {
		if (g_rtclib != g_lib)
			note_path(g_rtclib);
		char tmp[512] = "";
		if (resolve(g_rtclib, hiprtc_syms, tmp, sizeof tmp)) {
			memset(&rtc, 0, sizeof rtc);
			appendf(g_missing, sizeof g_missing, "%shiprtc (%s)", g_missing[0] ? "," : "", tmp);
		}
	} else {
		appendf(g_missing, sizeof g_missing, "%shiprtc (%s)", g_missing[0] ? "," : "", rerr);
	}
	return 0;
}

static int load_nvidia(char *err, int errlen) {
	// The driver library by soname only: a toolkit's compat/ copy breaks.
	static const char *libs[] = {"libcuda.so.1", 0};
	g_lib = try_open(libs, 0, err, errlen);
	if (!g_lib)
		return -1;
	note_path(g_lib);
	if (resolve(g_lib, cu_syms, err, errlen))
		return -1;
	void *v2 = dlsym(g_lib, "cuEventElapsedTime_v2");
	if (v2)
		cu.EventElapsedTime = (int (*)(float *, P, P))v2;
	static const char *rlibs[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so", 0};
	char cuda[512], cudat[512], env[512];
	snprintf(cuda, sizeof cuda, "%s/lib64", env_or("CUDA_PATH"));
	snprintf(cudat, sizeof cudat, "%s/targets/x86_64-linux/lib", env_or("CUDA_PATH"));
	snprintf(env, sizeof env, "%s", env_or("FRAMEPACK_NVRTC_DIR"));
	const char *dirs[] = {env, getenv("CUDA_PATH") ? cuda : "", getenv("CUDA_PATH") ? cudat : "",
	                      "/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib", 0};
	char rerr[512] = "";
	g_rtclib = try_open(rlibs, dirs, rerr, sizeof rerr);
	if (g_rtclib) {
		note_path(g_rtclib);
		char tmp[512] = "";
		if (resolve(g_rtclib, nvrtc_syms, tmp, sizeof tmp)) {
			memset(&rtc, 0, sizeof rtc);
			appendf(g_missing, sizeof g_missing, "%snvrtc (%s)", g_missing[0] ? "," : "", tmp);
		}
	} else {
		appendf(g_missing, sizeof g_missing, "%snvrtc (%s)", g_missing[0] ? "," : "", rerr);
	}
	return 0;
}

int fp_load(int vendor, char *err, int errlen) {
	err[0] = 0;
	if (g_vendor)
		return g_vendor == vendor ? 0 : -1;
	g_paths[0] = g_missing[0] = 0;
	int r = vendor == FP_VENDOR_AMD ? load_amd(err, errlen) : load_nvidia(err, errlen);
	if (r) {
		if (g_rtclib && g_rtclib != g_lib)
			dlclose(g_rtclib);
		if (g_lib)
			dlclose(g_lib);
		g_lib = g_rtclib = 0;
		memset(&hip, 0, sizeof hip);
		memset(&cu, 0, sizeof cu);
		memset(&rtc, 0, sizeof rtc);
		return -1;
	}
	g_vendor = vendor;
	return 0;
}

// fp_reset forgets the loaded table so another vendor can be tried. The
// libraries stay mapped: unloading a runtime after its init is unsafe.
void fp_reset(void) {
	g_vendor = 0;
	g_lib = g_rtclib = 0;
	memset(&hip, 0, sizeof hip);
	memset(&cu, 0, sizeof cu);
	memset(&rtc, 0, sizeof rtc);
}

int fp_vendor(void) { return g_vendor; }
void fp_missing_optional(char *buf, int len) { snprintf(buf, len, "%s", g_missing); }
void fp_lib_paths(char *buf, int len) { snprintf(buf, len, "%s", g_paths); }
int fp_have_rtc(void) { return rtc.CreateProgram != 0; }

#define AMD (g_vendor == FP_VENDOR_AMD)

// ---- devices ----
#define MAXDEV 64
static P g_ctx[MAXDEV];
static int g_cudev[MAXDEV];

int fp_init(void) { return AMD ? hip.Init(0) : cu.Init(0); }

int fp_device_count(int *n) { return AMD ? hip.GetDeviceCount(n) : cu.DeviceGetCount(n); }

int fp_device_open(int dev) {
	if (dev < 0 || dev >= MAXDEV)
		return 101; // invalid device
	if (AMD)
		return hip.SetDevice(dev);
	if (g_ctx[dev])
		return 0;
	int r = cu.DeviceGet(&g_cudev[dev], dev);
	if (r)
		return r;
	r = cu.DevicePrimaryCtxRetain(&g_ctx[dev], g_cudev[dev]);
	if (r)
		return r;
	return cu.CtxSetCurrent(g_ctx[dev]);
}

void fp_device_close(int dev) {
	if (!AMD && dev >= 0 && dev < MAXDEV && g_ctx[dev]) {
		cu.DevicePrimaryCtxRelease(g_cudev[dev]);
		g_ctx[dev] = 0;
	}
}

// Each call sets the device on its own thread; both are cheap thread-local
// updates in the runtimes.
int fp_make_current(int dev) { return AMD ? hip.SetDevice(dev) : cu.CtxSetCurrent(g_ctx[dev]); }

#define CUR(dev)                            \
	do {                                    \
		int _r = fp_make_current(dev);      \
		if (_r)                             \
			return _r;                      \
	} while (0)

int fp_device_name(int dev, char *buf, int len) {
	return AMD ? hip.DeviceGetName(buf, len, dev) : cu.DeviceGetName(buf, len, g_cudev[dev]);
}

int fp_device_total_mem(int dev, uint64_t *bytes) {
	size_t n = 0;
	int r = AMD ? hip.DeviceTotalMem(&n, dev) : cu.DeviceTotalMem(&n, g_cudev[dev]);
	*bytes = n;
	return r;
}

// hipDeviceAttribute_t is not CUDA's numbering (gpu-apis.md §1.2).
static const int hip_attr[FP_ATTR_COUNT] = {63, 16, 23, 61, 87, 74, -1, 88};
static const int cu_attr[FP_ATTR_COUNT] = {16, 18, 75, 76, 10, 8, 97, 115};

int fp_device_attr(int dev, int attr, int *v) {
	*v = 0;
	if (attr < 0 || attr >= FP_ATTR_COUNT)
		return 1;
	if (AMD) {
		if (hip_attr[attr] < 0)
			return hip.DeviceGetAttribute(v, hip_attr[FP_ATTR_SHARED_PER_BLOCK], dev);
		return hip.DeviceGetAttribute(v, hip_attr[attr], dev);
	}
	return cu.DeviceGetAttribute(v, cu_attr[attr], g_cudev[dev]);
}

int fp_device_arch(int dev, char *buf, int len, int *layout) {
	buf[0] = 0;
	if (!AMD) {
		int maj = 0, min = 0, r;
		if ((r = fp_device_attr(dev, FP_ATTR_CC_MAJOR, &maj)) || (r = fp_device_attr(dev, FP_ATTR_CC_MINOR, &min)))
			return r;
		snprintf(buf, len, "sm_%d%d", maj, min);
		*layout = -1;
		return 0;
	}
	// hipDeviceProp_t: R0600 is 1472 bytes with gcnArchName at 1160; R0000
	// is 792 bytes with it at 396. A larger zeroed buffer guards both.
	unsigned char *props = calloc(1, 8192);
	if (!props)
		return 2;
	int r, off;
	if (hip.GetDevicePropertiesR0600) {
		r = hip.GetDevicePropertiesR0600(props, dev);
		off = 1160;
		*layout = 600;
	} else {
		r = hip.GetDeviceProperties(props, dev);
		off = 396;
		*layout = 0;
	}
	if (r == 0)
		snprintf(buf, len, "%.255s", (const char *)props + off);
	free(props);
	return r;
}

int fp_driver_version(int *v) { return AMD ? hip.DriverGetVersion(v) : cu.DriverGetVersion(v); }

int fp_runtime_version(int *v) {
	if (AMD)
		return hip.RuntimeGetVersion(v);
	return cu.DriverGetVersion(v);
}

const char *fp_error_string(int code) {
	if (AMD)
		return hip.GetErrorString ? hip.GetErrorString(code) : "unknown error";
	const char *s = 0;
	if (cu.GetErrorString && cu.GetErrorString(code, &s) == 0 && s)
		return s;
	return "unknown error";
}

const char *fp_error_name(int code) {
	if (AMD)
		return hip.GetErrorName ? hip.GetErrorName(code) : "";
	const char *s = 0;
	if (cu.GetErrorName && cu.GetErrorName(code, &s) == 0 && s)
		return s;
	return "";
}

// ---- memory ----
int fp_mem_info(int dev, uint64_t *free_b, uint64_t *total_b) {
	CUR(dev);
	size_t f = 0, t = 0;
	int r = AMD ? hip.MemGetInfo(&f, &t) : cu.MemGetInfo(&f, &t);
	*free_b = f;
	*total_b = t;
	return r;
}

int fp_malloc(int dev, uint64_t *ptr, uint64_t n) {
	CUR(dev);
	if (AMD) {
		P p = 0;
		int r = hip.Malloc(&p, n);
		*ptr = (uint64_t)(uintptr_t)p;
		return r;
	}
	return cu.MemAlloc(ptr, n);
}

int fp_free(int dev, uint64_t ptr) {
	CUR(dev);
	return AMD ? hip.Free((P)(uintptr_t)ptr) : cu.MemFree(ptr);
}

int fp_have_async_alloc(void) {
	if (AMD)
		return hip.MallocAsync && hip.FreeAsync && hip.DeviceGetDefaultMemPool && hip.MemPoolTrimTo &&
		       hip.MemPoolSetAttribute;
	return cu.MemAllocAsync && cu.MemFreeAsync && cu.DeviceGetDefaultMemPool && cu.MemPoolTrimTo &&
	       cu.MemPoolSetAttribute;
}

int fp_malloc_async(int dev, uint64_t *ptr, uint64_t n, uint64_t stream) {
	CUR(dev);
	if (AMD) {
		P p = 0;
		int r = hip.MallocAsync(&p, n, (P)(uintptr_t)stream);
		*ptr = (uint64_t)(uintptr_t)p;
		return r;
	}
	return cu.MemAllocAsync(ptr, n, (P)(uintptr_t)stream);
}

int fp_free_async(int dev, uint64_t ptr, uint64_t stream) {
	CUR(dev);
	if (AMD)
		return hip.FreeAsync((P)(uintptr_t)ptr, (P)(uintptr_t)stream);
	return cu.MemFreeAsync(ptr, (P)(uintptr_t)stream);
}

int fp_default_pool(int dev, uint64_t *pool) {
	CUR(dev);
	P p = 0;
	int r = AMD ? hip.DeviceGetDefaultMemPool(&p, dev) : cu.DeviceGetDefaultMemPool(&p, g_cudev[dev]);
	*pool = (uint64_t)(uintptr_t)p;
	return r;
}

int fp_pool_trim(int dev, uint64_t pool, uint64_t keep) {
	CUR(dev);
	return AMD ? hip.MemPoolTrimTo((P)(uintptr_t)pool, keep) : cu.MemPoolTrimTo((P)(uintptr_t)pool, keep);
}

// Attribute 4 is the release threshold in both (a uint64).
int fp_pool_set_threshold(int dev, uint64_t pool, uint64_t bytes) {
	CUR(dev);
	uint64_t v = bytes;
	return AMD ? hip.MemPoolSetAttribute((P)(uintptr_t)pool, 4, &v) : cu.MemPoolSetAttribute((P)(uintptr_t)pool, 4, &v);
}

int fp_pool_get_attr(int dev, uint64_t pool, int attr, uint64_t *v) {
	CUR(dev);
	*v = 0;
	if (AMD)
		return hip.MemPoolGetAttribute ? hip.MemPoolGetAttribute((P)(uintptr_t)pool, attr, v) : 801;
	return cu.MemPoolGetAttribute ? cu.MemPoolGetAttribute((P)(uintptr_t)pool, attr, v) : 801;
}

int fp_host_alloc(int dev, void **p, uint64_t n) {
	CUR(dev);
	return AMD ? hip.HostMalloc(p, n, 0) : cu.MemHostAlloc(p, n, 0);
}

int fp_host_free(int dev, void *p) {
	CUR(dev);
	return AMD ? hip.HostFree(p) : cu.MemFreeHost(p);
}

// ---- copies ----
int fp_memcpy_h2d_async(int dev, uint64_t dst, const void *src, uint64_t n, uint64_t stream) {
	CUR(dev);
	if (AMD)
		return hip.MemcpyAsync((P)(uintptr_t)dst, src, n, 1, (P)(uintptr_t)stream);
	return cu.MemcpyHtoDAsync(dst, src, n, (P)(uintptr_t)stream);
}

int fp_memcpy_d2h_async(int dev, void *dst, uint64_t src, uint64_t n, uint64_t stream) {
	CUR(dev);
	if (AMD)
		return hip.MemcpyAsync(dst, (const void *)(uintptr_t)src, n, 2, (P)(uintptr_t)stream);
	return cu.MemcpyDtoHAsync(dst, src, n, (P)(uintptr_t)stream);
}

int fp_memcpy_d2d_async(int dev, uint64_t dst, uint64_t src, uint64_t n, uint64_t stream) {
	CUR(dev);
	if (AMD)
		return hip.MemcpyAsync((P)(uintptr_t)dst, (const void *)(uintptr_t)src, n, 3, (P)(uintptr_t)stream);
	return cu.MemcpyDtoDAsync(dst, src, n, (P)(uintptr_t)stream);
}

int fp_stream_sync(int dev, uint64_t s);

int fp_memcpy_h2d_sync(int dev, uint64_t dst, const void *src, uint64_t n, uint64_t stream) {
	int r = fp_memcpy_h2d_async(dev, dst, src, n, stream);
	return r ? r : fp_stream_sync(dev, stream);
}

int fp_memcpy_d2h_sync(int dev, void *dst, uint64_t src, uint64_t n, uint64_t stream) {
	int r = fp_memcpy_d2h_async(dev, dst, src, n, stream);
	return r ? r : fp_stream_sync(dev, stream);
}

int fp_memset_async(int dev, uint64_t dst, int v, uint64_t n, uint64_t stream) {
	CUR(dev);
	if (AMD)
		return hip.MemsetAsync((P)(uintptr_t)dst, v, n, (P)(uintptr_t)stream);
	return cu.MemsetD8Async(dst, (unsigned char)v, n, (P)(uintptr_t)stream);
}

// ---- streams and events ----
int fp_stream_create(int dev, uint64_t *s) {
	CUR(dev);
	P p = 0;
	int r = AMD ? hip.StreamCreateWithFlags(&p, 1) : cu.StreamCreate(&p, 1); // non-blocking
	*s = (uint64_t)(uintptr_t)p;
	return r;
}

int fp_stream_destroy(int dev, uint64_t s) {
	CUR(dev);
	return AMD ? hip.StreamDestroy((P)(uintptr_t)s) : cu.StreamDestroy((P)(uintptr_t)s);
}

int fp_stream_sync(int dev, uint64_t s) {
	CUR(dev);
	return AMD ? hip.StreamSynchronize((P)(uintptr_t)s) : cu.StreamSynchronize((P)(uintptr_t)s);
}

int fp_stream_wait_event(int dev, uint64_t s, uint64_t e) {
	CUR(dev);
	return AMD ? hip.StreamWaitEvent((P)(uintptr_t)s, (P)(uintptr_t)e, 0)
	           : cu.StreamWaitEvent((P)(uintptr_t)s, (P)(uintptr_t)e, 0);
}

int fp_device_sync(int dev) {
	CUR(dev);
	return AMD ? hip.DeviceSynchronize() : cu.CtxSynchronize();
}

int fp_event_create(int dev, uint64_t *e, int timing) {
	CUR(dev);
	P p = 0;
	unsigned flags = timing ? 0 : 2; // DisableTiming
	int r = AMD ? hip.EventCreateWithFlags(&p, flags) : cu.EventCreate(&p, flags);
	*e = (uint64_t)(uintptr_t)p;
	return r;
}

int fp_event_destroy(int dev, uint64_t e) {
	CUR(dev);
	return AMD ? hip.EventDestroy((P)(uintptr_t)e) : cu.EventDestroy((P)(uintptr_t)e);
}

int fp_event_record(int dev, uint64_t e, uint64_t s) {
	CUR(dev);
	return AMD ? hip.EventRecord((P)(uintptr_t)e, (P)(uintptr_t)s) : cu.EventRecord((P)(uintptr_t)e, (P)(uintptr_t)s);
}

int fp_event_sync(int dev, uint64_t e) {
	CUR(dev);
	return AMD ? hip.EventSynchronize((P)(uintptr_t)e) : cu.EventSynchronize((P)(uintptr_t)e);
}

int fp_event_query(int dev, uint64_t e) {
	CUR(dev);
	return AMD ? hip.EventQuery((P)(uintptr_t)e) : cu.EventQuery((P)(uintptr_t)e);
}

int fp_event_elapsed(int dev, float *ms, uint64_t a, uint64_t b) {
	CUR(dev);
	return AMD ? hip.EventElapsedTime(ms, (P)(uintptr_t)a, (P)(uintptr_t)b)
	           : cu.EventElapsedTime(ms, (P)(uintptr_t)a, (P)(uintptr_t)b);
}

// ---- modules and launches ----
int fp_module_load(int dev, uint64_t *m, const void *image) {
	CUR(dev);
	P p = 0;
	int r = AMD ? hip.ModuleLoadData(&p, image) : cu.ModuleLoadData(&p, image);
	*m = (uint64_t)(uintptr_t)p;
	return r;
}

int fp_module_unload(int dev, uint64_t m) {
	CUR(dev);
	return AMD ? hip.ModuleUnload((P)(uintptr_t)m) : cu.ModuleUnload((P)(uintptr_t)m);
}

int fp_module_function(int dev, uint64_t *f, uint64_t m, const char *name) {
	CUR(dev);
	P p = 0;
	int r = AMD ? hip.ModuleGetFunction(&p, (P)(uintptr_t)m, name) : cu.ModuleGetFunction(&p, (P)(uintptr_t)m, name);
	*f = (uint64_t)(uintptr_t)p;
	return r;
}

// AMD has no opt-in limit below the LDS size, so only CUDA needs this
// (CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8).
int fp_func_set_max_dynamic_shared(int dev, uint64_t f, int bytes) {
	CUR(dev);
	if (AMD || !cu.FuncSetAttribute)
		return 0;
	return cu.FuncSetAttribute((P)(uintptr_t)f, 8, bytes);
}

int fp_func_get_attr(int dev, uint64_t f, int attr, int *v) {
	CUR(dev);
	*v = 0;
	if (AMD)
		return hip.FuncGetAttribute ? hip.FuncGetAttribute(v, attr, (P)(uintptr_t)f) : 801;
	return cu.FuncGetAttribute ? cu.FuncGetAttribute(v, attr, (P)(uintptr_t)f) : 801;
}

int fp_launch(int dev, uint64_t f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
              unsigned shmem, uint64_t stream, void *buf, const int32_t *offs, int nargs) {
	CUR(dev);
	P params[64];
	if (nargs > 64)
		return 1;
	for (int i = 0; i < nargs; i++)
		params[i] = (char *)buf + offs[i];
	if (AMD)
		return hip.ModuleLaunchKernel((P)(uintptr_t)f, gx, gy, gz, bx, by, bz, shmem, (P)(uintptr_t)stream, params, 0);
	return cu.LaunchKernel((P)(uintptr_t)f, gx, gy, gz, bx, by, bz, shmem, (P)(uintptr_t)stream, params, 0);
}

// ---- run-time compilation ----
int fp_rtc_compile(const char *src, const char *name, int nopts, const char **opts, int want_ptx, void **code,
                   size_t *code_size, char **log) {
	*code = 0;
	*code_size = 0;
	*log = 0;
	if (!rtc.CreateProgram)
		return 7; // *_ERROR_INVALID_PROGRAM: no compiler
	P prog = 0;
	int r = rtc.CreateProgram(&prog, src, name, 0, 0, 0);
	if (r)
		return r;
	int cr = rtc.CompileProgram(prog, nopts, opts);
	size_t n = 0;
	if (rtc.GetProgramLogSize(prog, &n) == 0 && n > 1) {
		*log = malloc(n + 1);
		if (*log && rtc.GetProgramLog(prog, *log) == 0)
			(*log)[n] = 0;
		else if (*log)
			(*log)[0] = 0;
	}
	if (cr == 0) {
		int (*size_fn)(P, size_t *) = want_ptx ? rtc.GetPTXSize : rtc.GetCodeSize;
		int (*code_fn)(P, char *) = want_ptx ? rtc.GetPTX : rtc.GetCode;
		if (!size_fn || !code_fn) {
			cr = 7;
		} else if ((cr = size_fn(prog, &n)) == 0) {
			*code = malloc(n ? n : 1);
			if (!*code)
				cr = 1;
			else if ((cr = code_fn(prog, *code)) == 0)
				*code_size = n;
		}
	}
	rtc.DestroyProgram(&prog);
	return cr;
}

const char *fp_rtc_error_string(int code) {
	return rtc.GetErrorString ? rtc.GetErrorString(code) : "no run-time compiler";
}

int fp_rtc_version(int *major, int *minor) {
	*major = *minor = 0;
	return rtc.Version ? rtc.Version(major, minor) : 7;
}

int fp_rtc_supported_archs(int *archs, int max) {
	int n = 0;
	if (!rtc.GetNumSupportedArchs || !rtc.GetSupportedArchs || rtc.GetNumSupportedArchs(&n) || n <= 0)
		return -1;
	int *all = calloc(n, sizeof(int));
	if (!all)
		return -1;
	if (rtc.GetSupportedArchs(all)) {
		free(all);
		return -1;
	}
	int k = n < max ? n : max;
	for (int i = 0; i < k; i++)
		archs[i] = all[n - k + i]; // the newest ones
	free(all);
	return k;
}
