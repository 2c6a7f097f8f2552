package kernels

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
)

// The kernels ship precompiled in the binary, so a GPU of a shipped
// architecture never waits for a run-time compiler: PTX for the NVIDIA
// targets (the driver turns it into machine code, and caches it) and code
// objects for the AMD ones, all built offline by clang-19 without a vendor
// SDK (go generate ./kernels; internal/gen). Each artifact records the hash
// of the source it was built from, and one whose source has changed since is
// never used.

//go:generate go run ./internal/gen

// ManifestFile is the manifest's name inside the precompiled folder.
const ManifestFile = "manifest.json"

// Manifest describes the precompiled artifacts.
type Manifest struct {
	// Compiler is the version line of the compiler that built them.
	Compiler string `json:"compiler"`
	// Modules maps a module name to its artifacts.
	Modules map[string]ModuleArtifacts `json:"modules"`
}

// ModuleArtifacts are one module's artifacts and the source they came from.
type ModuleArtifacts struct {
	// SourceSHA256 is the hash of Source(module) when they were built.
	SourceSHA256 string `json:"source_sha256"`
	// Targets maps a target (sm_90, gfx1100 …) to its artifact.
	Targets map[string]Artifact `json:"targets"`
}

// Artifact is one compiled module for one target, stored gzipped as
// precompiled/<module>.<target>.gz.
type Artifact struct {
	// Kind is "ptx" (NVIDIA, text, loaded NUL-terminated), "cubin" (NVIDIA
	// machine code) or "co" (an AMD code object ELF).
	Kind string `json:"kind"`
	// SHA256 is the hash of the uncompressed artifact.
	SHA256 string `json:"sha256"`
}

// CubinSuffix marks a target key that holds machine code: "sm_90.cubin"
// is the sm_90 PTX assembled by ptxas (on a machine with the CUDA toolkit;
// the generator imports it while the PTX it came from is current). The
// driver loads a cubin without compiling, where PTX costs a JIT compile on
// a machine's first run.
const CubinSuffix = ".cubin"

// NVIDIATargets and AMDTargets are the architectures kernels ship for. An
// NVIDIA GPU newer than the newest listed loads the newest PTX, which its
// driver compiles forward; clang-19 emits PTX up to sm_90.
var (
	NVIDIATargets = []string{"sm_80", "sm_86", "sm_89", "sm_90"}
	AMDTargets    = []string{"gfx90a", "gfx942", "gfx1100", "gfx1101", "gfx1102", "gfx1151", "gfx1200", "gfx1201"}
)

var manifestOnce = sync.OnceValues(func() (*Manifest, error) {
	data, err := precompiled.ReadFile("precompiled/" + ManifestFile)
	if err != nil {
		return &Manifest{Modules: map[string]ModuleArtifacts{}}, nil // none shipped
	}
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("kernels: precompiled/%s: %w", ManifestFile, err)
	}
	return &m, nil
})

// ReadManifest returns the embedded manifest (empty when none is shipped).
func ReadManifest() (*Manifest, error) { return manifestOnce() }

// SourceHash is the hex SHA-256 of a module's complete source.
func SourceHash(module string) (string, error) {
	src, err := Source(module)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(src))
	return hex.EncodeToString(sum[:]), nil
}

// Precompiled returns the shipped artifact of module for target and its kind,
// or ok=false when none is shipped or it was built from another source.
func Precompiled(module, target string) (code []byte, kind string, ok bool, err error) {
	m, err := ReadManifest()
	if err != nil {
		return nil, "", false, err
	}
	ma, found := m.Modules[module]
	if !found {
		return nil, "", false, nil
	}
	a, found := ma.Targets[target]
	if !found {
		return nil, "", false, nil
	}
	if h, err := SourceHash(module); err != nil || h != ma.SourceSHA256 {
		return nil, "", false, err
	}
	code, err = readArtifact(module, target, a)
	if err != nil {
		return nil, "", false, err
	}
	return code, a.Kind, true, nil
}

