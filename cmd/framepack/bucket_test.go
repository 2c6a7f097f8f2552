package main

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/framepack-go/framepack/section"
	"github.com/framepack-go/framepack/tinymodel"
)

// The bucket check of a run on the built-in tiny model uses the resolution
// that run will have (tinymodel.Resolution unless --resolution is given),
// not FramePack's 640, so its error names the bucket of this run.
func TestBucketCheckAtRunResolution(t *testing.T) {
	tinyEnv(t)
	dir := t.TempDir()
	thin := filepath.Join(dir, "thin.png")
	var b bytes.Buffer
	png.Encode(&b, image.NewGray(image.Rect(0, 0, 4000, 1)))
	os.WriteFile(thin, b.Bytes(), 0o644)
	for _, c := range []struct {
		args []string
		res  int
	}{
		{nil, tinymodel.Resolution},
		{[]string{"--resolution", "640"}, 640},
	} {
		bh, bw, err := section.NearestBucket(1, 4000, c.res)
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("the %d×%d bucket", bw, bh)
		args := append([]string{"generate", "--image", thin, "-o", filepath.Join(dir, "out.mp4")}, c.args...)
		_, err = runCLI(t, context.Background(), args...)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%v: %v, want an error naming %s (resolution %d)", c.args, err, want, c.res)
		}
	}
}
