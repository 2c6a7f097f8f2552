//go:build kernels_sm90

package kernels

import "embed"

// precompiled holds only the sm_90 artifacts: a smaller binary for test
// runs on Hopper machines (go build -tags kernels_sm90). Other targets
// compile at run time there.
//
//go:embed precompiled/manifest.json precompiled/*.sm_90*
var precompiled embed.FS
