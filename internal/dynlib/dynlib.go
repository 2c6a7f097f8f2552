// Package dynlib finds and loads the GPU vendors' libraries at run time
// (rocBLAS or cuBLAS, MIOpen or cuDNN), so that nothing of their SDKs is
// needed to build: where to look for one (sonames through the system
// loader, install directories, an override variable), dlopen and the
// resolution of a symbol table, and an error that explains every failure.
// It also holds the element types those libraries' APIs share.
package dynlib

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// Library says where a shared library may be found.
type Library struct {
	// Name is the library's name in messages ("rocBLAS").
	Name string
	// Env names a variable that, when set, points at the one file to load,
	// bypassing the search.
	Env string
	// Sonames are tried in order, newest first, through the system
	// loader's search path (LD_LIBRARY_PATH, ld.so.cache).
	Sonames []string
	// Dirs are install directories tried after the loader's path, for
	// toolkits that are installed but not registered with ld.so. A
	// directory may begin with $VAR/; it is skipped while VAR is unset.
	Dirs []string
}

// ROCmDirs are a ROCm install's library directories.
func ROCmDirs() []string { return []string{"$ROCM_PATH/lib", "$HIP_PATH/lib", "/opt/rocm/lib"} }

// CUDADirs are a CUDA toolkit's library directories, then extra.
func CUDADirs(extra ...string) []string {
	return append([]string{"$CUDA_PATH/lib64", "$CUDA_HOME/lib64", "/usr/local/cuda/lib64"}, extra...)
}

// ROCm is a library of a ROCm install: its sonames, then in ROCmDirs.
func ROCm(name, env string, sonames ...string) Library {
	return Library{Name: name, Env: env, Sonames: sonames, Dirs: ROCmDirs()}
}

// CUDA is an NVIDIA library: its sonames, then in dirs (CUDADirs and the
// directories its own packages install to).
func CUDA(name, env string, sonames []string, dirs ...string) Library {
	return Library{Name: name, Env: env, Sonames: sonames, Dirs: dirs}
}

// SearchDirs is Dirs with the variables expanded, read when called.
func (l Library) SearchDirs() []string {
	var dirs []string
	for _, d := range l.Dirs {
		if strings.HasPrefix(d, "$") {
			name, rest, _ := strings.Cut(d[1:], "/")
			v := os.Getenv(name)
			if v == "" {
				continue
			}
			d = filepath.Join(v, rest)
		}
		dirs = append(dirs, d)
	}
	return dirs
}

// Candidates lists what to try: the override alone when it is set, else
// the sonames, then the sonames inside the install directories that exist.
func (l Library) Candidates() []string {
	if p := os.Getenv(l.Env); l.Env != "" && p != "" {
		return []string{p}
	}
	c := append([]string(nil), l.Sonames...)
	for _, d := range l.SearchDirs() {
		for _, s := range l.Sonames {
			p := filepath.Join(d, s)
			if _, err := os.Stat(p); err == nil {
				c = append(c, p)
			}
		}
	}
	return c
}

// Search calls load on each candidate in turn and returns the first that
// loads. The error names every file tried and why each failed.
func Search[T any](l Library, load func(path string) (T, error)) (T, error) {
	var tried []string
	for _, c := range l.Candidates() {
		v, err := load(c)
		if err == nil {
			return v, nil
		}
		tried = append(tried, fmt.Sprintf("%s (%v)", c, err))
	}
	var zero T
	return zero, fmt.Errorf("%s library not found: tried %s", l.Name, strings.Join(tried, ", "))
}

// NewLoader is a Loader of one library per vendor: amd on AMD, nvidia on
// NVIDIA; its errors start with prefix.
func NewLoader[L any](prefix string, amd, nvidia Library) *Loader[Vendor, L] {
	return &Loader[Vendor, L]{Prefix: prefix, Libraries: map[Vendor]Library{AMD: amd, NVIDIA: nvidia}}
}

