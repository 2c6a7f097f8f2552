package atomicfile

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.json")
	if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(path, []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	st, _ := os.Stat(path)
	if err != nil || string(b) != "new" || st.Mode().Perm() != 0o644 {
		t.Fatalf("%q %v, mode %v", b, err, st.Mode())
	}

	// A failing writer leaves the old contents and no temporary.
	boom := errors.New("boom")
	err = Write(path, 0o644, func(f *os.File) error {
		f.WriteString("partial")
		return boom
	})
	if err != boom {
		t.Fatalf("writer's error: %v", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "new" {
		t.Fatalf("a failed write changed the file: %q", b)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("left behind: %v", ents)
	}
	if err := WriteFile(filepath.Join(dir, "no", "such"), nil, 0o644); err == nil {
		t.Fatal("a missing folder must be an error")
	}
}
