// Package errtest checks in tests that an error says what it should: the
// file, the key, the problem.
package errtest

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Mentions fails the test unless err (which must not be nil) contains
// each of want.
func Mentions(t testing.TB, err error, want ...string) {
	t.Helper()
	require.Error(t, err, "want one saying %q", want)
	for _, w := range want {
		assert.ErrorContains(t, err, w)
	}
}

// Closing fails the test on err, else returns m, closed when the test ends:
// for what a test opens or builds.
func Closing[M interface{ Close() }](t testing.TB, m M, err error) M {
	t.Helper()
	require.NoError(t, err)
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
	require.NoError(t, validate(&ok), "the valid value")
	for _, e := range edits {
		v := ok
		e.Edit(&v)
		assert.ErrorContains(t, validate(&v), e.Want, e.Name)
	}
}