// Loader loads one library per vendor on first use and keeps it for the
// life of the process. It is safe for concurrent use.
type Loader[V comparable, L any] struct {
	// Prefix starts every error ("rocblas").
	Prefix string
	// Libraries says where each vendor's library is found.
	Libraries map[V]Library
	// Symbols is what each vendor's library must (or may) export. Symbols
	// and Init are set by the package's cgo code; without them (a build
	// without cgo) every load fails with ErrNoCgo.
	Symbols func(V) []Symbol
	// Init takes a library whose symbols resolved: it hands the addresses
	// to the package's C shim and reads what it needs (the version, say).
	Init func(v V, t *Table) (L, error)

	mu     sync.Mutex
	opened map[V]L
}

// Open returns v's library, loading it on first use. The error names every
// file tried and why each failed.
func (l *Loader[V, L]) Open(v V) (L, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if lib, ok := l.opened[v]; ok {
		return lib, nil
	}
	var zero L
	spec, ok := l.Libraries[v]
	if !ok {
		return zero, fmt.Errorf("%s: unknown vendor %v", l.Prefix, v)
	}
	lib, err := Search(spec, func(path string) (L, error) { return l.OpenFile(v, path) })
	if err != nil {
		return zero, fmt.Errorf("%s: %w", l.Prefix, err)
	}
	if l.opened == nil {
		l.opened = map[V]L{}
	}
	l.opened[v] = lib
	return lib, nil
}

// OpenFile loads path as v's library, bypassing the search and the cache.
func (l *Loader[V, L]) OpenFile(v V, path string) (L, error) {
	var zero L
	if l.Symbols == nil || l.Init == nil {
		return zero, ErrNoCgo
	}
	t, err := Open(path, l.Symbols(v))
	if err != nil {
		return zero, err
	}
	return l.Init(v, t)
}

// SymbolTable is what v's library must (or may) export; nil in a build
// without cgo.
func (l *Loader[V, L]) SymbolTable(v V) []Symbol {
	if l.Symbols == nil {
		return nil
	}
	return l.Symbols(v)
}

// EnvPath names the environment variable that points v's search at one
// library file.
func (l *Loader[V, L]) EnvPath(v V) string { return l.Libraries[v].Env }

// Forget drops v's library, so that the next Open searches again (for
// tests of the search; the file stays loaded).
func (l *Loader[V, L]) Forget(v V) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.opened, v)
}

// First returns open's result for the first key that opens; otherwise the
// error joins every key's error with "; ".
func First[K, T any](keys []K, open func(K) (T, error)) (T, error) {
	var msgs []string
	for _, k := range keys {
		v, err := open(k)
		if err == nil {
			return v, nil
		}
		msgs = append(msgs, err.Error())
	}
	var zero T
	return zero, errors.New(strings.Join(msgs, "; "))
}

// Symbol is a function a library must export, or may (Optional) leave out.
type Symbol struct {
	Name     string
	Optional bool
}

// Table is a loaded library's resolved symbols. The library stays loaded
// for the life of the process.
type Table struct {
	// Path is the file the loader picked (the soname resolved), or the
	// path asked for when the loader cannot say.
	Path string
	// Addrs holds one address per symbol asked for, in order; 0 for an
	// optional symbol the library lacks.
	Addrs []uintptr
}

// ErrNoCgo is every load's error in a build without cgo.
var ErrNoCgo = errors.New("built without cgo: GPU libraries cannot be loaded")

// CallError is a failed call into a vendor library: the status it returned
// and the library's own string for it.
type CallError struct {
	Lib    string // the Go package that made the call ("rocblas")
	Func   string // the vendor function that failed
	Status int
	Name   string // the library's own string for Status
}

func (e *CallError) Error() string {
	return fmt.Sprintf("%s: %s: %s (status %d)", e.Lib, e.Func, e.Name, e.Status)
}

// SymbolError is a library that loaded but lacks a required symbol.
type SymbolError struct{ Name string }

func (e *SymbolError) Error() string { return "missing symbol " + e.Name }

// DType is an element type as the vendor libraries take it.
type DType int

const (
	F32 DType = iota + 1
	F16
	BF16
)

func (d DType) String() string {
	switch d {
	case F32:
		return "f32"
	case F16:
		return "f16"
	case BF16:
		return "bf16"
	}
	return fmt.Sprintf("dtype(%d)", int(d))
}

// Size is the element size in bytes.
func (d DType) Size() int {
	switch d {
	case F32:
		return 4
	case F16, BF16:
		return 2
	}
	return 0
}
