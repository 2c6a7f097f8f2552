// Package errtest checks in tests that an error says what it should: the
// file, the key, the problem.
package errtest

import (
	"strings"
	"testing"
)

// Mentions fails the test unless err (which must not be nil) contains
// each of want.
func Mentions(t testing.TB, err error, want ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error; want one saying %q", want)
		return
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not say %q", err, w)
		}
	}
}

// Closing fails the test on err, else returns m, closed when the test ends:
// for what a test opens or builds.
func Closing[M interface{ Close() }](t testing.TB, m M, err error) M {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

// Edit is one change to a valid value (Name says which, in messages) and
// what the error it leads to must say.
type Edit[T any] struct {
	Name string
	Edit func(*T)
	Want string
}

// Rejects fails the test unless validate accepts ok and rejects each edit,
// made to a copy of ok, with an error that says the edit's Want.
func Rejects[T any](t testing.TB, ok T, validate func(*T) error, edits []Edit[T]) {
	t.Helper()
	if err := validate(&ok); err != nil {
		t.Fatalf("the valid value: %v", err)
		return
	}
	for _, e := range edits {
		v := ok
		e.Edit(&v)
		if err := validate(&v); err == nil || !strings.Contains(err.Error(), e.Want) {
			t.Errorf("%s: error %v, want one saying %q", e.Name, err, e.Want)
		}
	}
}
