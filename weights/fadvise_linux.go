package weights

import (
	"os"

	"golang.org/x/sys/unix"
)

// EvictFile drops a file's clean pages from the page cache
// (posix_fadvise DONTNEED), so that the next read comes from the disk:
// for measuring cold loads without root. Pages that a process has mapped
// and touched stay.
func EvictFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
}

// adviseSequential tells the kernel a file will be read in order (a larger
// read-ahead); best effort.
func adviseSequential(f *os.File) { _ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_SEQUENTIAL) }
