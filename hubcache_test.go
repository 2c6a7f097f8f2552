package framepack

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/framepack-go/framepack/tinymodel"
)

// fakeHub lays out the tiny model's files as huggingface_hub caches a
// download: hub/models--<org>--<name>/blobs/<hash> holding the contents,
// snapshots/<rev>/<subfolder>/<file> relative links to the blobs, and
// refs/main naming the revision. parts maps a tiny model part to the
// repository and sub-folder it goes in.
type fakeHub struct {
	t    *testing.T
	root string // the hub folder
}

func (h fakeHub) repoDir(repo string) string {
	return filepath.Join(h.root, "models--"+strings.ReplaceAll(repo, "/", "--"))
}

// put links file (slash path in the snapshot) to a blob holding data.
func (h fakeHub) put(repo, rev, file string, data []byte) {
	t := h.t
	t.Helper()
	sum := sha256.Sum256(data)
	blob := filepath.Join(h.repoDir(repo), "blobs", hex.EncodeToString(sum[:]))
	if err := os.MkdirAll(filepath.Dir(blob), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(blob, data, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(h.repoDir(repo), "snapshots", rev, filepath.FromSlash(file))
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(filepath.Dir(link), blob)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(rel, link); err != nil {
		t.Fatal(err)
	}
}

// putPart puts the tiny model's part folder into repo's snapshot rev under
// sub ("" for the top).
func (h fakeHub) putPart(repo, rev, sub, part string) {
	t := h.t
	t.Helper()
	err := fs.WalkDir(tinymodel.FS(), part, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(tinymodel.FS(), p)
		if err != nil {
			return err
		}
		h.put(repo, rev, strings.TrimPrefix(sub+"/"+strings.TrimPrefix(p, part+"/"), "/"), data)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func (h fakeHub) setMain(repo, rev string) {
	h.t.Helper()
	refs := filepath.Join(h.repoDir(repo), "refs")
	if err := os.MkdirAll(refs, 0o755); err != nil {
		h.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(refs, "main"), []byte(rev), 0o644); err != nil {
		h.t.Fatal(err)
	}
}

const (
	hy, redux = "hunyuanvideo-community/HunyuanVideo", "lllyasviel/flux_redux_bfl"
	hubRev    = "0123456789abcdef0123456789abcdef01234567"
	hubOldRev = "fedcba9876543210fedcba9876543210fedcba98"
)

// makeHub is FramePack's hf_download with every part, as fakeHub lays
// it out, and an older broken snapshot of the VAE beside the one refs/main
// names.
func makeHub(t *testing.T) (hfDownload string, h fakeHub) {
	hfDownload = t.TempDir()
	h = fakeHub{t, filepath.Join(hfDownload, "hub")}
	for _, part := range []string{PartVAE, PartTextEncoder, PartTextEncoder2, PartTokenizer, PartTokenizer2} {
		h.putPart(hy, hubRev, part, part)
	}
	h.setMain(hy, hubRev)
	// An older snapshot of the VAE whose config does not load: refs/main
	// must win over it.
	h.put(hy, hubOldRev, "vae/config.json", []byte("{not json"))
	h.putPart(redux, hubRev, "image_encoder", PartImageEncoder)
	h.put(redux, hubRev, "feature_extractor/preprocessor_config.json",
		[]byte(`{"image_processor_type": "SiglipImageProcessor", "size": {"height": 32, "width": 32}}`))
	h.setMain(redux, hubRev)
	// FramePack's transformer with refs/main; F1's without (its only
	// snapshot is taken).
	h.putPart("lllyasviel/FramePackI2V_HY", hubRev, "", PartTransformer)
	h.setMain("lllyasviel/FramePackI2V_HY", hubRev)
	h.putPart("lllyasviel/FramePack_F1_I2V_HY_20250503", hubOldRev, "", PartTransformer)
	return hfDownload, h
}

// TestModelsFromHubCache loads the model from a Hugging Face hub cache laid
// out as FramePack's hf_download is (blobs, links in snapshots, refs/main),
// with an older broken snapshot beside the one refs/main names, and
// generates from it.
func TestModelsFromHubCache(t *testing.T) {
	hfDownload, h := makeHub(t)
	snap := func(repo, rev, sub string) string {
		return filepath.Join(h.repoDir(repo), "snapshots", rev, filepath.FromSlash(sub))
	}
	want := map[string]string{
		PartTransformer:      snap("lllyasviel/FramePackI2V_HY", hubRev, ""),
		PartVAE:              snap(hy, hubRev, "vae"),
		PartTextEncoder:      snap(hy, hubRev, "text_encoder"),
		PartTextEncoder2:     snap(hy, hubRev, "text_encoder_2"),
		PartTokenizer:        snap(hy, hubRev, "tokenizer"),
		PartTokenizer2:       snap(hy, hubRev, "tokenizer_2"),
		PartImageEncoder:     snap(redux, hubRev, "image_encoder"),
		PartFeatureExtractor: snap(redux, hubRev, "feature_extractor"),
	}
	// Both forms of the folder: hf_download (holding hub/) and the hub
	// folder itself (~/.cache/huggingface/hub).
	for _, dir := range []string{hfDownload, h.root} {
		if !IsHubCache(dir) {
			t.Errorf("IsHubCache(%s) = false", dir)
		}
		got, err := HubCacheParts(dir, ModelFramePack)
		if err != nil {
			t.Fatal(err)
		}
		for part, w := range want {
			if got[part] != w {
				t.Errorf("HubCacheParts(%s)[%s] = %s, want %s", dir, part, got[part], w)
			}
		}
		if len(got) != len(want) {
			t.Errorf("HubCacheParts(%s) has %d parts, want %d", dir, len(got), len(want))
		}
	}
	f1, err := HubCacheParts(hfDownload, ModelF1)
	if err != nil {
		t.Fatal(err)
	}
	if w := snap("lllyasviel/FramePack_F1_I2V_HY_20250503", hubOldRev, ""); f1[PartTransformer] != w {
		t.Errorf("F1's transformer: %s, want %s", f1[PartTransformer], w)
	}
	if IsHubCache(tinyDir(t)) {
		t.Error("the tiny model folder is taken for a hub cache")
	}

	p, err := Load(hfDownload, Options{Device: DeviceCPU, Logger: quietLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for part, w := range want {
		if p.paths[part] != w {
			t.Errorf("Load read the %s from %s, want %s", part, p.paths[part], w)
		}
	}
	req := smallRequest(testImage(t))
	req.Seconds, req.Steps = 0.1, 1
	res, err := p.Generate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if res.T == 0 {
		t.Error("no frames")
	}

	// What a user sees for a cache that lacks something.
	bad := []struct {
		name, want string
		edit       func(t *testing.T, root string)
	}{
		{"no transformer", "lllyasviel/FramePackI2V_HY is not downloaded", func(t *testing.T, root string) {
			os.RemoveAll(filepath.Join(root, "models--lllyasviel--FramePackI2V_HY"))
		}},
		{"no refs/main, two snapshots", "has 2 snapshots (" + hubRev + ", " + hubOldRev + ") and no refs/main", func(t *testing.T, root string) {
			os.Remove(filepath.Join(root, "models--hunyuanvideo-community--HunyuanVideo", "refs", "main"))
		}},
		{"refs/main without its snapshot", "names the revision 1111", func(t *testing.T, root string) {
			os.WriteFile(filepath.Join(root, "models--lllyasviel--flux_redux_bfl", "refs", "main"), []byte("1111"), 0o644)
		}},
		{"subfolder missing", "has no text_encoder_2/ in the snapshot", func(t *testing.T, root string) {
			os.RemoveAll(filepath.Join(root, "models--hunyuanvideo-community--HunyuanVideo", "snapshots", hubRev, "text_encoder_2"))
		}},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			_, h := makeHub(t)
			root := h.root
			c.edit(t, root)
			_, err := Load(root, Options{Device: DeviceCPU, Logger: quietLogger(t)})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Load: %v, want an error with %q", err, c.want)
			}
		})
	}
}
