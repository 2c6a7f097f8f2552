package framepack

import (
	"os/exec"
	"strings"
	"testing"
)

// TestModelsNeedNoVendor: the model packages compute through tensor (and
// budget through memory) only; the device, its vendor libraries and the
// conv3d fallback policy are chosen above them. A model that imported one
// would tie itself to a device.
func TestModelsNeedNoVendor(t *testing.T) {
	const mod = "github.com/framepack-go/framepack/"
	models := []string{"./vae", "./model/...", "./sampler", "./section"}
	forbidden := []string{"hip", "miopen", "rocblas", "convchain", "gpuconv", "backend/"}
	out, err := exec.Command("go", append([]string{"list", "-deps", "-f", "{{.ImportPath}}:{{join .Imports \" \"}}"}, models...)...).Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	// go list -deps prints each package once with its direct imports; a
	// forbidden package reached from a model is named with its importer.
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, imports, _ := strings.Cut(line, ":")
		for _, imp := range strings.Fields(imports) {
			rel, ok := strings.CutPrefix(imp, mod)
			if !ok {
				continue
			}
			for _, f := range forbidden {
				if rel == f || strings.HasPrefix(rel, f) && strings.HasSuffix(f, "/") || strings.HasPrefix(rel, f+"/") {
					t.Errorf("%s imports %s: models depend on tensor and memory, not on a device", pkg, imp)
				}
			}
		}
	}
}
