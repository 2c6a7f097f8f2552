// Package atomicfile replaces a file so that its path names either what it
// held before or the whole new contents, never a partial write: the data
// goes to a temporary file beside the path, is flushed to disk, and the
// temporary is renamed over the path. A crash, a full disk or a failed
// writer leaves the path as it was and no temporary behind.
package atomicfile

import (
	"io/fs"
	"os"
	"path/filepath"
)

// Write creates a temporary file in path's folder (which must exist),
// lets write fill it — through the open file, or by its name (f.Name())
// for a writer in another process — then syncs it, gives it mode perm and
// renames it over path. On any error the temporary is removed and path is
// untouched.
func Write(path string, perm fs.FileMode, write func(f *os.File) error) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer Track(f.Name())()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err = write(f); err != nil {
		return err
	}
	// A rename that reaches the disk before the data would leave an empty
	// file after a crash.
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Chmod(f.Name(), perm); err != nil { // CreateTemp makes 0600
		return err
	}
	return os.Rename(f.Name(), path)
}

// WriteFile is Write of data.
func WriteFile(path string, data []byte, perm fs.FileMode) error {
	return Write(path, perm, func(f *os.File) error {
		_, err := f.Write(data)
		return err
	})
}
