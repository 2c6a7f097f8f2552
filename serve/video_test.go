package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"image"
	"image/png"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/framepack-go/framepack"
	"github.com/framepack-go/framepack/farm"
	"github.com/framepack-go/framepack/section"
	"github.com/framepack-go/framepack/video"
	"github.com/framepack-go/framepack/worker"
)

// sceneFrames is n frames of 200×150 panning across the test image: a
// video of another size than its bucket's.
func sceneFrames(t *testing.T, n int) []*section.RGB {
	t.Helper()
	img, err := section.DecodeImage(bytes.NewReader(scenePNG(t)))
	if err != nil {
		t.Fatal(err)
	}
	out := make([]*section.RGB, n)
	for i := range out {
		out[i] = img.Crop(i, i/2, i+200, i/2+150)
	}
	return out
}

// stripPNG is the middle strip of the test image (256×85) as a PNG: at
// resolution 64 a 96×32 bucket, half the pixels of the whole image's to
// decode, for the jobs whose checks do not depend on the picture.
func stripPNG(t *testing.T) []byte {
	t.Helper()
	img, err := section.DecodeImage(bytes.NewReader(scenePNG(t)))
	if err != nil {
		t.Fatal(err)
	}
	c := img.Crop(0, 53, img.W, 138)
	var b bytes.Buffer
	if err := png.Encode(&b, (video.Frames{T: 1, H: c.H, W: c.W, Pix: c.Pix}).Frame(0)); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// sceneMP4 is sceneFrames(n) as an H.264 MP4 (near-lossless).
func sceneMP4(t *testing.T, n int) []byte {
	t.Helper()
	frames := sceneFrames(t, n)
	f := video.Frames{T: n, W: 200, H: 150}
	for _, fr := range frames {
		f.Pix = append(f.Pix, fr.Pix...)
	}
	path := filepath.Join(t.TempDir(), "in.mp4")
	if err := video.WriteMP4(context.Background(), path, f, video.Options{FPS: 30, CRF: 4}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// submitVideo posts a job extending mp4.
func (e *env) submitVideo(settings string, mp4 []byte) (int, jobJSON, []byte) {
	e.t.Helper()
	body, ct := multipartBody(e.t, settings, map[string][]byte{"video": mp4}, map[string]string{"video": "clip.mp4"})
	code, b := e.do("POST", "/api/jobs", body, map[string]string{"Content-Type": ct})
	var j jobJSON
	json.Unmarshal(b, &j)
	return code, j, b
}

// settingsFile reads a done job's settings file.
func (e *env) settingsFile(id string) (farm.Settings, map[string]json.RawMessage) {
	e.t.Helper()
	code, b := e.do("GET", "/api/jobs/"+id+"/settings", nil, nil)
	var file map[string]json.RawMessage
	var set farm.Settings
	if code != http.StatusOK || json.Unmarshal(b, &file) != nil || json.Unmarshal(file["settings"], &set) != nil {
		e.t.Fatalf("GET settings of %s: %d %s", id, code, b)
	}
	return set, file
}

// A job with cache magcache runs with its knobs, and its settings file says
// so; the older teacache switch still picks the cache, and the caches make
// different videos.
func TestMagCacheJob(t *testing.T) {
	t.Parallel() // its own server and queue
	e := newEnv(t, envOptions{})
	const base = `"prompt":"a kite","seconds":0.4,"steps":8,"seed":3`
	code, mag, b := e.submit(`{`+base+`,"cache":"magcache","cache_threshold":0.3,"magcache_k":4,"magcache_retention":0.25}`, nil)
	if code != http.StatusCreated {
		t.Fatalf("%d %s", code, b)
	}
	_, none, _ := e.submit(`{`+base+`,"teacache":false}`, nil)
	m := e.wait(mag.ID, 3*time.Minute, finished)
	n := e.wait(none.ID, 3*time.Minute, finished)
	if m.Status != farm.Done || n.Status != farm.Done {
		t.Fatalf("jobs ended %s (%s) and %s (%s)", m.Status, m.Error, n.Status, n.Error)
	}
	set, _ := e.settingsFile(m.ID)
	if set.Cache != framepack.CacheMagCache || set.TeaCache || set.CacheThreshold != 0.3 || set.MagCacheK == nil || *set.MagCacheK != 4 ||
		set.MagCacheRetention == nil || *set.MagCacheRetention != 0.25 {
		t.Errorf("the magcache job's settings file: %+v", set)
	}
	if set, _ := e.settingsFile(n.ID); set.Cache != framepack.CacheNone || set.TeaCache || set.MagCacheK != nil {
		t.Errorf("teacache false: the settings file says cache %q, teacache %v, magcache_k %v", set.Cache, set.TeaCache, set.MagCacheK)
	}
	if m.Result.FramesSHA256 == n.Result.FramesSHA256 {
		t.Error("MagCache skipped no step: the video is the uncached one")
	}
	// The defaults name the cache and carry MagCache's knobs for the form.
	_, ob := e.do("GET", "/api/options", nil, nil)
	var opts struct {
		Defaults   farm.Settings
		Caches     []string
		VideoInput bool `json:"video_input"`
	}
	json.Unmarshal(ob, &opts)
	if opts.Defaults.Cache != framepack.CacheTeaCache || opts.Defaults.MagCacheK == nil || *opts.Defaults.MagCacheK != 3 ||
		len(opts.Caches) != 3 || !opts.VideoInput {
		t.Errorf("options: %s", ob)
	}
	// The knobs a job sent did not change the defaults.
	if set, _ := e.settingsFile(n.ID); set.MagCacheK != nil {
		t.Errorf("a job's knobs leaked: %+v", set)
	}
	if _, j, b := e.submit(`{`+base+`,"cache":"magcache"}`, nil); j.Settings.MagCacheK == nil || *j.Settings.MagCacheK != 3 {
		t.Errorf("a magcache job after one with K 4 has K %v: %s", j.Settings.MagCacheK, b)
	}
}

// A job extending a video: the upload is read and stored, the queue shows
// its last frame, and the video made is the input, cropped to its bucket,
// followed by the new sections' frames (only those with new_only).
func TestVideoJob(t *testing.T) {
	t.Parallel() // its own server and queue
	mp4 := sceneMP4(t, 20)
	// Before a worker runs: the upload, its description, its thumbnail.
	q := newEnv(t, envOptions{noWorker: true})
	code, j, b := q.submitVideo(`{"prompt":"a kite","seconds":0.8,"window":3,"steps":2,"video_context_frames":2}`, mp4)
	if code != http.StatusCreated {
		t.Fatalf("%d %s", code, b)
	}
	var v struct{ Video *farm.File }
	json.Unmarshal(b, &v)
	if f := v.Video; f == nil || f.Frames != 20 || f.Width != 200 || f.Height != 150 || f.Type != "video/mp4" || f.Name != "clip.mp4" || f.Codec != "h264" {
		t.Fatalf("the job's video: %s", b)
	}
	if j.Image != nil || j.Links["image"] != "" || j.Links["input_video"] == "" {
		t.Errorf("a video job's image and links: %+v", j)
	}
	if code, got := q.do("GET", j.Links["input_video"], nil, nil); code != http.StatusOK || !bytes.Equal(got, mp4) {
		t.Errorf("GET input-video: %d, %d bytes of %d", code, len(got), len(mp4))
	}
	if code, b := q.do("GET", "/api/jobs/"+j.ID+"/image", nil, nil); code != http.StatusNotFound {
		t.Errorf("GET image of a video job: %d %s", code, b)
	}
	code, thumb := q.do("GET", j.Links["thumbnail"], nil, nil)
	frames := sceneFrames(t, 20)
	last, _ := section.ResizeAndCenterCrop(frames[19], 96, 64)
	first, _ := section.ResizeAndCenterCrop(frames[0], 96, 64)
	img, err := png.Decode(bytes.NewReader(thumb))
	if code != http.StatusOK || err != nil || img.Bounds().Dx() != 96 || img.Bounds().Dy() != 64 {
		t.Fatalf("the queued video job's thumbnail: %d %v", code, err)
	}
	if dl, df := meanDiff(img, last), meanDiff(img, first); dl > 3 || df < 2*dl {
		t.Errorf("the thumbnail is not the video's last frame: %.2f from it, %.2f from the first", dl, df)
	}

	e := newEnv(t, envOptions{})
	const set = `"prompt":"a kite","seconds":0.4,"window":3,"steps":2,"video_context_frames":2`
	_, whole, _ := e.submitVideo(`{`+set+`}`, mp4)
	_, fresh, _ := e.submitVideo(`{`+set+`,"new_only":true}`, mp4)
	w := e.wait(whole.ID, 3*time.Minute, finished)
	n := e.wait(fresh.ID, 3*time.Minute, finished)
	if w.Status != farm.Done || n.Status != farm.Done {
		t.Fatalf("jobs ended %s (%s) and %s (%s)", w.Status, w.Error, n.Status, n.Error)
	}
	// A section of 3 latent frames: 9 new frames.
	if r := w.Result; r.Frames != 20+9 || r.InputFrames != 20 || r.Width != 96 || r.Height != 64 {
		t.Errorf("the video extended: %+v, want 29 frames (20 input) of 96×64", r)
	}
	if r := n.Result; r.Frames != 9 || r.InputFrames != 0 {
		t.Errorf("the new frames only: %+v, want 9 frames", r)
	}
	if code, got := e.do("GET", w.Links["video"], nil, nil); code != http.StatusOK {
		t.Errorf("GET video: %d", code)
	} else if d := probeDuration(t, got); d < 0.93 || d > 1.0 {
		t.Errorf("the video lasts %.3f s, want 29 frames at 30 fps", d)
	}
	s, file := e.settingsFile(w.ID)
	var in farm.File
	json.Unmarshal(file["video"], &in)
	if s.VideoContextFrames != 2 || s.NewOnly || in.Frames != 20 || in.SHA256 == "" {
		t.Errorf("the settings file: %+v, video %s", s, file["video"])
	}
	if s, _ := e.settingsFile(n.ID); !s.NewOnly {
		t.Errorf("the new-only job's settings file: %+v", s)
	}
}

// meanDiff is the mean absolute difference of img's RGB from want's.
func meanDiff(img image.Image, want *section.RGB) float64 {
	got := section.FromImage(img)
	if got.W != want.W || got.H != want.H {
		return 255
	}
	var sum float64
	for i := range got.Pix {
		d := float64(got.Pix[i]) - float64(want.Pix[i])
		if d < 0 {
			d = -d
		}
		sum += d
	}
	return sum / float64(len(got.Pix))
}

// A worker that dies in the middle of a video job (its connection gone,
// nothing acknowledged or queued again) loses it to another worker after
// the ack wait, which goes on from the job's last checkpoint: the video
// is the same, bit for bit, as an uninterrupted run's.
func TestVideoJobResumesAfterCrash(t *testing.T) {
	t.Parallel() // its own server and queue
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("the NATS server did not start")
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	open := func() *farm.Farm {
		f, err := farm.Open(ctx, farm.Config{URL: ns.ClientURL(), AckWait: 2 * time.Second, Log: testLog()})
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	api := open()
	defer api.Close()
	def := farm.Settings{Seed: 31337, Seconds: 1, Steps: 2, Window: 3, CFG: 1, GS: 10, TeaCache: true, Resolution: 64,
		Model: framepack.ModelFramePack, PromptBlend: 4, StartEmbedStrength: 1, CRF: 16}
	srv, err := New(Config{Farm: api, LoopbackOnly: true, Defaults: def, TinyModel: true, Log: testLog()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ts := httptest.NewServer(srv)
	defer ts.Close()
	e := &env{t: t, url: ts.URL, farm: api, srv: srv}
	// start runs a worker on its own connection until stop.
	start := func(name string) (f *farm.Farm, stop func()) {
		f = open()
		wctx, wcancel := context.WithCancel(ctx)
		w := worker.New(f, worker.Config{Name: name, Models: tinyDir(t), Options: framepack.Options{Device: framepack.DeviceCPU},
			TempDir: t.TempDir(), Log: testLog()})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer w.Close()
			w.Run(wctx)
		}()
		return f, func() { wcancel(); wg.Wait() }
	}

	mp4 := sceneMP4(t, 20)
	// 3 sections of 1 latent frame.
	const set = `{"prompt":"a kite","seconds":0.4,"window":1,"steps":2,"video_context_frames":2,"seed":9}`
	fa, stopA := start("a")
	_, j, b := e.submitVideo(set, mp4)
	if j.ID == "" {
		t.Fatal(string(b))
	}
	mid := e.wait(j.ID, 3*time.Minute, func(j jobJSON) bool { return j.Section >= 1 || finished(j) })
	if mid.Section >= mid.Sections || mid.Status != farm.Running {
		t.Fatalf("the job ended before its worker could die: %+v", mid)
	}
	// The worker's machine goes away: its connection first, so nothing it
	// does after reaches the queue.
	fa.Close()
	stopA()
	fb, stopB := start("b")
	defer fb.Close()
	defer stopB()
	got := e.wait(j.ID, 3*time.Minute, finished)
	if got.Status != farm.Done || got.ResumedAt < mid.Section || got.Attempts != 2 {
		t.Fatalf("after the worker died: %s (%s), resumed after section %d (it died after %d), %d attempts",
			got.Status, got.Error, got.ResumedAt, mid.Section, got.Attempts)
	}
	if r := got.Result; r.Frames != 20+9 || r.InputFrames != 20 {
		t.Errorf("the resumed job made %d frames (%d input), want 29 (20)", r.Frames, r.InputFrames)
	}
	// The same job, uninterrupted.
	_, again, _ := e.submitVideo(set, mp4)
	whole := e.wait(again.ID, 3*time.Minute, finished)
	if whole.Status != farm.Done || whole.Result.FramesSHA256 != got.Result.FramesSHA256 {
		t.Fatalf("the resumed job's video differs from the uninterrupted run's:\n%+v\n%+v", got.Result, whole.Result)
	}
	t.Logf("a video job resumed after section %d of %d on another worker; its video is bit-identical", got.ResumedAt, got.Sections)
}
