package rocblas

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// Lib is a loaded BLAS library. It stays loaded for the life of the process.
type Lib struct {
	vendor  Vendor
	path    string // the file the loader picked
	version string
}

// Vendor is the library family: AMD (rocBLAS) or NVIDIA (cuBLAS).
func (l *Lib) Vendor() Vendor { return l.vendor }

// Path is the file that was loaded.
func (l *Lib) Path() string { return l.path }

// Version is the library's own version string.
func (l *Lib) Version() string { return l.version }

func (l *Lib) String() string {
	return fmt.Sprintf("%v %s (%s)", l.vendor, l.version, l.path)
}

// Handle is a library handle bound to one stream. A Handle is not safe for
// concurrent use.
type Handle struct {
	lib    *Lib
	h      uintptr
	fast   bool
	closed bool
}

// Lib is the library the handle belongs to.
func (h *Handle) Lib() *Lib { return h.lib }

// SetFastF32 lets f32 products use reduced-precision tensor cores (TF32 on
// NVIDIA, about 3e-4 relative error instead of 1e-6). Off by default. AMD:
// rocBLAS has no such mode on the consumer GPUs we target; no effect.
func (h *Handle) SetFastF32(on bool) { h.fast = on }

// Sonames tried in order, newest first, through the system loader's search
// path (LD_LIBRARY_PATH, ld.so.cache).
var sonames = map[Vendor][]string{
	AMD:    {"librocblas.so.5", "librocblas.so.4", "librocblas.so.0"},
	NVIDIA: {"libcublas.so.13", "libcublas.so.12"},
}

// EnvPath names the environment variable that points a vendor's loader at
// one library file, bypassing the search.
func EnvPath(v Vendor) string {
	if v == AMD {
		return "FRAMEPACK_ROCBLAS"
	}
	return "FRAMEPACK_CUBLAS"
}

// Install directories tried after the loader's path, for toolkits that are
// installed but not registered with ld.so.
func searchDirs(v Vendor) []string {
	var dirs []string
	add := func(env, sub string) {
		if p := os.Getenv(env); p != "" {
			dirs = append(dirs, filepath.Join(p, sub))
		}
	}
	if v == AMD {
		add("ROCM_PATH", "lib")
		add("HIP_PATH", "lib")
		dirs = append(dirs, "/opt/rocm/lib")
	} else {
		add("CUDA_PATH", "lib64")
		add("CUDA_HOME", "lib64")
		dirs = append(dirs, "/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib")
	}
	return dirs
}

// candidates lists what to try for v: the override alone when it is set,
// else the sonames, then the sonames inside the install directories that
// exist.
func candidates(v Vendor) []string {
	if p := os.Getenv(EnvPath(v)); p != "" {
		return []string{p}
	}
	c := append([]string(nil), sonames[v]...)
	for _, d := range searchDirs(v) {
		for _, s := range sonames[v] {
			p := filepath.Join(d, s)
			if _, err := os.Stat(p); err == nil {
				c = append(c, p)
			}
		}
	}
	return c
}

var (
	openMu sync.Mutex
	opened = map[Vendor]*Lib{}
)

// Open loads rocBLAS, or cuBLAS when rocBLAS is absent. A caller that knows
// its platform (the hip package reports it) should use OpenVendor.
func Open() (*Lib, error) {
	var msgs []string
	for _, v := range []Vendor{AMD, NVIDIA} {
		l, err := OpenVendor(v)
		if err == nil {
			return l, nil
		}
		msgs = append(msgs, err.Error())
	}
	return nil, errors.New(strings.Join(msgs, "; "))
}

// OpenVendor loads the given vendor's library. The error names every file
// tried and why each failed.
func OpenVendor(v Vendor) (*Lib, error) {
	if v != AMD && v != NVIDIA {
		return nil, fmt.Errorf("rocblas: unknown vendor %d", int(v))
	}
	openMu.Lock()
	defer openMu.Unlock()
	if l := opened[v]; l != nil {
		return l, nil
	}
	var tried []string
	for _, c := range candidates(v) {
		l, err := load(v, c)
		if err == nil {
			opened[v] = l
			return l, nil
		}
		tried = append(tried, fmt.Sprintf("%s (%v)", c, err))
	}
	name := "rocBLAS"
	if v == NVIDIA {
		name = "cuBLAS"
	}
	return nil, fmt.Errorf("rocblas: %s library not found: tried %s", name, strings.Join(tried, ", "))
}

var errClosed = errors.New("rocblas: handle is closed")

// symbolError is a library that loaded but lacks a function we call.
type symbolError struct{ msg string }

func (e *symbolError) Error() string { return e.msg }
