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
