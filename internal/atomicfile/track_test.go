package atomicfile

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// RemoveTracked removes what is tracked and nothing done; Commit holds it
// off while a step runs.
func TestRemoveTracked(t *testing.T) {
	dir := t.TempDir()
	kept, gone, folder := filepath.Join(dir, "kept"), filepath.Join(dir, "gone"), filepath.Join(dir, "folder")
	for _, p := range []string{kept, gone} {
		os.WriteFile(p, []byte("x"), 0o600)
	}
	os.MkdirAll(filepath.Join(folder, "sub"), 0o755)
	Track(kept)()
	Track(gone)
	Track(folder)
	if n := RemoveTracked(); n != 2 {
		t.Fatalf("removed %d, want 2", n)
	}
	for p, want := range map[string]bool{kept: true, gone: false, folder: false} {
		if _, err := os.Stat(p); (err == nil) != want {
			t.Errorf("%s exists: %v, want %v", p, err == nil, want)
		}
	}
	if n := RemoveTracked(); n != 0 {
		t.Fatalf("removed %d again", n)
	}
	// Write's temporary is tracked only while it is written.
	path := filepath.Join(dir, "a.json")
	if err := Write(path, 0o644, func(f *os.File) error {
		if n := len(tracked); n != 1 {
			t.Errorf("%d tracked while writing, want the temporary", n)
		}
		_, err := f.WriteString("{}")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if len(tracked) != 0 {
		t.Errorf("still tracked after the write: %v", tracked)
	}
	done := make(chan struct{})
	Track(gone)
	err := Commit(func() error {
		go func() { RemoveTracked(); close(done) }()
		time.Sleep(50 * time.Millisecond)
		select {
		case <-done:
			t.Error("RemoveTracked ran inside Commit")
		default:
		}
		return nil
	})
	<-done
	if err != nil {
		t.Fatal(err)
	}
}
