// Package kernels holds framepack's GPU kernel sources, written once in the
// dialect common to HIP and CUDA (see prelude.hip) and embedded in the
// binary. Each module is the prelude followed by one source file; the GPU
// backend compiles modules at run time for the device's architecture
// (hiprtc or NVRTC) and caches the code objects on disk.
package kernels

import (
	"embed"
	"sort"
	"strings"
)

//go:embed *.hip
var files embed.FS

// Prelude is the shared header every module starts with.
const Prelude = "prelude"

// Modules lists the module names (source files without .hip), sorted.
func Modules() []string {
	ents, err := files.ReadDir(".")
	if err != nil {
		panic(err)
	}
	var names []string
	for _, e := range ents {
		n := strings.TrimSuffix(e.Name(), ".hip")
		if n != Prelude {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names
}

// Source is the complete translation unit of a module: the prelude, then
// the module's file.
func Source(module string) (string, error) {
	pre, err := files.ReadFile(Prelude + ".hip")
	if err != nil {
		return "", err
	}
	body, err := files.ReadFile(module + ".hip")
	if err != nil {
		return "", err
	}
	return string(pre) + "\n#line 1 \"" + module + ".hip\"\n" + string(body), nil
}
