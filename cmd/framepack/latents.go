package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/framepack-go/framepack"
	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/weights"
)

// checkLatentsOutput checks --write-latents before any work: a
// .safetensors path in a folder that exists, that is no link, folder or
// device, and that is not the video or its settings file.
func checkLatentsOutput(path string, video videoOutput) error {
	if path == "" {
		return nil
	}
	path = filepath.Clean(path)
	if !strings.EqualFold(filepath.Ext(path), ".safetensors") {
		return fmt.Errorf("--write-latents %s: want a .safetensors file", path)
	}
	if st, err := os.Lstat(path); err == nil {
		if m := st.Mode(); !m.IsRegular() {
			return fmt.Errorf("--write-latents %s: not a regular file (%s); the file is written under a temporary name and renamed over the path", path, m.Type())
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("--write-latents %s: %v", path, err)
	}
	for _, p := range []string{video.path, settingsPath(video.path)} {
		if same(path, p) {
			return fmt.Errorf("--write-latents %s is the video's output or its settings file", path)
		}
	}
	dir := filepath.Dir(path)
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return fmt.Errorf("--write-latents %s: the folder %s does not exist", path, dir)
	}
	return nil
}

// same reports whether two paths name one file (or would).
func same(a, b string) bool {
	if filepath.Clean(a) == filepath.Clean(b) {
		return true
	}
	sa, err1 := os.Stat(a)
	sb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(sa, sb)
}

// sectionLatents are the latents FramePack's worker keeps after each
// section, named as bench/reference/framepack_worker.py --record names them
// (K is the 1-based section in generation order): generated_latents_section_K
// (what section K sampled; on FramePack's last section the start latent
// first), history_latents_section_K (real_history_latents after it: the
// newest generated frames, in time order), plus latents (all of them, start
// latent first) and start_latent. All f32 (1, 16, T, h, w).
func sectionLatents(res *framepack.Result, forward bool) (map[string]*tensor.Tensor, error) {
	all := res.Latents
	if all == nil || all.Rank() != 5 {
		return nil, errors.New("the result has no latents")
	}
	T := all.Dim(2)
	out := map[string]*tensor.Tensor{"latents": all, "start_latent": sliceT(all, 0, 1)}
	done := 0
	if forward {
		done = 1 // F1's history starts with the start latent
	}
	for k, st := range res.Sections {
		name := fmt.Sprint(k + 1)
		n := st.LatentFrames
		if done+n > T {
			return nil, fmt.Errorf("section %d's %d latent frames overrun the %d generated", k+1, n, T)
		}
		if forward {
			out["generated_latents_section_"+name] = sliceT(all, done, done+n)
			out["history_latents_section_"+name] = sliceT(all, 0, done+n)
		} else {
			// Backward: each section goes before the history so far.
			out["generated_latents_section_"+name] = sliceT(all, T-done-n, T-done)
			out["history_latents_section_"+name] = sliceT(all, T-done-n, T)
		}
		done += n
	}
	if done != T {
		return nil, fmt.Errorf("the sections' %d latent frames are not the %d generated", done, T)
	}
	return out, nil
}

// sliceT is frames [t0, t1) of a host (B, C, T, H, W) f32 tensor, a copy.
func sliceT(x *tensor.Tensor, t0, t1 int) *tensor.Tensor {
	b, c, t, h, w := x.Dim(0), x.Dim(1), x.Dim(2), x.Dim(3), x.Dim(4)
	src := tensor.Float32s(x)
	out := tensor.New(tensor.F32, b, c, t1-t0, h, w)
	dst := out.Float32s()
	hw := h * w
	for i := 0; i < b*c; i++ {
		copy(dst[i*(t1-t0)*hw:(i+1)*(t1-t0)*hw], src[(i*t+t0)*hw:(i*t+t1)*hw])
	}
	return out
}

// writeLatents writes --write-latents: sectionLatents in one safetensors
// file, written under a temporary name and renamed.
func writeLatents(path string, res *framepack.Result, model string) error {
	ts, err := sectionLatents(res, model == framepack.ModelF1)
	if err != nil {
		return fmt.Errorf("--write-latents %s: %w", path, err)
	}
	meta := map[string]string{"model": model, "sections": fmt.Sprint(len(res.Sections))}
	if err := weights.Save(path, ts, meta); err != nil {
		return fmt.Errorf("--write-latents: %w", err)
	}
	return nil
}
