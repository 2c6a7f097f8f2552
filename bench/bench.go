// Package bench measures the engine as a user runs it: each tool (generate,
// transformer, vae, serve, compare, make-models) does its work and prints
// one JSON object per measurement. The framepack command's `bench`
// subcommands define the flags and call the tools here; the tools that
// need a fresh process (generate, serve, compare) run the framepack
// program again.
package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
)

// storeBytes caps the file store of the farms bench serve and bench farm
// run: their files are small, and a disk that holds real models may have
// little room left for the default 20 GiB.
const storeBytes = 4 << 30

// Result is one measurement line. Times are seconds, sizes bytes.
type Result map[string]any

// Print writes r as one JSON line.
func Print(w io.Writer, r Result) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// merged is a new Result with a's keys, then b's.
func merged(a, b Result) Result {
	out := maps.Clone(a)
	if out == nil {
		out = Result{}
	}
	maps.Copy(out, b)
	return out
}

// UsageError is options that cannot run: nothing was measured.
type UsageError struct{ err error }

func (e *UsageError) Error() string { return e.err.Error() }
func (e *UsageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error {
	return &UsageError{fmt.Errorf(format, args...)}
}

// usage marks err (when not nil) as a UsageError.
func usage(err error) error {
	var ue *UsageError
	if err == nil || errors.As(err, &ue) {
		return err
	}
	return &UsageError{err}
}

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }

func gib(b int64) float64 { return float64(b) / (1 << 30) }