// CompileArgs are clang-19's arguments that build the artifact of kind
// ("ptx" or "co") for target from the source file in into out. The build is
// reproducible: the same source and compiler give the same bytes.
func CompileArgs(kind, target, in, out string) []string {
	if kind == "ptx" {
		// PTX 7.8 is the first with sm_90; every target uses it.
		return []string{"-x", "cuda", "--cuda-device-only", "--cuda-gpu-arch=" + target, "-nocudainc", "-nocudalib",
			"-Xclang", "-target-feature", "-Xclang", "+ptx78", "-O3", "-S", in, "-o", out}
	}
	// -fuse-cuid=none: the compile-unit id would otherwise hash the path.
	return []string{"-x", "hip", "--cuda-device-only", "--offload-arch=" + target, "-nogpulib", "-nogpuinc",
		"--no-gpu-bundle-output", "-fuse-cuid=none", "-O3", "-c", in, "-o", out}
}

// SourceFileName is the name the source is compiled under for target: the
// name is part of an AMD code object, so a rebuild uses the same one.
func SourceFileName(module, target string) string { return module + "." + target + ".hip" }

// ArtifactName is an artifact's file name in the precompiled folder.
func ArtifactName(module, target string) string { return module + "." + target + ".gz" }

func readArtifact(module, target string, a Artifact) ([]byte, error) {
	name := "precompiled/" + ArtifactName(module, target)
	f, err := precompiled.Open(name)
	if err != nil {
		return nil, fmt.Errorf("kernels: %s: %w", name, err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("kernels: %s: %w", name, err)
	}
	var buf bytes.Buffer
	if _, err := io.Copy(&buf, zr); err != nil {
		return nil, fmt.Errorf("kernels: %s: %w", name, err)
	}
	sum := sha256.Sum256(buf.Bytes())
	if hex.EncodeToString(sum[:]) != a.SHA256 {
		return nil, fmt.Errorf("kernels: %s: contents do not match the manifest's hash", name)
	}
	return buf.Bytes(), nil
}

// NVIDIATarget picks the artifact target for an NVIDIA device of compute
// capability major.minor among those shipped for module: the exact sm_XY
// when shipped, else the newest PTX not newer than the device.
func NVIDIATarget(module string, major, minor int) (string, bool) {
	m, err := ReadManifest()
	if err != nil {
		return "", false
	}
	ma := m.Modules[module]
	cc := major*10 + minor
	exact := fmt.Sprintf("sm_%d", cc)
	if _, ok := ma.Targets[exact+CubinSuffix]; ok {
		return exact + CubinSuffix, true
	}
	if _, ok := ma.Targets[exact]; ok {
		return exact, true
	}
	best, bestCC := "", 0
	for t, a := range ma.Targets {
		var v int
		if a.Kind != "ptx" || strings.HasSuffix(t, CubinSuffix) {
			continue
		}
		if _, err := fmt.Sscanf(t, "sm_%d", &v); err != nil {
			continue
		}
		if v <= cc && v > bestCC {
			best, bestCC = t, v
		}
	}
	return best, best != ""
}

// AMDTarget is the artifact target of an AMD gcnArchName: the processor
// without its feature flags ("gfx90a:sramecc+:xnack-" → "gfx90a"; the code
// objects are built for any xnack/sramecc setting).
func AMDTarget(gcnArch string) string {
	t, _, _ := strings.Cut(gcnArch, ":")
	return t
}

// Summary is one line naming the shipped targets, for `framepack doctor`.
func Summary() string {
	m, err := ReadManifest()
	if err != nil {
		return "unreadable: " + err.Error()
	}
	kinds := map[string]map[string]bool{}
	stale := 0
	for name, ma := range m.Modules {
		if h, err := SourceHash(name); err != nil || h != ma.SourceSHA256 {
			stale++
			continue
		}
		for t, a := range ma.Targets {
			if kinds[a.Kind] == nil {
				kinds[a.Kind] = map[string]bool{}
			}
			kinds[a.Kind][strings.TrimSuffix(t, CubinSuffix)] = true
		}
	}
	if len(kinds) == 0 {
		return "none (kernels compile at run time)"
	}
	var parts []string
	for _, k := range []string{"cubin", "ptx", "co"} {
		if len(kinds[k]) == 0 {
			continue
		}
		var ts []string
		for t := range kinds[k] {
			ts = append(ts, t)
		}
		sort.Strings(ts)
		label := map[string]string{"cubin": "NVIDIA cubin", "ptx": "NVIDIA PTX", "co": "AMD"}[k]
		parts = append(parts, label+" "+strings.Join(ts, " "))
	}
	s := strings.Join(parts, "; ")
	if stale > 0 {
		s += fmt.Sprintf(" (%d modules stale: they compile at run time)", stale)
	}
	return s
}
