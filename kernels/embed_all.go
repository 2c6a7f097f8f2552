//go:build !kernels_sm90

package kernels

import "embed"

// precompiled holds every shipped artifact.
//
//go:embed precompiled
var precompiled embed.FS
