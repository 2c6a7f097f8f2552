package miopen

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// Lib is a loaded convolution library. It stays loaded for the life of the
// process.
type Lib struct {
	vendor  Vendor
	path    string
	version string
}

// Vendor is the library family: AMD (MIOpen) or NVIDIA (cuDNN).
func (l *Lib) Vendor() Vendor { return l.vendor }

// Path is the file that was loaded.
func (l *Lib) Path() string { return l.path }

// Version is the library's version.
func (l *Lib) Version() string { return l.version }

func (l *Lib) String() string { return fmt.Sprintf("%v %s (%s)", l.vendor, l.version, l.path) }

// Handle is a library handle bound to one stream, with its cache of plans.
// A Handle is not safe for concurrent use.
type Handle struct {
	lib     *Lib
	h       uintptr
	fast    bool
	wsLimit int64
	plans   map[ConvDesc]*entry
	closed  bool
}

// entry is a cached plan with the library descriptors it runs with.
type entry struct {
	plan           Plan
	xd, wd, yd, cd uintptr
}

// Lib is the library the handle belongs to.
func (h *Handle) Lib() *Lib { return h.lib }

// SetFastF32 lets f32 convolutions use TF32 tensor cores on NVIDIA (about
// 1e-3 relative error instead of 1e-6). Off by default. No effect on AMD.
// Changing it forgets the cached plans.
func (h *Handle) SetFastF32(on bool) {
	if h.fast != on {
		h.fast = on
		h.forget()
	}
}

// SetWorkspaceLimit makes plans choose only algorithms whose workspace fits
// in n bytes (0: no limit). Changing it forgets the cached plans.
func (h *Handle) SetWorkspaceLimit(n int64) {
	if h.wsLimit != n {
		h.wsLimit = n
		h.forget()
	}
}

var sonames = map[Vendor][]string{
	AMD:    {"libMIOpen.so.1"},
	NVIDIA: {"libcudnn.so.9"},
}

// EnvPath names the environment variable that points a vendor's loader at
// one library file, bypassing the search.
func EnvPath(v Vendor) string {
	if v == AMD {
		return "FRAMEPACK_MIOPEN"
	}
	return "FRAMEPACK_CUDNN"
}

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
		add("CUDNN_PATH", "lib")
		add("CUDA_PATH", "lib64")
		add("CUDA_HOME", "lib64")
		dirs = append(dirs, "/usr/local/cuda/lib64", "/usr/lib/x86_64-linux-gnu")
	}
	return dirs
}

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

// Open loads MIOpen, or cuDNN when MIOpen is absent. A caller that knows its
// platform should use OpenVendor.
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
		return nil, fmt.Errorf("miopen: unknown vendor %d", int(v))
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
	name := "MIOpen"
	if v == NVIDIA {
		name = "cuDNN 9"
	}
	return nil, fmt.Errorf("miopen: %s library not found: tried %s", name, strings.Join(tried, ", "))
}

// symbolError is a library that loaded but lacks a function we call.
type symbolError struct{ msg string }

func (e *symbolError) Error() string { return e.msg }

var errClosed = errors.New("miopen: handle is closed")
