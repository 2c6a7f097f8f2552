package framepack

import (
	"os/exec"
	"path"
	"strings"
	"testing"
)

// The layering of docs/architecture.md, held with go list: who may import
// whom among the module's packages (their non-test files).

const module = "github.com/framepack-go/framepack/"

// imports lists each package go list reaches from pkgs (with -deps, every
// package they depend on too) with the module packages it imports, both
// relative to the module root.
func imports(t *testing.T, deps bool, pkgs ...string) map[string][]string {
	t.Helper()
	args := []string{"list", "-f", "{{.ImportPath}}:{{join .Imports \" \"}}"}
	if deps {
		args = append(args, "-deps")
	}
	out, err := exec.Command("go", append(args, pkgs...)...).Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	m := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, imps, _ := strings.Cut(line, ":")
		rel, ok := strings.CutPrefix(pkg+"/", module)
		if !ok {
			continue
		}
		rel = strings.TrimSuffix(rel, "/")
		m[rel] = nil
		for _, imp := range strings.Fields(imps) {
			if r, ok := strings.CutPrefix(imp, module); ok {
				m[rel] = append(m[rel], r)
			}
		}
	}
	return m
}

// under reports whether pkg is dir or a package below it.
func under(pkg, dir string) bool { return pkg == dir || strings.HasPrefix(pkg, dir+"/") }

// testHelper reports whether pkg is imported only by tests: a package of
// internal/testutil, or a <name>test package beside what it checks
// (tensor/backendtest, vae/internal/modeltest).
func testHelper(pkg string) bool {
	return under(pkg, "internal/testutil") || strings.HasSuffix(path.Base(pkg), "test")
}

// TestModelsNeedNoVendor: the model packages compute through tensor (and
// budget through memory) only; the device, its vendor libraries and the
// conv3d fallback policy are chosen above them. A model that imported one
// would tie itself to a device.
func TestModelsNeedNoVendor(t *testing.T) {
	forbidden := []string{"hip", "rocblas", "miopen", "nccl", "internal/dynlib", "kernels", "convchain", "backend", "internal/device"}
	var models []string
	for pkg := range imports(t, false, "./vae/...", "./model/...", "./sampler", "./section") {
		if !testHelper(pkg) {
			models = append(models, module+pkg)
		}
	}
	for pkg, imps := range imports(t, true, models...) {
		for _, imp := range imps {
			for _, f := range forbidden {
				if under(imp, f) {
					t.Errorf("%s imports %s: models depend on tensor and memory, not on a device", pkg, imp)
				}
			}
		}
	}
}

// TestVendorLibrariesLoadInFourPackages: hip, rocblas, miopen and nccl are
// the only packages that load a vendor library (through internal/dynlib);
// the test helpers that check the installed libraries are the exception.
func TestVendorLibrariesLoadInFourPackages(t *testing.T) {
	vendors := map[string]bool{"hip": true, "rocblas": true, "miopen": true, "nccl": true}
	for pkg, imps := range imports(t, false, "./...") {
		for _, imp := range imps {
			if imp == "internal/dynlib" && !vendors[pkg] && !testHelper(pkg) {
				t.Errorf("%s imports %s: only hip, rocblas, miopen and nccl load a vendor library", pkg, imp)
			}
		}
	}
}

// TestTestHelpersStayInTests: no package but a test helper imports one, so
// the engine and the CLI never link test code.
func TestTestHelpersStayInTests(t *testing.T) {
	for pkg, imps := range imports(t, false, "./...") {
		if testHelper(pkg) {
			continue
		}
		for _, imp := range imps {
			if testHelper(imp) {
				t.Errorf("%s imports the test helper %s", pkg, imp)
			}
		}
	}
}

// TestBenchOnlyInTheCommand: the measurement tools (package bench) sit
// beside the command, above the library: only cmd/framepack imports them,
// and they import no command.
func TestBenchOnlyInTheCommand(t *testing.T) {
	for pkg, imps := range imports(t, false, "./...") {
		for _, imp := range imps {
			switch {
			case under(imp, "bench") && pkg != "cmd/framepack" && !under(pkg, "bench"):
				t.Errorf("%s imports %s: only the command runs the bench tools", pkg, imp)
			case under(pkg, "bench") && under(imp, "cmd"):
				t.Errorf("%s imports %s: the bench tools import no command", pkg, imp)
			}
		}
	}
}
