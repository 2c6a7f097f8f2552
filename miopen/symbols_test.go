package miopen

import (
	"debug/elf"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// libraryFiles finds v's library files on this machine: the override
// variable, then the sonames in the usual install directories, also under
// each root of FRAMEPACK_LIBROOT (colon-separated; a package unpacked with
// dpkg -x, say).
func libraryFiles(v Vendor) (files, looked []string) {
	if p := os.Getenv(EnvPath(v)); p != "" {
		return []string{p}, []string{p}
	}
	dirs := append(searchDirs(v), "/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib")
	roots := []string{""}
	if r := os.Getenv("FRAMEPACK_LIBROOT"); r != "" {
		roots = append(strings.Split(r, ":"), roots...)
	}
	seen := map[string]bool{}
	for _, root := range roots {
		for _, d := range dirs {
			for _, s := range sonames[v] {
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

// Every function the shim calls must be exported by each library version
// found here. A library that loads is checked through dlsym; one that cannot
// be loaded on this machine (a newer C library, missing GPU runtime) through
// its ELF export table.
func TestSymbolsResolve(t *testing.T) {
	for _, v := range []Vendor{AMD, NVIDIA} {
		t.Run(v.String(), func(t *testing.T) {
			names, optional := symbols(v)
			if names == nil {
				t.Skip("built without cgo: no loader to check")
			}
			files, looked := libraryFiles(v)
			if len(files) == 0 {
				t.Skipf("no %v library here (looked in %d places, e.g. %s; set %s or FRAMEPACK_LIBROOT to check one)",
					v, len(looked), looked[0], EnvPath(v))
			}
			for _, f := range files {
				l, err := load(v, f)
				var se *symbolError
				switch {
				case err == nil:
					t.Logf("%s: loaded %s, all %d symbols resolve", f, l.version, len(names))
					continue
				case errors.As(err, &se):
					t.Errorf("%s: %v", f, err)
					continue
				}
				t.Logf("%s: cannot be loaded here (%v); checking its ELF export table", f, err)
				exported, err := elfExports(f)
				if err != nil {
					t.Errorf("%s: %v", f, err)
					continue
				}
				for i, n := range names {
					switch {
					case exported[n]:
					case optional[i]:
						t.Logf("%s: optional %s absent", f, n)
					default:
						t.Errorf("%s: does not export %s", f, n)
					}
				}
				t.Logf("%s: checked %d symbols", f, len(names))
			}
		})
	}
}

func elfExports(path string) (map[string]bool, error) {
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
