//go:build !unix

package weights

import (
	"io"
	"os"
)

// mapFile reads the whole file where mmap is not available.
func mapFile(f *os.File, size int64) ([]byte, error) {
	b := make([]byte, size)
	if _, err := io.ReadFull(f, b); err != nil {
		return nil, err
	}
	return b, nil
}

func unmapFile([]byte) error { return nil }

// Without mmap the file is read into memory once: there is nothing to drop
// or read ahead.
func adviseDontNeed([]byte, int64, int64) error { return nil }
func adviseWillNeed([]byte, int64, int64) error { return nil }
