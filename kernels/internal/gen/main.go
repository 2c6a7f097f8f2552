// Command gen builds the precompiled kernels (go generate ./kernels): every
// module for every shipped target with clang-19 and no vendor SDK — PTX for
// NVIDIA, code objects for AMD — gzipped into kernels/precompiled with a
// manifest of source and artifact hashes. A module whose source hash matches
// the manifest and whose artifacts are intact is kept as it is, so a change
// to one module rebuilds that module only.
package main

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"

	"github.com/framepack-go/framepack/kernels"
)

func main() {
	out := flag.String("out", "precompiled", "output folder")
	clang := flag.String("clang", "clang++-19", "the clang driver")
	force := flag.Bool("force", false, "rebuild every module")
	cubins := flag.String("cubins", "", "a folder of <module>.<target>.<ptx sha256[:16]>.cubin files assembled by ptxas from the shipped PTX, to ship beside it")
	jobs := flag.Int("j", runtime.NumCPU(), "parallel compiles")
	flag.Parse()
	if err := run(*out, *clang, *force, *jobs, *cubins); err != nil {
		fmt.Fprintln(os.Stderr, "kernels/gen:", err)
		os.Exit(1)
	}
}

type job struct{ module, target, kind string }

func run(out, clang string, force bool, jobs int, cubins string) error {
	ver, err := exec.Command(clang, "--version").Output()
	if err != nil {
		return fmt.Errorf("%s --version: %w (apt-get install clang-19 lld-19)", clang, err)
	}
	version := strings.SplitN(strings.TrimSpace(string(ver)), "\n", 2)[0]
	old := readManifest(filepath.Join(out, kernels.ManifestFile))
	man := kernels.Manifest{Compiler: version, Modules: map[string]kernels.ModuleArtifacts{}}
	var todo []job
	for _, m := range kernels.Modules() {
		h, err := kernels.SourceHash(m)
		if err != nil {
			return err
		}
		prev, had := old.Modules[m]
		keep := had && !force && prev.SourceSHA256 == h && intact(out, m, prev)
		ma := kernels.ModuleArtifacts{SourceSHA256: h, Targets: map[string]kernels.Artifact{}}
		for _, t := range kernels.NVIDIATargets {
			if keep && prev.Targets[t].Kind == "ptx" {
				ma.Targets[t] = prev.Targets[t]
			} else {
				todo = append(todo, job{m, t, "ptx"})
			}
		}
		for _, t := range kernels.AMDTargets {
			if keep && prev.Targets[t].Kind == "co" {
				ma.Targets[t] = prev.Targets[t]
			} else {
				todo = append(todo, job{m, t, "co"})
			}
		}
		// Cubins are machine code built from this PTX elsewhere (ptxas is
		// not free software); they stay only while the source is unchanged.
		if keep {
			for t, a := range prev.Targets {
				if a.Kind == "cubin" {
					ma.Targets[t] = a
				}
			}
		}
		man.Modules[m] = ma
	}
	// NVIDIA first: PTX builds in seconds, AMD code objects in minutes.
	sort.SliceStable(todo, func(i, j int) bool { return todo[i].kind == "ptx" && todo[j].kind != "ptx" })
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	// The manifest is rewritten after every artifact, listing only what is
	// built, so an interrupted run keeps its finished work.
	done := kernels.Manifest{Compiler: version, Modules: map[string]kernels.ModuleArtifacts{}}
	for m, ma := range man.Modules {
		done.Modules[m] = kernels.ModuleArtifacts{SourceSHA256: ma.SourceSHA256, Targets: maps.Clone(ma.Targets)}
	}
	if err := writeManifest(out, done); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "framepack-kernels-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	var mu sync.Mutex
	var firstErr error
	sem := make(chan struct{}, max(jobs, 1))
	var wg sync.WaitGroup
	for _, j := range todo {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			a, err := build(clang, tmp, out, j)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if firstErr == nil {
					firstErr = err
				}
				return
			}
			man.Modules[j.module].Targets[j.target] = a
			done.Modules[j.module].Targets[j.target] = a
			if err := writeManifest(out, done); err != nil && firstErr == nil {
				firstErr = err
			}
			fmt.Printf("%s %s: %s\n", j.module, j.target, j.kind)
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	// Drop artifacts the manifest no longer lists.
	keepNames := map[string]bool{kernels.ManifestFile: true}
	for m, ma := range man.Modules {
		for t := range ma.Targets {
			keepNames[kernels.ArtifactName(m, t)] = true
		}
	}
	ents, _ := os.ReadDir(out)
	for _, e := range ents {
		if !keepNames[e.Name()] {
			os.Remove(filepath.Join(out, e.Name()))
		}
	}
	if cubins != "" {
		if err := importCubins(out, cubins, &man); err != nil {
			return err
		}
	}
	return writeManifest(out, man)
}

