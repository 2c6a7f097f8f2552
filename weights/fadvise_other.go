//go:build !linux

package weights

import (
	"errors"
	"os"
)

// EvictFile needs posix_fadvise, which this system's Go library lacks: it
// says so.
func EvictFile(path string) error {
	return errors.New("weights: dropping a file from the page cache needs posix_fadvise (Linux)")
}

func adviseSequential(*os.File) {}
