package framepack

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// HubRepo is where a part of the model comes from on the Hugging Face hub:
// the repository and its sub-folder ("" for the repository's top).
type HubRepo struct{ Repo, Subfolder string }

// HubRepos are the repositories FramePack downloads each part from
// (demo_gradio.py), for model (ModelFramePack or ModelF1: the transformer's
// weights differ).
func HubRepos(model string) map[string]HubRepo {
	const hy, redux = "hunyuanvideo-community/HunyuanVideo", "lllyasviel/flux_redux_bfl"
	tr := "lllyasviel/FramePackI2V_HY"
	if model == ModelF1 {
		tr = "lllyasviel/FramePack_F1_I2V_HY_20250503"
	}
	return map[string]HubRepo{
		PartTransformer:      {tr, ""},
		PartVAE:              {hy, "vae"},
		PartTextEncoder:      {hy, "text_encoder"},
		PartTextEncoder2:     {hy, "text_encoder_2"},
		PartTokenizer:        {hy, "tokenizer"},
		PartTokenizer2:       {hy, "tokenizer_2"},
		PartImageEncoder:     {redux, "image_encoder"},
		PartFeatureExtractor: {redux, "feature_extractor"},
	}
}

// hubRoot is the hub cache folder in dir: dir itself when it holds
// models--<org>--<name> folders (~/.cache/huggingface/hub), or dir/hub
// (FramePack's hf_download, $HF_HOME); "" when dir is neither.
func hubRoot(dir string) string {
	for _, d := range []string{dir, filepath.Join(dir, "hub")} {
		if m, _ := filepath.Glob(filepath.Join(d, "models--*--*")); len(m) > 0 {
			return d
		}
	}
	return ""
}

// IsHubCache reports whether dir is a Hugging Face hub cache (or holds
// one in hub/) rather than a model folder with the parts' sub-folders.
func IsHubCache(dir string) bool {
	if st, err := os.Stat(filepath.Join(dir, PartTransformer)); err == nil && st.IsDir() {
		return false
	}
	return hubRoot(dir) != ""
}

// HubCacheParts finds each part's folder in the Hugging Face hub cache dir
// (see IsHubCache), where FramePack's downloads are
// hub/models--<org>--<name>/snapshots/<revision>/<subfolder>, for model
// (ModelFramePack or ModelF1). Each repository's snapshot is the one the
// hub uses: the revision refs/main names (the only snapshot when there is
// no refs/main). The feature extractor is left out when its snapshot lacks
// it (it is optional); every other part must be there.
func HubCacheParts(dir, model string) (map[string]string, error) {
	return hubCacheParts(dir, model, nil)
}

// hubCacheParts is HubCacheParts without the parts in skip.
func hubCacheParts(dir, model string, skip map[string]bool) (map[string]string, error) {
	root := hubRoot(dir)
	if root == "" {
		return nil, fmt.Errorf("%s is not a Hugging Face hub cache (no models--<org>--<name> folders in it or in its hub/)", dir)
	}
	snaps := map[string]string{}
	parts := map[string]string{}
	repos := HubRepos(model)
	names := make([]string, 0, len(repos))
	for part := range repos {
		if !skip[part] {
			names = append(names, part)
		}
	}
	sort.Strings(names)
	for _, part := range names {
		r := repos[part]
		snap, ok := snaps[r.Repo]
		if !ok {
			var err error
			if snap, err = hubSnapshot(root, r.Repo); err != nil {
				return nil, err
			}
			snaps[r.Repo] = snap
		}
		folder := filepath.Join(snap, filepath.FromSlash(r.Subfolder))
		if st, err := os.Stat(folder); err != nil || !st.IsDir() {
			if part == PartFeatureExtractor {
				continue
			}
			return nil, fmt.Errorf("hub cache %s: %s has no %s/ in the snapshot %s (download it as FramePack does: its first run fetches every part)",
				root, r.Repo, r.Subfolder, filepath.Base(snap))
		}
		parts[part] = folder
	}
	return parts, nil
}

// hubSnapshot is repo's snapshot folder in the hub cache root, chosen as
// huggingface_hub does for revision "main".
func hubSnapshot(root, repo string) (string, error) {
	repoDir := filepath.Join(root, "models--"+strings.ReplaceAll(repo, "/", "--"))
	snapDir := filepath.Join(repoDir, "snapshots")
	entries, err := os.ReadDir(snapDir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("hub cache %s: %s is not downloaded (no %s)", root, repo, snapDir)
		}
		return "", fmt.Errorf("hub cache %s: %w", root, err)
	}
	if b, err := os.ReadFile(filepath.Join(repoDir, "refs", "main")); err == nil {
		rev := strings.TrimSpace(string(b))
		snap := filepath.Join(snapDir, rev)
		if rev == "" || rev != path.Base(rev) {
			return "", fmt.Errorf("hub cache %s: %s's refs/main holds %q, not a revision", root, repo, rev)
		}
		if st, err := os.Stat(snap); err != nil || !st.IsDir() {
			return "", fmt.Errorf("hub cache %s: %s's refs/main names the revision %s, which has no snapshot folder", root, repo, rev)
		}
		return snap, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("hub cache %s: %w", root, err)
	}
	var revs []string
	for _, e := range entries {
		if e.IsDir() {
			revs = append(revs, e.Name())
		}
	}
	switch len(revs) {
	case 0:
		return "", fmt.Errorf("hub cache %s: %s has no snapshot in %s", root, repo, snapDir)
	case 1:
		return filepath.Join(snapDir, revs[0]), nil
	}
	return "", fmt.Errorf("hub cache %s: %s has %d snapshots (%s) and no refs/main to choose one: pass the part's folder (--transformer, --vae, …)",
		root, repo, len(revs), strings.Join(revs, ", "))
}
