package gpu

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/framepack-go/framepack/hip"
	"github.com/framepack-go/framepack/internal/atomicfile"
	"github.com/framepack-go/framepack/kernels"
)

// module is one kernel source file compiled for the device, on first use.
type module struct {
	once sync.Once
	mod  *hip.Module
	err  error
}

// options are the extra compiler options of every module.
func (b *Backend) options() []string {
	if b.opts.OwnMath {
		return []string{"-DFP_OWN_MATH"}
	}
	return nil
}

// module compiles (or loads from the disk cache) and loads a module.
func (b *Backend) module(name string) (*hip.Module, error) {
	b.modMu.Lock()
	m := b.mods[name]
	if m == nil {
		m = &module{}
		b.mods[name] = m
	}
	b.modMu.Unlock()
	m.once.Do(func() {
		code, err := b.codeObject(name)
		if err != nil {
			m.err = err
			return
		}
		m.mod, m.err = b.dev.LoadModule(code)
		if m.err != nil {
			m.err = fmt.Errorf("gpu: load kernels %s: %w", name, m.err)
		}
	})
	return m.mod, m.err
}

// Warmup compiles and loads every kernel module now, in parallel.
func (b *Backend) Warmup() error {
	mods := kernels.Modules()
	errs := make([]error, len(mods))
	var wg sync.WaitGroup
	for i, m := range mods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = b.module(m)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// codeObject returns the module's code object for this device: from the
// cache directory when a valid entry exists (key: source hash, arch,
// compiler version, options), else compiled and stored atomically. A cache
// file starts with the SHA-256 of its contents, so a torn write is ignored.
func (b *Backend) codeObject(name string) ([]byte, error) {
	if !b.opts.RuntimeCompile {
		if code, ok := b.precompiled(name); ok {
			return code, nil
		}
	}
	src, err := kernels.Source(name)
	if err != nil {
		return nil, fmt.Errorf("gpu: kernels %s: %w", name, err)
	}
	opts := b.options()
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00%s\x00%s", src, b.dev.Vendor, b.dev.Arch, b.dev.CompilerVersion(), strings.Join(opts, " "))
	key := hex.EncodeToString(h.Sum(nil))[:32]
	dir := b.opts.CacheDir
	if dir == "" {
		dir = defaultCacheDir()
	}
	var path string
	if dir != "-" && dir != "" {
		path = filepath.Join(dir, name+"-"+key+".co")
		if data, err := os.ReadFile(path); err == nil && len(data) > sha256.Size {
			sum := sha256.Sum256(data[sha256.Size:])
			if bytes.Equal(sum[:], data[:sha256.Size]) {
				return data[sha256.Size:], nil
			}
		}
	}
	start := time.Now()
	code, err := b.dev.Compile(src, name+".hip", opts)
	if err != nil {
		return nil, fmt.Errorf("gpu: %w", err)
	}
	b.log.Info("gpu: compiled kernels (cached for next time)", "module", name, "arch", b.dev.Arch, "seconds", time.Since(start).Round(time.Millisecond).Seconds())
	if path != "" {
		sum := sha256.Sum256(code)
		if err := writeCache(path, append(sum[:], code...)); err != nil {
			b.log.Info("gpu: kernel cache not written", "path", path, "why", err)
		}
	}
	return code, nil
}

// precompiled returns the module's artifact shipped in the binary for this
// device, if there is one built from the current source. PTX is loaded
// NUL-terminated; the driver compiles it for the device (and caches it).
func (b *Backend) precompiled(name string) ([]byte, bool) {
	var target string
	if b.dev.Vendor == hip.AMD {
		target = kernels.AMDTarget(b.dev.Arch)
	} else {
		t, ok := kernels.NVIDIATarget(name, b.dev.ComputeMajor, b.dev.ComputeMinor)
		if !ok {
			return nil, false
		}
		target = t
	}
	code, kind, ok, err := kernels.Precompiled(name, target)
	if err != nil {
		b.log.Info("gpu: precompiled kernels unusable, compiling at run time", "module", name, "why", err)
		return nil, false
	}
	if !ok {
		return nil, false
	}
	if kind == "ptx" {
		code = append(code, 0)
	}
	b.log.Debug("gpu: kernels precompiled", "module", name, "target", target, "kind", kind)
	return code, true
}

// fn looks up a kernel of a module.
func (b *Backend) fn(mod, name string) (*hip.Function, error) {
	b.fnMu.Lock()
	f := b.fns[name]
	b.fnMu.Unlock()
	if f != nil {
		return f, nil
	}
	m, err := b.module(mod)
	if err != nil {
		return nil, err
	}
	f, err = m.Function(name)
	if err != nil {
		return nil, fmt.Errorf("gpu: %w", err)
	}
	b.fnMu.Lock()
	b.fns[name] = f
	b.fnMu.Unlock()
	return f, nil
}

// launchLinear runs a kernel over n work items in blocks of bs threads, each
// thread covering per items.
func (b *Backend) launchLinear(mod, name string, n int64, bs, per int, a *hip.Args) error {
	if n <= 0 {
		return nil
	}
	threads := (n + int64(per) - 1) / int64(per)
	blocks := (threads + int64(bs) - 1) / int64(bs)
	if blocks > 1<<31-1 {
		return fmt.Errorf("gpu: %s: %d elements exceed one launch", name, n)
	}
	return b.launch(mod, name, hip.Dim3{uint32(blocks)}, hip.Dim3{uint32(bs)}, 0, a)
}

func (b *Backend) launch(mod, name string, grid, block hip.Dim3, shmem int, a *hip.Args) error {
	f, err := b.fn(mod, name)
	if err != nil {
		return err
	}
	if shmem > 48<<10 {
		// Above 48 KiB a kernel must opt in (NVIDIA), once.
		b.fnMu.Lock()
		done := b.bigShared[name] >= shmem
		b.fnMu.Unlock()
		if !done {
			if err := f.SetMaxDynamicShared(shmem); err != nil {
				return fmt.Errorf("gpu: %s: %w", name, err)
			}
			b.fnMu.Lock()
			b.bigShared[name] = shmem
			b.fnMu.Unlock()
		}
	}
	b.idle.queued()
	if err := f.Launch(grid, block, shmem, b.stream, a); err != nil {
		return fmt.Errorf("gpu: %w", err)
	}
	return nil
}

// writeCache writes a compiled module into the cache, whole or not at all.
func writeCache(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return atomicfile.WriteFile(path, data, 0o600)
}
