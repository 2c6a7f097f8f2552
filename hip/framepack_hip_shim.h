// The C side of package hip: the vendor libraries are opened with dlopen and
// their functions called through pointers resolved with dlsym, so no SDK
// header or library is needed to build. Prototypes are declared by hand from
// the vendors' documented ABIs (see shared/spec/gpu-apis.md §1).
//
// One table is live per process: AMD (libamdhip64 + hiprtc) or NVIDIA
// (libcuda driver API + NVRTC). Every call that touches a device first makes
// that device current on the calling OS thread, because Go moves goroutines
// between threads.
#ifndef FP_SHIM_H
#define FP_SHIM_H

#include <stddef.h>
#include <stdint.h>

enum { FP_VENDOR_NONE = 0, FP_VENDOR_AMD = 1, FP_VENDOR_NVIDIA = 2 };

// Our own attribute numbers, mapped to each vendor's explicitly.
enum {
	FP_ATTR_MP_COUNT = 0,
	FP_ATTR_INTEGRATED,
	FP_ATTR_CC_MAJOR,
	FP_ATTR_CC_MINOR,
	FP_ATTR_WARP_SIZE,
	FP_ATTR_SHARED_PER_BLOCK,
	FP_ATTR_SHARED_PER_BLOCK_OPTIN,
	FP_ATTR_POOLS_SUPPORTED,
	FP_ATTR_COUNT
};

// fp_load opens the libraries of one vendor and resolves its table. On
// failure err holds why (missing library or required symbols).
int fp_load(int vendor, char *err, int errlen);
int fp_vendor(void);
void fp_reset(void);
// fp_missing_optional lists optional symbols that were not found, comma
// separated, into buf.
void fp_missing_optional(char *buf, int len);
// fp_lib_paths lists the loaded libraries, newline separated.
void fp_lib_paths(char *buf, int len);
int fp_have_rtc(void);

int fp_init(void);
int fp_device_count(int *n);
int fp_device_open(int dev); // retains the primary context (NVIDIA)
void fp_device_close(int dev);
int fp_make_current(int dev);
int fp_device_name(int dev, char *buf, int len);
int fp_device_total_mem(int dev, uint64_t *bytes);
int fp_device_attr(int dev, int attr, int *v);
// fp_device_arch writes gcnArchName (AMD) or sm_XY (NVIDIA); layout is the
// hipDeviceProp_t layout used (600 or 0), -1 on NVIDIA.
int fp_device_arch(int dev, char *buf, int len, int *layout);
int fp_driver_version(int *v);
int fp_runtime_version(int *v);
const char *fp_error_string(int code);
const char *fp_error_name(int code);

int fp_mem_info(int dev, uint64_t *free_b, uint64_t *total_b);
int fp_malloc(int dev, uint64_t *ptr, uint64_t n);
int fp_free(int dev, uint64_t ptr);
int fp_have_async_alloc(void);
int fp_malloc_async(int dev, uint64_t *ptr, uint64_t n, uint64_t stream);
int fp_free_async(int dev, uint64_t ptr, uint64_t stream);
int fp_default_pool(int dev, uint64_t *pool);
int fp_pool_trim(int dev, uint64_t pool, uint64_t keep);
int fp_pool_set_threshold(int dev, uint64_t pool, uint64_t bytes);
int fp_pool_get_attr(int dev, uint64_t pool, int attr, uint64_t *v);

int fp_host_alloc(int dev, void **p, uint64_t n);
int fp_host_free(int dev, void *p);

int fp_memcpy_h2d_async(int dev, uint64_t dst, const void *src, uint64_t n, uint64_t stream);
int fp_memcpy_d2h_async(int dev, void *dst, uint64_t src, uint64_t n, uint64_t stream);
int fp_memcpy_d2d_async(int dev, uint64_t dst, uint64_t src, uint64_t n, uint64_t stream);
// The _sync forms wait for the stream before returning, so src/dst may be
// Go memory.
int fp_memcpy_h2d_sync(int dev, uint64_t dst, const void *src, uint64_t n, uint64_t stream);
int fp_memcpy_d2h_sync(int dev, void *dst, uint64_t src, uint64_t n, uint64_t stream);
int fp_memset_async(int dev, uint64_t dst, int v, uint64_t n, uint64_t stream);

int fp_stream_create(int dev, uint64_t *s);
int fp_stream_destroy(int dev, uint64_t s);
int fp_stream_sync(int dev, uint64_t s);
int fp_stream_wait_event(int dev, uint64_t s, uint64_t e);
int fp_device_sync(int dev);

int fp_event_create(int dev, uint64_t *e, int timing);
int fp_event_destroy(int dev, uint64_t e);
int fp_event_record(int dev, uint64_t e, uint64_t s);
int fp_event_sync(int dev, uint64_t e);
int fp_event_query(int dev, uint64_t e); // 0 done, 600 not ready
int fp_event_elapsed(int dev, float *ms, uint64_t a, uint64_t b);

int fp_module_load(int dev, uint64_t *m, const void *image);
int fp_module_unload(int dev, uint64_t m);
int fp_module_function(int dev, uint64_t *f, uint64_t m, const char *name);
int fp_func_set_max_dynamic_shared(int dev, uint64_t f, int bytes);
int fp_func_get_attr(int dev, uint64_t f, int attr, int *v);
// fp_launch launches f with nargs arguments packed in buf at the given byte
// offsets (each aligned to its type).
int fp_launch(int dev, uint64_t f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
              unsigned bz, unsigned shmem, uint64_t stream, void *buf, const int32_t *offs, int nargs);

// Run-time compilation. On success *code (malloc'd) holds the code object
// (AMD) or CUBIN/PTX (NVIDIA). The log (malloc'd, may be NULL) is returned
// on success and failure. want_ptx selects PTX output on NVIDIA.
int fp_rtc_compile(const char *src, const char *name, int nopts, const char **opts, int want_ptx,
                   void **code, size_t *code_size, char **log);
const char *fp_rtc_error_string(int code);
int fp_rtc_version(int *major, int *minor);
// fp_rtc_supported_archs writes up to max NVRTC sm numbers; returns count or
// -1 when the library cannot tell.
int fp_rtc_supported_archs(int *archs, int max);

#endif
