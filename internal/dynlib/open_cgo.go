//go:build cgo

package dynlib

/*
#cgo LDFLAGS: -ldl
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

// dl_open loads path; dlerror is read on the same thread as the dlopen.
static void* dl_open(const char* path, char* err, size_t errlen) {
	void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		const char* e = dlerror();
		snprintf(err, errlen, "%s", e ? e : "dlopen failed");
	}
	return h;
}

// dl_file is the file that holds addr, or "".
static void dl_file(void* addr, char* buf, size_t n) {
	Dl_info info;
	buf[0] = 0;
	if (addr && dladdr(addr, &info) && info.dli_fname)
		snprintf(buf, n, "%s", info.dli_fname);
}
*/
import "C"

import (
	"errors"
	"unsafe"
)

// Open loads path (a soname or a file) and resolves syms. On failure the
// library is closed again and nothing is returned: a missing required
// symbol is a *SymbolError, any other failure the loader's own message.
func Open(path string, syms []Symbol) (*Table, error) {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var buf [1024]C.char
	h := C.dl_open(cpath, &buf[0], C.size_t(len(buf)))
	if h == nil {
		return nil, errors.New(C.GoString(&buf[0]))
	}
	t := &Table{Path: path, Addrs: make([]uintptr, len(syms))}
	var first unsafe.Pointer
	for i, s := range syms {
		name := C.CString(s.Name)
		p := C.dlsym(h, name)
		C.free(unsafe.Pointer(name))
		if p == nil && !s.Optional {
			C.dlclose(h)
			return nil, &SymbolError{Name: s.Name}
		}
		if first == nil {
			first = p
		}
		t.Addrs[i] = uintptr(p)
	}
	C.dl_file(first, &buf[0], C.size_t(len(buf)))
	if f := C.GoString(&buf[0]); f != "" {
		t.Path = f
	}
	return t, nil
}
