// Package scopetest runs ops in tests: in a scope that lives as long as the
// test, with an op's failure (a *tensor.OpError panic) failing the test.
package scopetest

import (
	"testing"

	"github.com/framepack-go/framepack/tensor"
)

// Run runs f in a new scope on be and returns its result, failing the test
// when an op of f fails. The scope closes when the test ends, so device
// tensors f returns stay valid until then.
func Run[T any](t testing.TB, be tensor.Backend, f func(s *tensor.Scope) T) T {
	t.Helper()
	s := tensor.NewScope(be)
	t.Cleanup(s.Close)
	var out T
	if err := tensor.Catch(func() { out = f(s) }); err != nil {
		t.Fatal(err)
	}
	return out
}
