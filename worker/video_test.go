package worker

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/framepack-go/framepack"
	"github.com/framepack-go/framepack/farm"
	"github.com/framepack-go/framepack/section"
	"github.com/framepack-go/framepack/video"
)

// A job's settings map onto the Request: the cache by name or by the
// older teacache switch, MagCache's knobs when given, the video's options.
func TestRequestSettings(t *testing.T) {
	def := framepack.DefaultRequest()
	k, ret := 2, 0.5
	for _, c := range []struct {
		name  string
		set   farm.Settings
		cache string
		k     int
		ret   float64
		ctx   int
	}{
		{"teacache switch on", farm.Settings{TeaCache: true}, framepack.CacheTeaCache, def.MagCacheK, def.MagCacheRetention, def.VideoContextFrames},
		{"teacache switch off", farm.Settings{}, framepack.CacheNone, def.MagCacheK, def.MagCacheRetention, def.VideoContextFrames},
		{"cache over the switch", farm.Settings{TeaCache: true, Cache: framepack.CacheMagCache}, framepack.CacheMagCache, def.MagCacheK, def.MagCacheRetention, def.VideoContextFrames},
		{"knobs", farm.Settings{Cache: framepack.CacheMagCache, MagCacheK: &k, MagCacheRetention: &ret, VideoContextFrames: 7, NewOnly: true},
			framepack.CacheMagCache, 2, 0.5, 7},
	} {
		r := Request(c.set, nil, nil)
		if r.CacheChoice() != c.cache || r.MagCacheK != c.k || r.MagCacheRetention != c.ret || r.VideoContextFrames != c.ctx || r.VideoNewOnly != c.set.NewOnly {
			t.Errorf("%s: cache %s, K %d, retention %v, context frames %d, new only %v", c.name, r.CacheChoice(), r.MagCacheK,
				r.MagCacheRetention, r.VideoContextFrames, r.VideoNewOnly)
		}
	}
}

// ReadVideo crops every frame to its bucket as it reads, keeps all of them
// or the last the extension reads, and names the video as it is told, not
// by its path.
func TestReadVideo(t *testing.T) {
	dir := t.TempDir()
	img, err := section.LoadImage(filepath.Join("..", "testdata", "images", "scene.png"))
	if err != nil {
		t.Fatal(err)
	}
	const n = section.VideoEncodeFrames + 12
	f := video.Frames{T: n, W: 200, H: 150}
	for i := range n {
		f.Pix = append(f.Pix, img.Crop(i/3, i/6, i/3+200, i/6+150).Pix...)
	}
	path := filepath.Join(dir, "in.mp4")
	if err := video.WriteMP4(context.Background(), path, f, video.Options{FPS: 30, CRF: 4}); err != nil {
		t.Fatal(err)
	}
	var checked [2]int
	check := func(w, h int) error { checked = [2]int{w, h}; return nil }
	all, err := ReadVideo(context.Background(), path, "the clip", 64, true, check)
	if err != nil {
		t.Fatal(err)
	}
	if all.Count != n || len(all.Frames) != n || all.Frames[0].W != 96 || all.Frames[0].H != 64 || all.Info.W != 200 || checked != [2]int{200, 150} {
		t.Fatalf("all frames: %d read, %d kept of %d×%d from %d×%d", all.Count, len(all.Frames), all.Frames[0].W, all.Frames[0].H, all.Info.W, all.Info.H)
	}
	last, err := ReadVideo(context.Background(), path, "the clip", 64, false, check)
	if err != nil {
		t.Fatal(err)
	}
	if last.Count != n || len(last.Frames) != section.VideoEncodeFrames || last.Last != last.Frames[len(last.Frames)-1] ||
		!bytes.Equal(last.Frames[0].Pix, all.Frames[12].Pix) || !bytes.Equal(last.Last.Pix, all.Frames[n-1].Pix) {
		t.Errorf("the last frames: %d read, %d kept", last.Count, len(last.Frames))
	}
	// The size is checked before any frame is decoded.
	refuse := errors.New("request: too thin")
	if _, err := ReadVideo(context.Background(), path, "the clip", 64, true, func(int, int) error { return refuse }); err != refuse {
		t.Errorf("a refused size: %v", err)
	}
	text := filepath.Join(dir, "notes.mp4")
	os.WriteFile(text, []byte("not a video"), 0o644)
	_, err = ReadVideo(context.Background(), text, "the clip", 64, true, check)
	if !errors.Is(err, ErrNotVideo) || !strings.HasPrefix(err.Error(), "the clip: not a video ffmpeg can read") || strings.Contains(err.Error(), dir) {
		t.Errorf("a text file: %v", err)
	}
}
