package miopen

import (
	"testing"

	"github.com/framepack-go/framepack/internal/testutil/dynlibtest"
)

// Every function the shim calls must be exported by each library version
// found here.
func TestSymbolsResolve(t *testing.T) { dynlibtest.CheckSymbols(t, libs, AMD, NVIDIA) }
