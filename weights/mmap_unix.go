//go:build unix

package weights

import (
	"os"

	"golang.org/x/sys/unix"
)

// mapFile maps a whole file read-only. The mapping outlives the descriptor.
func mapFile(f *os.File, size int64) ([]byte, error) {
	return unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
}

func unmapFile(b []byte) error { return unix.Munmap(b) }

// adviseDontNeed drops the pages of data[lo:hi] from the process: they stop
// counting in its resident set, and a later access reads them again from
// the page cache or the file (the mapping is a read-only file mapping, so
// nothing is lost). The range is widened to whole pages.
func adviseDontNeed(data []byte, lo, hi int64) error {
	return advise(data, lo, hi, unix.MADV_DONTNEED)
}

// adviseWillNeed starts reading data[lo:hi] from the file in the
// background (read-ahead), so that a later access does not wait on disk.
func adviseWillNeed(data []byte, lo, hi int64) error {
	return advise(data, lo, hi, unix.MADV_WILLNEED)
}

func advise(data []byte, lo, hi int64, how int) error {
	if hi <= lo || len(data) == 0 {
		return nil
	}
	page := int64(os.Getpagesize())
	lo = lo / page * page // the mapping starts on a page boundary
	hi = min((hi+page-1)/page*page, int64(len(data)))
	return unix.Madvise(data[lo:hi], how)
}
