// Package dynlibtest checks, in tests, that the libraries installed on a
// machine export every symbol a loader resolves, also where they cannot be
// loaded (a newer C library, no GPU runtime), through their ELF export
// tables.
package dynlibtest

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/framepack-go/framepack/internal/dynlib"
	"github.com/framepack-go/framepack/internal/testutil/errtest"
)

// Files finds l's library files on this machine: the override variable's
// file alone, else the sonames in the install directories and the system's
// library directories, also under each root of FRAMEPACK_LIBROOT
// (colon-separated; a package unpacked with dpkg -x, say) and under each
// package scripts/setup.sh unpacked into the user's cache
// (framepack/<package>). looked is every path considered.
func Files(l dynlib.Library) (files, looked []string) {
	if p := os.Getenv(l.Env); l.Env != "" && p != "" {
		return []string{p}, []string{p}
	}
	dirs := append(l.SearchDirs(), "/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib")
	roots := []string{""}
	if r := os.Getenv("FRAMEPACK_LIBROOT"); r != "" {
		roots = append(strings.Split(r, ":"), roots...)
	}
	if c, err := os.UserCacheDir(); err == nil {
		unpacked, _ := filepath.Glob(filepath.Join(c, "framepack", "*", "usr"))
		for _, u := range unpacked {
			roots = append(roots, filepath.Dir(u))
		}
	}
	seen := map[string]bool{}
	for _, root := range roots {
		for _, d := range dirs {
			for _, s := range l.Sonames {
				p := filepath.Join(root, d, s)
				looked = append(looked, p)
				if _, err := os.Stat(p); err == nil && !seen[p] {
					seen[p] = true
					files = append(files, p)
				}
			}
		}
	}
	return files, looked
}

// CheckSymbols checks, in one subtest per vendor, every file of each
// vendor's library found here (see Files) against l.Symbols. A file that
// l.OpenFile loads passes; one it rejects for a missing symbol (a
// *dynlib.SymbolError in its error chain) fails; one it cannot load for
// another reason is checked through its ELF export table. A vendor without
// symbols (a build without cgo) or without a file is skipped.
func CheckSymbols[V comparable, L any](t *testing.T, l *dynlib.Loader[V, L], vendors ...V) {
	for _, v := range vendors {
		t.Run(fmt.Sprint(v), func(t *testing.T) { checkVendor(t, l, v) })
	}
}

func checkVendor[V comparable, L any](t *testing.T, l *dynlib.Loader[V, L], v V) {
	syms, lib := l.SymbolTable(v), l.Libraries[v]
	if syms == nil {
		t.Skip("built without cgo: no loader to check")
	}
	for i, s := range syms {
		if s.Name == "" {
			t.Fatalf("symbol %d of the table has no name", i)
		}
	}
	files, looked := Files(lib)
	if len(files) == 0 {
		t.Skipf("no %s library here (looked in %d places, e.g. %s; set %s or FRAMEPACK_LIBROOT to check one)",
			lib.Name, len(looked), looked[0], lib.Env)
	}
	for _, f := range files {
		loaded, err := l.OpenFile(v, f)
		var se *dynlib.SymbolError
		switch {
		case err == nil:
			t.Logf("%s: loaded %v, all %d symbols resolve", f, loaded, len(syms))
			continue
		case errors.As(err, &se):
			t.Errorf("%s: %v", f, err)
			continue
		}
		t.Logf("%s: cannot be loaded here (%v); checking its ELF export table", f, err)
		exported, err := Exports(f)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		for _, s := range syms {
			switch {
			case exported[s.Name]:
			case s.Optional:
				t.Logf("%s: optional %s absent", f, s.Name)
			default:
				t.Errorf("%s: does not export %s", f, s.Name)
			}
		}
		t.Logf("%s: checked %d symbols", f, len(syms))
	}
}

// Exports is the set of functions path defines in its dynamic symbol table.
func Exports(path string) (map[string]bool, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		return nil, err
	}
	m := map[string]bool{}
	for _, s := range syms {
		if s.Section != elf.SHN_UNDEF && elf.ST_TYPE(s.Info) == elf.STT_FUNC {
			m[s.Name] = true
		}
	}
	return m, nil
}

// CheckMissing points v's override variable at a file that does not exist
// and checks that opening fails with one error naming the library and the
// file tried. The loader forgets v first, so that the open searches again
// (a library already loaded stays loaded).
func CheckMissing[V comparable, L any](t *testing.T, l *dynlib.Loader[V, L], v V) {
	t.Helper()
	lib := l.Libraries[v]
	path := "/nonexistent/" + lib.Sonames[0]
	t.Setenv(lib.Env, path)
	l.Forget(v)
	_, err := l.Open(v)
	errtest.Mentions(t, err, lib.Name+" library not found", "tried "+path)
}
