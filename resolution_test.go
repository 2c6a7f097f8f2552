package framepack

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/framepack-go/framepack/tinymodel"
)

// TestModelResolution: the tiny model says the resolution it was made for,
// the pipeline's DefaultRequest takes it, and a request far beyond it is
// warned about; a folder that says nothing was made for FramePack's 640.
func TestModelResolution(t *testing.T) {
	p, logs := loadTinyLogged(t, Options{})
	if p.Resolution() != tinymodel.Resolution || p.DefaultRequest().Resolution != tinymodel.Resolution {
		t.Errorf("Resolution %d, DefaultRequest's %d; want the tiny model's %d", p.Resolution(), p.DefaultRequest().Resolution, tinymodel.Resolution)
	}
	req := p.DefaultRequest()
	p.checkResolution(req)
	req.Resolution = 2 * tinymodel.Resolution
	p.checkResolution(req)
	if strings.Contains(logs.String(), "this model was made for") {
		t.Errorf("a warning within twice the model's resolution:\n%s", logs)
	}
	req.Resolution = DefaultResolution
	p.checkResolution(req)
	if !strings.Contains(logs.String(), "resolution 640 is 5.0× the 128 this model was made for") {
		t.Errorf("no warning for 640 on a model made for 128:\n%s", logs)
	}

	dir := t.TempDir()
	for _, c := range []struct {
		config string
		want   int
		err    string
	}{
		{`{"num_layers": 2}`, DefaultResolution, ""},
		{`{"framepack_resolution": 256}`, 256, ""},
		{`{"framepack_resolution": 7}`, 0, "framepack_resolution 7 is not a bucket resolution (64–1280)"},
	} {
		if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(c.config), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := TransformerResolution(dir)
		if got != c.want || (err == nil) != (c.err == "") || err != nil && !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s: %d, %v; want %d, %q", c.config, got, err, c.want, c.err)
		}
	}
}
