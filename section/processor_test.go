package section

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// flux_redux_bfl's feature_extractor/preprocessor_config.json asks for what
// SigLIPPixels does, at 384.
func TestReleasedConfigFeatureExtractor(t *testing.T) {
	size, err := ReadSigLIPProcessor(filepath.Join("..", "testdata", "released", "feature_extractor"))
	if err != nil {
		t.Fatal(err)
	}
	if size != SigLIPSize {
		t.Errorf("size %d, want %d", size, SigLIPSize)
	}
	t.Logf("released config feature_extractor: ok (SiglipImageProcessor, bicubic %d×%d, mean/std 0.5)", size, size)
}

func TestBadSigLIPProcessor(t *testing.T) {
	for _, c := range []struct{ text, want string }{
		{`{"resample": 2, "size": {"height": 384, "width": 384}}`, "resample 2"},
		{`{"size": {"height": 384, "width": 378}}`, "square"},
		{`{"image_mean": [0.48, 0.45, 0.4]}`, "image_mean"},
		{`{"do_normalize": false}`, "do_normalize"},
		{`{"size": `, "preprocessor_config.json"},
		{`null`, "holds null, not a JSON object"},
		{`[]`, "holds an array, not a JSON object"},
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "preprocessor_config.json"), []byte(c.text), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := ReadSigLIPProcessor(dir)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "preprocessor_config.json") {
			t.Errorf("%s: error %v, want one naming the file and %q", c.text, err, c.want)
		}
	}
	if _, err := ReadSigLIPProcessor(t.TempDir()); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("missing file: %v", err)
	}
}
