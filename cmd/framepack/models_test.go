package main

import (
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/framepack-go/framepack"
	"github.com/framepack-go/framepack/randmodel"
)

// hubCacheOf lays out the model folder src as FramePack's hf_download
// holds a download: hub/models--<org>--<name>/blobs with the files,
// snapshots/<rev>/… links to them and refs/main, each part in the
// repository FramePack fetches it from. It returns the hf_download folder.
func hubCacheOf(t *testing.T, src, rev string) string {
	t.Helper()
	hf := t.TempDir()
	for part, r := range framepack.HubRepos(framepack.ModelFramePack) {
		repo := filepath.Join(hf, "hub", "models--"+strings.ReplaceAll(r.Repo, "/", "--"))
		from := filepath.Join(src, part)
		err := filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			rel, _ := filepath.Rel(from, p)
			blob := filepath.Join(repo, "blobs", strings.ReplaceAll(part+"_"+rel, "/", "_"))
			link := filepath.Join(repo, "snapshots", rev, r.Subfolder, rel)
			for _, d := range []string{filepath.Dir(blob), filepath.Dir(link), filepath.Join(repo, "refs")} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					return err
				}
			}
			if err := os.Link(p, blob); err != nil {
				return err
			}
			target, _ := filepath.Rel(filepath.Dir(link), blob)
			if err := os.Symlink(target, link); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(repo, "refs", "main"), []byte(rev), 0o644)
		})
		if err != nil && !(part == framepack.PartFeatureExtractor && os.IsNotExist(err)) {
			t.Fatal(err)
		}
	}
	return hf
}

// TestGenerateFromHubCache runs generate with --models naming a hub cache
// that holds a tiny folder from make-models: the parts are found in the
// snapshots refs/main names, and without --resolution the run uses the
// resolution the folder says it was made for (128), not FramePack's 640.
func TestGenerateFromHubCache(t *testing.T) {
	tinyEnv(t)
	src := t.TempDir()
	if _, err := randmodel.Write(context.Background(), src, randmodel.Options{Size: randmodel.Tiny, Seed: 3}); err != nil {
		t.Fatal(err)
	}
	const rev = "5f1e0ed2c0ffee5f1e0ed2c0ffee5f1e0ed2c0ff"
	hf := hubCacheOf(t, src, rev)
	out := filepath.Join(t.TempDir(), "hub.mp4")
	stdout, err := runCLI(t, context.Background(), "generate", "--models", hf, "--image", sceneImage, "--seconds", "0.2", "--window", "3",
		"--steps", "1", "-o", out)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout, "13 frames (0.43 s at 30 fps), 128×96") {
		t.Errorf("not the 128 bucket:\n%s", stdout)
	}
	b, err := os.ReadFile(settingsPath(out))
	if err != nil {
		t.Fatal(err)
	}
	var set settings
	if err := json.Unmarshal(b, &set); err != nil {
		t.Fatal(err)
	}
	wantTr := filepath.Join(hf, "hub", "models--lllyasviel--FramePackI2V_HY", "snapshots", rev)
	wantVAE := filepath.Join(hf, "hub", "models--hunyuanvideo-community--HunyuanVideo", "snapshots", rev, "vae")
	if set.Resolution != 128 || set.Models[framepack.PartTransformer].Folder != wantTr || set.Models[framepack.PartVAE].Folder != wantVAE {
		t.Errorf("settings: resolution %d, transformer %s, vae %s", set.Resolution, set.Models[framepack.PartTransformer].Folder,
			set.Models[framepack.PartVAE].Folder)
	}
	// F1's transformer is not in this cache: the error says which
	// repository is missing, before anything loads.
	_, err = runCLI(t, context.Background(), "generate", "--models", hf, "--model", "f1", "--image", sceneImage, "-o", out+".f1.mp4")
	if err == nil || !strings.Contains(err.Error(), "lllyasviel/FramePack_F1_I2V_HY_20250503 is not downloaded") {
		t.Errorf("--model f1 without its weights: %v", err)
	}
}
