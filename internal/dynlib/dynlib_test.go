package dynlib

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
)

func TestCandidates(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "libx.so.2"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DYNLIB_TEST_ROOT", filepath.Dir(dir))
	t.Setenv("DYNLIB_TEST_UNSET", "")
	t.Setenv("DYNLIB_TEST_FILE", "")
	l := Library{
		Name:    "libx",
		Env:     "DYNLIB_TEST_FILE",
		Sonames: []string{"libx.so.2", "libx.so.1"},
		Dirs:    []string{"$DYNLIB_TEST_UNSET/lib", "$DYNLIB_TEST_ROOT/" + filepath.Base(dir), "/nonexistent/lib"},
	}
	want := []string{dir, "/nonexistent/lib"}
	if got := l.SearchDirs(); !reflect.DeepEqual(got, want) {
		t.Errorf("SearchDirs = %q, want %q (unset variables skipped)", got, want)
	}
	// Sonames first, then only the files that exist in the directories.
	want = []string{"libx.so.2", "libx.so.1", filepath.Join(dir, "libx.so.2")}
	if got := l.Candidates(); !reflect.DeepEqual(got, want) {
		t.Errorf("Candidates = %q, want %q", got, want)
	}
	t.Setenv("DYNLIB_TEST_FILE", "/some/libx.so")
	if got := l.Candidates(); !reflect.DeepEqual(got, []string{"/some/libx.so"}) {
		t.Errorf("Candidates with the override = %q, want the override alone", got)
	}
}

func TestNewLoader(t *testing.T) {
	amd := ROCm("liba", "A_FILE", "liba.so.2", "liba.so.1")
	nv := CUDA("libn", "N_FILE", []string{"libn.so.3"}, CUDADirs("/extra")...)
	l := NewLoader[int]("pkg", amd, nv)
	want := map[Vendor]Library{
		AMD:    {Name: "liba", Env: "A_FILE", Sonames: []string{"liba.so.2", "liba.so.1"}, Dirs: ROCmDirs()},
		NVIDIA: {Name: "libn", Env: "N_FILE", Sonames: []string{"libn.so.3"}, Dirs: CUDADirs("/extra")},
	}
	if l.Prefix != "pkg" || !reflect.DeepEqual(l.Libraries, want) {
		t.Errorf("NewLoader = %q %+v, want pkg %+v", l.Prefix, l.Libraries, want)
	}
}

func TestSearchNamesEveryFailure(t *testing.T) {
	t.Setenv("DYNLIB_TEST_FILE", "")
	l := Library{Name: "libx", Env: "DYNLIB_TEST_FILE", Sonames: []string{"a.so", "b.so"}}
	_, err := Search(l, func(p string) (int, error) { return 0, errors.New("no " + p) })
	want := "libx library not found: tried a.so (no a.so), b.so (no b.so)"
	if err == nil || err.Error() != want {
		t.Errorf("error %v, want %q", err, want)
	}
	got, err := Search(l, func(p string) (string, error) {
		if p == "b.so" {
			return "loaded " + p, nil
		}
		return "", errors.New("no")
	})
	if err != nil || got != "loaded b.so" {
		t.Errorf("Search = %q, %v; want the second candidate", got, err)
	}
}

func TestFirst(t *testing.T) {
	open := func(k int) (int, error) {
		if k < 0 {
			return 0, errors.New("bad " + strings.Repeat("-", -k))
		}
		return k * 10, nil
	}
	if v, err := First([]int{-1, 2, 3}, open); v != 20 || err != nil {
		t.Errorf("First = %d, %v; want 20", v, err)
	}
	if _, err := First([]int{-1, -2}, open); err == nil || err.Error() != "bad -; bad --" {
		t.Errorf("error %v, want both keys' errors", err)
	}
}

// Open against the C math library, present wherever cgo is.
func TestOpen(t *testing.T) {
	if _, err := Open("libm.so.6", nil); errors.Is(err, ErrNoCgo) {
		t.Skip(err)
	}
	if runtime.GOOS != "linux" {
		t.Skip("libm.so.6 is a Linux soname")
	}
	tab, err := Open("libm.so.6", []Symbol{{Name: "cos"}, {Name: "no_such_fn", Optional: true}, {Name: "sin"}})
	if err != nil {
		t.Fatal(err)
	}
	if tab.Addrs[0] == 0 || tab.Addrs[1] != 0 || tab.Addrs[2] == 0 {
		t.Errorf("addresses %x: want cos and sin resolved, the optional symbol 0", tab.Addrs)
	}
	if !filepath.IsAbs(tab.Path) || !strings.Contains(tab.Path, "libm") {
		t.Errorf("Path %q: want the file the loader picked", tab.Path)
	}

	_, err = Open("libm.so.6", []Symbol{{Name: "cos"}, {Name: "no_such_fn"}})
	var se *SymbolError
	if !errors.As(err, &se) || se.Name != "no_such_fn" || err.Error() != "missing symbol no_such_fn" {
		t.Errorf("error %v, want a SymbolError for no_such_fn", err)
	}

	_, err = Open("/nonexistent/libx.so", []Symbol{{Name: "cos"}})
	if err == nil || errors.As(err, &se) || !strings.Contains(err.Error(), "/nonexistent/libx.so") {
		t.Errorf("error %v, want the loader's message naming the file", err)
	}
}

func TestLoader(t *testing.T) {
	if _, err := Open("libm.so.6", nil); err != nil {
		t.Skip(err)
	}
	t.Setenv("DYNLIB_TEST_FILE", "")
	loads := 0
	l := &Loader[string, string]{
		Prefix:    "pkg",
		Libraries: map[string]Library{"x": {Name: "libx", Env: "DYNLIB_TEST_FILE", Sonames: []string{"libm.so.6"}}},
		Symbols:   func(string) []Symbol { return []Symbol{{Name: "cos"}} },
		Init: func(v string, t *Table) (string, error) {
			loads++
			return v + ":" + filepath.Base(t.Path), nil
		},
	}
	for range 2 {
		if got, err := l.Open("x"); got != "x:libm.so.6" || err != nil {
			t.Fatalf("Open = %q, %v", got, err)
		}
	}
	if loads != 1 {
		t.Errorf("%d loads, want 1 (kept after the first)", loads)
	}
	if _, err := l.Open("y"); err == nil || err.Error() != "pkg: unknown vendor y" {
		t.Errorf("error %v for an unknown vendor", err)
	}
	l.Forget("x")
	t.Setenv("DYNLIB_TEST_FILE", "/nonexistent/libm.so.6")
	if _, err := l.Open("x"); err == nil || !strings.HasPrefix(err.Error(), "pkg: libx library not found: tried /nonexistent/libm.so.6 (") {
		t.Errorf("error %v after Forget with a bad override", err)
	}
}