// importCubins ships the cubins in dir that were assembled from the PTX the
// manifest lists now (their names carry its hash), as "<target>.cubin".
func importCubins(out, dir string, man *kernels.Manifest) error {
	n := 0
	for m, ma := range man.Modules {
		for _, t := range kernels.NVIDIATargets {
			ptx, ok := ma.Targets[t]
			if !ok || ptx.Kind != "ptx" {
				continue
			}
			code, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("%s.%s.%s.cubin", m, t, ptx.SHA256[:16])))
			if os.IsNotExist(err) {
				continue
			}
			if err != nil {
				return err
			}
			if len(code) < 64 || string(code[:4]) != "\x7fELF" {
				return fmt.Errorf("%s %s: the cubin is not an ELF file", m, t)
			}
			var z bytes.Buffer
			zw, _ := gzip.NewWriterLevel(&z, gzip.BestCompression)
			zw.Write(code)
			if err := zw.Close(); err != nil {
				return err
			}
			key := t + kernels.CubinSuffix
			if err := writeAtomic(filepath.Join(out, kernels.ArtifactName(m, key)), z.Bytes()); err != nil {
				return err
			}
			sum := sha256.Sum256(code)
			ma.Targets[key] = kernels.Artifact{Kind: "cubin", SHA256: hex.EncodeToString(sum[:])}
			n++
		}
	}
	fmt.Printf("imported %d cubins\n", n)
	return nil
}

func writeManifest(out string, m kernels.Manifest) error {
	data, err := json.MarshalIndent(m, "", "\t")
	if err != nil {
		return err
	}
	return writeAtomic(filepath.Join(out, kernels.ManifestFile), append(data, '\n'))
}

func build(clang, tmp, out string, j job) (kernels.Artifact, error) {
	src, err := kernels.Source(j.module)
	if err != nil {
		return kernels.Artifact{}, err
	}
	base := filepath.Join(tmp, j.module+"."+j.target)
	in := filepath.Join(tmp, kernels.SourceFileName(j.module, j.target))
	if err := os.WriteFile(in, []byte(src), 0o644); err != nil {
		return kernels.Artifact{}, err
	}
	obj := base + "." + j.kind
	args := kernels.CompileArgs(j.kind, j.target, in, obj)
	if msg, err := exec.Command(clang, args...).CombinedOutput(); err != nil {
		return kernels.Artifact{}, fmt.Errorf("%s for %s: %s %s: %v\n%s", j.module, j.target, clang, strings.Join(args, " "), err, msg)
	}
	code, err := os.ReadFile(obj)
	if err != nil {
		return kernels.Artifact{}, err
	}
	var z bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&z, gzip.BestCompression)
	zw.Write(code)
	if err := zw.Close(); err != nil {
		return kernels.Artifact{}, err
	}
	if err := writeAtomic(filepath.Join(out, kernels.ArtifactName(j.module, j.target)), z.Bytes()); err != nil {
		return kernels.Artifact{}, err
	}
	sum := sha256.Sum256(code)
	return kernels.Artifact{Kind: j.kind, SHA256: hex.EncodeToString(sum[:])}, nil
}

func readManifest(path string) kernels.Manifest {
	m := kernels.Manifest{Modules: map[string]kernels.ModuleArtifacts{}}
	if data, err := os.ReadFile(path); err == nil {
		json.Unmarshal(data, &m)
	}
	return m
}

// intact reports whether every artifact of a module is on disk with the
// manifest's hash.
func intact(out, module string, ma kernels.ModuleArtifacts) bool {
	names := make([]string, 0, len(ma.Targets))
	for t := range ma.Targets {
		names = append(names, t)
	}
	sort.Strings(names)
	for _, t := range names {
		f, err := os.Open(filepath.Join(out, kernels.ArtifactName(module, t)))
		if err != nil {
			return false
		}
		zr, err := gzip.NewReader(f)
		if err != nil {
			f.Close()
			return false
		}
		h := sha256.New()
		_, err = bytes.NewBuffer(nil).ReadFrom(teeHash{zr, h})
		f.Close()
		if err != nil || hex.EncodeToString(h.Sum(nil)) != ma.Targets[t].SHA256 {
			return false
		}
	}
	return true
}

type teeHash struct {
	r interface{ Read([]byte) (int, error) }
	h interface{ Write([]byte) (int, error) }
}

func (t teeHash) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	t.h.Write(p[:n])
	return n, err
}

func writeAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(0o644)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}
