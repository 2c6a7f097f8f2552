package atomicfile

import (
	"os"
	"sync"
)

// The temporaries being written, so that a process that must exit before
// its writers finish (a signal's deadline) can remove them first.
var (
	trackMu sync.Mutex
	tracked = map[string]int{}
)

// Track notes a temporary file or folder at path until done is called;
// RemoveTracked removes what is noted then. Write tracks its temporaries.
func Track(path string) (done func()) {
	trackMu.Lock()
	tracked[path]++
	trackMu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			trackMu.Lock()
			defer trackMu.Unlock()
			if tracked[path]--; tracked[path] <= 0 {
				delete(tracked, path)
			}
		})
	}
}

// RemoveTracked removes every tracked temporary (folders with what they
// hold) and returns how many there were. It is for a process about to
// exit with its writers still running; a temporary it removes under a
// writer fails that writer, never the path it would have replaced.
func RemoveTracked() int {
	trackMu.Lock()
	defer trackMu.Unlock()
	n := 0
	for path := range tracked {
		os.RemoveAll(path)
		delete(tracked, path)
		n++
	}
	return n
}

// Commit runs fn, a step that must not be cut in half by RemoveTracked
// (renames that swap a folder into place), with RemoveTracked held off.
func Commit(fn func() error) error {
	trackMu.Lock()
	defer trackMu.Unlock()
	return fn()
}
