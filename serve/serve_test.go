package serve

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"math/rand/v2"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/framepack-go/framepack"
	"github.com/framepack-go/framepack/farm"
	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/tinymodel"
	"github.com/framepack-go/framepack/weights"
	"github.com/framepack-go/framepack/worker"
)

var tiny struct {
	once sync.Once
	dir  string
	err  error
}

// tinyDir extracts the built-in tiny model once for the package's tests.
func tinyDir(t *testing.T) string {
	tiny.once.Do(func() {
		if tiny.dir, tiny.err = os.MkdirTemp("", "framepack-serve-tiny-"); tiny.err == nil {
			tiny.err = tinymodel.Extract(tiny.dir)
		}
	})
	if tiny.err != nil {
		t.Fatal(tiny.err)
	}
	return tiny.dir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if tiny.dir != "" {
		os.RemoveAll(tiny.dir)
	}
	os.Exit(code)
}

func testLog() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// env is a server on an embedded NATS in a temporary folder, with a
// worker on the tiny model on the CPU unless none is asked.
type env struct {
	t     *testing.T
	url   string
	token string
	farm  *farm.Farm
	srv   *Server
}

type envOptions struct {
	noWorker   bool
	token      string
	maxQueued  int
	maxUpload  int64
	maxStorage int64
	loras      string
}

func newEnv(t *testing.T, o envOptions) *env {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	data := t.TempDir()
	fm, err := farm.Open(ctx, farm.Config{DataDir: data, MaxStoredBytes: o.maxStorage, Log: testLog()})
	if err != nil {
		t.Fatal(err)
	}
	def := farm.Settings{Seed: 31337, Seconds: 1, Steps: 2, Window: 3, CFG: 1, GS: 10, TeaCache: true, Resolution: 64,
		Model: framepack.ModelFramePack, PromptBlend: 4, StartEmbedStrength: 1, CRF: 16}
	srv, err := New(Config{Farm: fm, Token: o.token, LoopbackOnly: o.token == "", Defaults: def, TinyModel: true, Model: "tiny",
		Device: "cpu", MaxQueued: o.maxQueued, MaxUpload: o.maxUpload, LoRADir: o.loras, Workers: 1, Log: testLog()})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	var wg sync.WaitGroup
	if !o.noWorker {
		w := worker.New(fm, worker.Config{Name: "test", Models: tinyDir(t), Options: framepack.Options{Device: framepack.DeviceCPU},
			LoRADir: o.loras, TempDir: t.TempDir(), Fit: true, Announce: true, Log: testLog()})
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer w.Close()
			if err := w.Run(ctx); err != nil {
				t.Error(err)
			}
		}()
	}
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		ts.CloseClientConnections()
		ts.Close()
		srv.Close()
		fm.Close()
	})
	return &env{t: t, url: ts.URL, token: o.token, farm: fm, srv: srv}
}

func scenePNG(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "testdata", "images", "scene.png"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// multipartBody is a submission: settings JSON, and image parts by name.
func multipartBody(t *testing.T, settings string, files map[string][]byte, names map[string]string) (io.Reader, string) {
	t.Helper()
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	if settings != "" {
		mw.WriteField("settings", settings)
	}
	for part, data := range files {
		name := part + ".png"
		if n, ok := names[part]; ok {
			name = n
		}
		fw, _ := mw.CreateFormFile(part, name)
		fw.Write(data)
	}
	mw.Close()
	return &b, mw.FormDataContentType()
}

// do sends a request with the env's token and returns the status and
// the body.
func (e *env) do(method, path string, body io.Reader, header map[string]string) (int, []byte) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.url+path, body)
	if err != nil {
		e.t.Fatal(err)
	}
	if e.token != "" {
		req.Header.Set("Authorization", "Bearer "+e.token)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	if h := header["Host"]; h != "" {
		req.Host = h
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// submit posts a job and returns its view.
func (e *env) submit(settings string, header map[string]string) (int, jobJSON, []byte) {
	e.t.Helper()
	body, ct := multipartBody(e.t, settings, map[string][]byte{"image": stripPNG(e.t)}, nil)
	h := map[string]string{"Content-Type": ct}
	for k, v := range header {
		h[k] = v
	}
	code, b := e.do("POST", "/api/jobs", body, h)
	var j jobJSON
	json.Unmarshal(b, &j)
	return code, j, b
}

// jobJSON is what the tests read of a job.
type jobJSON struct {
	ID        string            `json:"id"`
	Status    string            `json:"status"`
	Position  int               `json:"position"`
	Section   int               `json:"section"`
	Sections  int               `json:"sections"`
	ResumedAt int               `json:"resumed_at"`
	Attempts  int               `json:"attempts"`
	Error     string            `json:"error"`
	Result    *farm.Result      `json:"result"`
	Links     map[string]string `json:"links"`
	Settings  farm.Settings     `json:"settings"`
	Image     *farm.File        `json:"image"`
}

func (e *env) job(id string) jobJSON {
	e.t.Helper()
	code, b := e.do("GET", "/api/jobs/"+id, nil, nil)
	if code != http.StatusOK {
		e.t.Fatalf("GET job %s: %d %s", id, code, b)
	}
	var j jobJSON
	if err := json.Unmarshal(b, &j); err != nil {
		e.t.Fatal(err)
	}
	return j
}

// wait polls job id until done(j) or the deadline.
func (e *env) wait(id string, d time.Duration, done func(jobJSON) bool) jobJSON {
	e.t.Helper()
	end := time.Now().Add(d)
	for {
		j := e.job(id)
		if done(j) {
			return j
		}
		if time.Now().After(end) {
			// Where everything stands, to see what the job waits for.
			var stacks strings.Builder
			pprof.Lookup("goroutine").WriteTo(&stacks, 1)
			e.t.Logf("the goroutines:\n%s", stacks.String())
			e.t.Fatalf("job %s: still %s after %s (section %d of %d)", id, j.Status, d, j.Section, j.Sections)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func finished(j jobJSON) bool { return farm.Finished(j.Status) }

// sseEvent is one server-sent event.
type sseEvent struct {
	name string
	data []byte
}

// events reads job id's event stream until it ends.
func (e *env) events(ctx context.Context, id string, fn func(sseEvent)) error {
	req, _ := http.NewRequestWithContext(ctx, "GET", e.url+"/api/jobs/"+id+"/events", nil)
	if e.token != "" {
		req.Header.Set("Authorization", "Bearer "+e.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		return fmt.Errorf("events: Content-Type %q", ct)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 4<<20)
	var ev sseEvent
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			ev.name = line[7:]
		case strings.HasPrefix(line, "data: "):
			ev.data = []byte(line[6:])
		case line == "" && ev.name != "":
			fn(ev)
			if ev.name == "end" {
				return nil
			}
			ev = sseEvent{}
		}
	}
	return sc.Err()
}

// A job submitted through the API runs on the worker: its events carry
// every step's progress and preview and the video after each section,
// and its video and settings file are served once it is done.
func TestSubmitEventsVideo(t *testing.T) {
	t.Parallel() // its own server and queue
	e := newEnv(t, envOptions{})
	code, j, b := e.submit(`{"prompt":"a red kite","seconds":0.4,"window":1,"seed":7}`, nil)
	if code != http.StatusCreated {
		t.Fatalf("POST /api/jobs: %d %s", code, b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	counts := map[string]int{}
	steps := map[string]bool{}
	var lastState []byte
	previews := map[string]bool{}
	if err := e.events(ctx, j.ID, func(ev sseEvent) {
		counts[ev.name]++
		var fe farm.Event
		json.Unmarshal(ev.data, &fe)
		switch ev.name {
		case "state":
			lastState = ev.data
		case "progress":
			if fe.Stage == framepack.StageSample {
				steps[fmt.Sprintf("%d/%d", fe.Section, fe.Step)] = true
			}
		case "preview":
			if len(fe.PNG) == 0 || fe.Width == 0 {
				t.Errorf("a preview event without its image: %s", ev.data)
			}
			previews[string(fe.PNG)] = true
		}
	}); err != nil {
		t.Fatal(err)
	}
	var st jobJSON
	json.Unmarshal(lastState, &st)
	if st.Status != farm.Done {
		t.Fatalf("the stream ended with the job %s (%s)", st.Status, st.Error)
	}
	// 3 sections of one latent frame, of 2 steps. The stream may start
	// after the first steps ran, so at least the last section's are there.
	if len(steps) < 2 || counts["preview"] < 2 || len(previews) < 2 {
		t.Errorf("events: %v, %d distinct steps, %d distinct previews", counts, len(steps), len(previews))
	}
	if counts["section-video"] < 1 {
		t.Errorf("no section-video event: %v", counts)
	}
	done := e.job(j.ID)
	if done.Result == nil || done.Result.Frames != 13 || done.Sections != 3 || done.Section != 3 {
		t.Fatalf("done job: %+v", done)
	}
	code, video := e.do("GET", done.Links["video"], nil, nil)
	if code != http.StatusOK || !bytes.Equal(video[4:8], []byte("ftyp")) {
		t.Fatalf("GET video: %d, %d bytes", code, len(video))
	}
	if dur := probeDuration(t, video); dur < 0.4 || dur > 0.5 {
		t.Errorf("the video lasts %.3f s, want 13 frames at 30 fps", dur)
	}
	code, sb := e.do("GET", done.Links["settings"], nil, nil)
	var set struct {
		Settings farm.Settings `json:"settings"`
		Result   farm.Result   `json:"result"`
	}
	if code != http.StatusOK || json.Unmarshal(sb, &set) != nil || set.Settings.Seed != 7 || set.Result.VideoSHA256 != done.Result.VideoSHA256 {
		t.Fatalf("GET settings: %d %s", code, sb)
	}
	if code, b := e.do("GET", "/api/jobs/"+j.ID+"/thumbnail", nil, nil); code != http.StatusOK || !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Errorf("GET thumbnail: %d", code)
	}
	// A reload re-syncs: the stream of a finished job sends its state and
	// ends.
	var names []string
	e.events(ctx, j.ID, func(ev sseEvent) { names = append(names, ev.name) })
	if strings.Join(names, ",") != "state,end" {
		t.Errorf("a finished job's stream: %v", names)
	}
}

// probeDuration is a video's duration by ffprobe.
func probeDuration(t *testing.T, video []byte) float64 {
	t.Helper()
	path := filepath.Join(t.TempDir(), "v.mp4")
	os.WriteFile(path, video, 0o644)
	out, err := exec.Command("ffprobe", "-v", "error", "-show_entries", "format=duration", "-of", "default=nw=1:nk=1", path).Output()
	if err != nil {
		t.Fatalf("ffprobe: %v", err)
	}
	d, err := strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// A retried POST with the same Idempotency-Key returns the same job, even
// when the retries race; the key with another request is refused.
func TestIdempotency(t *testing.T) {
	t.Parallel() // its own server and queue
	e := newEnv(t, envOptions{noWorker: true})
	key := map[string]string{"Idempotency-Key": "retry-1"}
	code, first, b := e.submit(`{"prompt":"a"}`, key)
	if code != http.StatusCreated {
		t.Fatalf("first POST: %d %s", code, b)
	}
	var wg sync.WaitGroup
	ids := make([]string, 8)
	codes := make([]int, 8)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, j, _ := e.submit(`{"prompt":"a"}`, key)
			ids[i], codes[i] = j.ID, c
		}()
	}
	wg.Wait()
	for i := range ids {
		if ids[i] != first.ID || codes[i] != http.StatusOK {
			t.Errorf("retry %d: %d, job %q; want 200 and %q", i, codes[i], ids[i], first.ID)
		}
	}
	// Racing first requests with a new key make one job.
	key2 := map[string]string{"Idempotency-Key": "race"}
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, j, _ := e.submit(`{"prompt":"b"}`, key2)
			ids[i] = j.ID
		}()
	}
	wg.Wait()
	for i := range ids {
		if ids[i] == "" || ids[i] != ids[0] {
			t.Errorf("racing first requests made jobs %v", ids)
			break
		}
	}
	if code, _, b := e.submit(`{"prompt":"another"}`, key); code != http.StatusUnprocessableEntity || !strings.Contains(string(b), "different request") {
		t.Errorf("the key with another request: %d %s", code, b)
	}
	_, b = e.do("GET", "/api/jobs", nil, nil)
	var list struct{ Jobs []jobJSON }
	json.Unmarshal(b, &list)
	if len(list.Jobs) != 2 {
		t.Errorf("%d jobs stored, want 2", len(list.Jobs))
	}
}

// Queued jobs move up and are cancelled; finished ones are removed; a
// running job stops when cancelled. The list read right after a move shows
// it (the list waits for the state it lists to catch up).
func TestQueueMoveCancel(t *testing.T) {
	t.Parallel() // its own server and queue
	e := newEnv(t, envOptions{noWorker: true})
	var ids []string
	for i := range 3 {
		_, j, _ := e.submit(fmt.Sprintf(`{"prompt":"job %d"}`, i), nil)
		ids = append(ids, j.ID)
	}
	if code, b := e.do("POST", "/api/jobs/"+ids[2]+"/up", nil, nil); code != http.StatusOK {
		t.Fatalf("move up: %d %s", code, b)
	}
	order := func() []string {
		_, b := e.do("GET", "/api/jobs?status=queued", nil, nil)
		var list struct{ Jobs []jobJSON }
		json.Unmarshal(b, &list)
		var o []string
		for i, j := range list.Jobs {
			if j.Position != i+1 {
				t.Errorf("job %s at %d has position %d", j.ID, i+1, j.Position)
			}
			o = append(o, j.ID)
		}
		return o
	}
	if got, want := order(), []string{ids[0], ids[2], ids[1]}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("after moving the third up: %v, want %v", got, want)
	}
	e.do("POST", "/api/jobs/"+ids[2]+"/up", nil, nil)
	if got, want := order(), []string{ids[2], ids[0], ids[1]}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("after moving it up again: %v, want %v", got, want)
	}
	code, b := e.do("DELETE", "/api/jobs/"+ids[0], nil, nil)
	if j := e.job(ids[0]); code != http.StatusOK || j.Status != farm.Cancelled {
		t.Fatalf("cancel a queued job: %d %s", code, b)
	}
	if code, b := e.do("POST", "/api/jobs/"+ids[0]+"/up", nil, nil); code != http.StatusConflict {
		t.Errorf("moving a cancelled job: %d %s", code, b)
	}
	if code, _ := e.do("DELETE", "/api/jobs/"+ids[0], nil, nil); code != http.StatusNoContent {
		t.Errorf("removing a cancelled job: %d", code)
	}
	if code, _ := e.do("GET", "/api/jobs/"+ids[0], nil, nil); code != http.StatusNotFound {
		t.Errorf("a removed job: %d", code)
	}
	// The queue's messages: only the live ones run. A worker now takes
	// the jobs in the queue's order and skips the stale messages.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var took []string
	for range 2 {
		l, err := e.farm.Take(ctx, "t")
		if err != nil {
			t.Fatal(err)
		}
		took = append(took, l.Job.ID)
		l.Finish(ctx, nil, func(j *farm.Job) { j.Status = farm.Failed })
	}
	if strings.Join(took, " ") != ids[2]+" "+ids[1] {
		t.Errorf("the worker took %v, want %v", took, []string{ids[2], ids[1]})
	}
	tctx, tcancel := context.WithTimeout(ctx, 2*time.Second)
	defer tcancel()
	if l, err := e.farm.Take(tctx, "t"); err == nil {
		t.Errorf("a third job %s was taken from a queue of two", l.Job.ID)
	}
}

// Cancelling a running job stops it at its next step.
func TestCancelRunning(t *testing.T) {
	t.Parallel() // its own server and queue
	e := newEnv(t, envOptions{})
	_, j, _ := e.submit(`{"prompt":"long","seconds":4,"steps":8}`, nil)
	e.wait(j.ID, 2*time.Minute, func(j jobJSON) bool { return j.Status == farm.Running })
	code, b := e.do("DELETE", "/api/jobs/"+j.ID, nil, nil)
	if code != http.StatusAccepted {
		t.Fatalf("cancel a running job: %d %s", code, b)
	}
	t0 := time.Now()
	got := e.wait(j.ID, time.Minute, finished)
	if got.Status != farm.Cancelled {
		t.Fatalf("the job ended %s (%s)", got.Status, got.Error)
	}
	t.Logf("cancelled in %s", time.Since(t0).Round(time.Millisecond))
	objs, err := e.farm.Objects(context.Background(), j.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if strings.HasPrefix(o, farm.FileCheckpoint) || strings.HasPrefix(o, "partial") {
			t.Errorf("a cancelled job kept its %s", o)
		}
	}
}

// pngHeader is a PNG whose header says w×h (no pixels follow).
func pngHeader(w, h uint32) []byte {
	var b bytes.Buffer
	b.WriteString("\x89PNG\r\n\x1a\n")
	ihdr := make([]byte, 13)
	binary.BigEndian.PutUint32(ihdr, w)
	binary.BigEndian.PutUint32(ihdr[4:], h)
	ihdr[8], ihdr[9] = 8, 2
	binary.Write(&b, binary.BigEndian, uint32(13))
	chunk := append([]byte("IHDR"), ihdr...)
	b.Write(chunk)
	binary.Write(&b, binary.BigEndian, crc32.ChecksumIEEE(chunk))
	return b.Bytes()
}

// Bad submissions get a 4xx naming the problem, before anything is
// stored; a client's file name is only shown, never used.
func TestBadUploads(t *testing.T) {
	t.Parallel() // its own server and queue
	e := newEnv(t, envOptions{noWorker: true, maxUpload: 256 << 10})
	scene := scenePNG(t)
	video, short := sceneMP4(t, 40), sceneMP4(t, 12)
	for _, c := range []struct {
		name     string
		settings string
		files    map[string][]byte
		ctype    string
		code     int
		want     string
	}{
		{"not multipart", "", nil, "application/json", 415, "multipart/form-data"},
		{"no image", `{}`, map[string][]byte{}, "", 400, `no "image" part`},
		{"text as image", `{}`, map[string][]byte{"image": []byte("hello, not an image")}, "", 415, "not a PNG, JPEG or WebP"},
		{"empty image", `{}`, map[string][]byte{"image": {}}, "", 400, "empty"},
		{"huge header", `{}`, map[string][]byte{"image": pngHeader(20000, 20000)}, "", 413, "megapixels"},
		{"truncated image", `{}`, map[string][]byte{"image": scene[:len(scene)/2]}, "", 422, "image"},
		{"too large", `{}`, map[string][]byte{"image": bytes.Repeat([]byte{0}, 300<<10)}, "", 413, "limit"},
		{"unknown key", `{"stepz":3}`, map[string][]byte{"image": scene}, "", 422, "stepz"},
		{"bad JSON", `{"steps":`, map[string][]byte{"image": scene}, "", 422, "settings"},
		{"bad steps", `{"steps":0}`, map[string][]byte{"image": scene}, "", 422, "steps must be in 1–100"},
		{"bad seconds", `{"seconds":500}`, map[string][]byte{"image": scene}, "", 422, "seconds"},
		{"bad crf", `{"crf":60}`, map[string][]byte{"image": scene}, "", 422, "crf"},
		{"bad model", `{"model":"x"}`, map[string][]byte{"image": scene}, "", 422, "model"},
		{"lora without folder", `{"lora":[{"name":"a.safetensors","weight":1}]}`, map[string][]byte{"image": scene}, "", 422, "LoRA"},
		{"lora path", `{"lora":[{"name":"../x.safetensors","weight":1}]}`, map[string][]byte{"image": scene}, "", 422, "LoRA"},
		{"non-ASCII prompt", `{"prompt":"café"}`, map[string][]byte{"image": scene}, "", 422, "ASCII"},
		{"end image with f1", `{"model":"f1"}`, map[string][]byte{"image": scene, "end_image": scene}, "", 422, "end image"},
		{"unknown part", `{}`, map[string][]byte{"image": scene, "poster": scene}, "", 400, "unknown part"},
		{"bad cache", `{"cache":"fastcache"}`, map[string][]byte{"image": scene}, "", 422, `cache must be "teacache", "magcache" or "none", have "fastcache"`},
		{"bad magcache k", `{"cache":"magcache","magcache_k":9}`, map[string][]byte{"image": scene}, "", 422, "MagCache K must be in 1–5, have 9"},
		{"bad magcache retention", `{"cache":"magcache","magcache_retention":1.5}`, map[string][]byte{"image": scene}, "", 422, "MagCache retention ratio must be in 0–1"},
		{"bad cache threshold", `{"cache_threshold":2}`, map[string][]byte{"image": scene}, "", 422, "cache threshold must be in (0, 1]"},
		{"image and video", `{}`, map[string][]byte{"image": scene, "video": video}, "", 400, `send one`},
		{"empty video", `{}`, map[string][]byte{"video": {}}, "", 400, "the video is empty"},
		{"text as video", `{}`, map[string][]byte{"video": []byte("hello, not a video")}, "", 415, `the video "video.png": not a video ffmpeg can read`},
		{"image as video", `{}`, map[string][]byte{"video": scene}, "", 422, "too short: 1 frames"},
		{"truncated video", `{}`, map[string][]byte{"video": video[:len(video)/2]}, "", 415, "not a video ffmpeg can read"},
		{"short video", `{"window":3}`, map[string][]byte{"video": short}, "", 422, "the video is too short: 12 frames; with video context frames 5 and latent window size 3 it needs at least 28"},
		{"video context frames", `{"window":3,"video_context_frames":11}`, map[string][]byte{"video": video}, "", 422, "video context frames must be in 2–10, have 11"},
		{"video at a bad resolution", `{"resolution":5}`, map[string][]byte{"video": video}, "", 422, "settings: resolution"},
		{"video with f1 end image", `{"model":"f1"}`, map[string][]byte{"video": video, "end_image": scene}, "", 422, "end image needs"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var body io.Reader = strings.NewReader("{}")
			ct := c.ctype
			if c.files != nil {
				body, ct = multipartBody(t, c.settings, c.files, nil)
			}
			code, b := e.do("POST", "/api/jobs", body, map[string]string{"Content-Type": ct})
			var ae apiError
			if err := json.Unmarshal(b, &ae); err != nil {
				t.Fatalf("the error is not JSON: %s", b)
			}
			if code != c.code || ae.Status != c.code || !strings.Contains(ae.Error, c.want) {
				t.Errorf("%d %q, want %d with %q", code, ae.Error, c.code, c.want)
			}
		})
	}
	// The type comes from the content, the name is shown only.
	body, ct := multipartBody(t, `{}`, map[string][]byte{"image": scene}, map[string]string{"image": "../../etc/passwd.jpg"})
	code, b := e.do("POST", "/api/jobs", body, map[string]string{"Content-Type": ct})
	var j jobJSON
	json.Unmarshal(b, &j)
	if code != http.StatusCreated || j.Image.Type != "image/png" || j.Image.Name != "passwd.jpg" {
		t.Errorf("a PNG named ../../etc/passwd.jpg: %d %s", code, b)
	}
	if code, b := e.do("GET", "/api/nope", nil, nil); code != 404 || !strings.Contains(string(b), "openapi") {
		t.Errorf("an unknown route: %d %s", code, b)
	}
}

// The caps on queued jobs and stored bytes refuse submissions clearly.
func TestCaps(t *testing.T) {
	t.Parallel() // its own server and queue
	e := newEnv(t, envOptions{noWorker: true, maxQueued: 2})
	for range 2 {
		if code, _, b := e.submit(`{}`, nil); code != http.StatusCreated {
			t.Fatalf("%d %s", code, b)
		}
	}
	// The server sees the queue through the state bucket's watch.
	for end := time.Now().Add(30 * time.Second); ; {
		_, b := e.do("GET", "/api/health", nil, nil)
		var h struct{ Jobs map[string]int }
		json.Unmarshal(b, &h)
		if h.Jobs[farm.Queued] == 2 {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("health never counted the 2 queued jobs: %s", b)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code, _, b := e.submit(`{}`, nil); code != http.StatusTooManyRequests || !strings.Contains(string(b), "queue is full") {
		t.Errorf("a third job with a queue of 2: %d %s", code, b)
	}
	small := newEnv(t, envOptions{noWorker: true, maxStorage: 1 << 20})
	if code, _, b := small.submit(`{}`, nil); code != http.StatusInsufficientStorage || !strings.Contains(string(b), "file store is full") {
		t.Errorf("a job beyond the storage cap: %d %s", code, b)
	}
}

// With a token every API call needs it in the Authorization header; the
// page's static files hold no data and are served to anyone. Requests
// from another origin or for another host are refused.
func TestToken(t *testing.T) {
	t.Parallel() // its own server and queue
	e := newEnv(t, envOptions{noWorker: true, token: "s3cret"})
	for _, c := range []struct {
		name   string
		header map[string]string
		code   int
	}{
		{"no token", nil, 401},
		{"wrong token", map[string]string{"Authorization": "Bearer nope"}, 401},
		{"cookie only", map[string]string{"Cookie": "token=s3cret"}, 401},
		{"token", map[string]string{"Authorization": "Bearer s3cret"}, 200},
		{"other origin", map[string]string{"Authorization": "Bearer s3cret", "Origin": "http://evil.example"}, 403},
	} {
		for _, path := range []string{"/api/health", "/api/jobs", "/api/openapi.json"} {
			req, _ := http.NewRequest("GET", e.url+path, nil)
			for k, v := range c.header {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != c.code {
				t.Errorf("%s: GET %s: %d, want %d", c.name, path, resp.StatusCode, c.code)
			}
		}
	}
	// A POST without the token stores nothing.
	body, ct := multipartBody(t, `{}`, map[string][]byte{"image": scenePNG(t)}, nil)
	req, _ := http.NewRequest("POST", e.url+"/api/jobs", body)
	req.Header.Set("Content-Type", ct)
	resp, _ := http.DefaultClient.Do(req)
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Errorf("POST without the token: %d", resp.StatusCode)
	}
	if resp, err := http.Get(e.url + "/"); err != nil || resp.StatusCode != 200 {
		t.Errorf("the page: %v", err)
	}
	// Without a token the server answers loopback host names only.
	open := newEnv(t, envOptions{noWorker: true})
	code, b := open.do("GET", "/api/health", nil, map[string]string{"Host": "evil.example:7860"})
	if code != http.StatusMisdirectedRequest {
		t.Errorf("another host name without a token: %d %s", code, b)
	}
	code, b = open.do("POST", "/api/jobs", strings.NewReader(""), map[string]string{"Origin": "http://evil.example", "Content-Type": "multipart/form-data; boundary=x"})
	if code != http.StatusForbidden {
		t.Errorf("a cross-origin POST: %d %s", code, b)
	}
}

// The OpenAPI document describes every API route, and no other.
func TestOpenAPICoversRoutes(t *testing.T) {
	t.Parallel() // its own server and queue
	e := newEnv(t, envOptions{noWorker: true})
	code, b := e.do("GET", "/api/openapi.json", nil, nil)
	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	if code != http.StatusOK || json.Unmarshal(b, &doc) != nil || !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Fatalf("GET /api/openapi.json: %d", code)
	}
	documented := map[string]bool{}
	for path, ops := range doc.Paths {
		for method := range ops {
			documented[strings.ToUpper(method)+" "+path] = true
		}
	}
	for _, r := range e.srv.routeList {
		if !documented[r] {
			t.Errorf("route %s is not in the OpenAPI document", r)
		}
		delete(documented, r)
	}
	for r := range documented {
		t.Errorf("the OpenAPI document has %s, which the server does not route", r)
	}
	// The settings it documents are the ones a job takes (unknown keys
	// are refused).
	var schemas struct {
		Components struct {
			Schemas struct {
				Settings struct {
					Properties map[string]json.RawMessage `json:"properties"`
				}
			}
		}
	}
	json.Unmarshal(b, &schemas)
	keys := map[string]bool{}
	st := reflect.TypeFor[farm.Settings]()
	for i := range st.NumField() {
		key, _, _ := strings.Cut(st.Field(i).Tag.Get("json"), ",")
		keys[key] = true
		if schemas.Components.Schemas.Settings.Properties[key] == nil {
			t.Errorf("the OpenAPI document's Settings lack %q", key)
		}
	}
	for key := range schemas.Components.Schemas.Settings.Properties {
		if !keys[key] {
			t.Errorf("the OpenAPI document's Settings have %q, which a job does not take", key)
		}
	}
}

// A job names a LoRA of the server's folder with a weight: the models load
// again with it merged, and the video differs from the one without it.
func TestLoRAJob(t *testing.T) {
	t.Parallel() // its own server and queue
	dir := t.TempDir()
	// A PEFT LoRA on the tiny transformer's first block's query (d = 64).
	const d, r = 64, 4
	rng := rand.New(rand.NewPCG(3, 4))
	a, b := tensor.RandN(rng, r*d), tensor.RandN(rng, d*r)
	if err := weights.Save(filepath.Join(dir, "kite.safetensors"), map[string]*tensor.Tensor{
		"transformer.transformer_blocks.0.attn.to_q.lora_A.weight": tensor.FromFloat32(a.Float32s(), r, d),
		"transformer.transformer_blocks.0.attn.to_q.lora_B.weight": tensor.FromFloat32(b.Float32s(), d, r),
	}, nil); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("not a LoRA"), 0o644)
	e := newEnv(t, envOptions{loras: dir})
	_, ob := e.do("GET", "/api/options", nil, nil)
	var opts struct{ LoRAs []string }
	json.Unmarshal(ob, &opts)
	if strings.Join(opts.LoRAs, ",") != "kite.safetensors" {
		t.Fatalf("options list LoRAs %v", opts.LoRAs)
	}
	const base = `"prompt":"a kite","seconds":0.4,"steps":1`
	_, plain, _ := e.submit(`{`+base+`}`, nil)
	code, with, body := e.submit(`{`+base+`,"lora":[{"name":"kite.safetensors","weight":2}]}`, nil)
	if code != http.StatusCreated {
		t.Fatalf("%d %s", code, body)
	}
	p := e.wait(plain.ID, 3*time.Minute, finished)
	l := e.wait(with.ID, 3*time.Minute, finished)
	if p.Status != farm.Done || l.Status != farm.Done {
		t.Fatalf("jobs ended %s (%s) and %s (%s)", p.Status, p.Error, l.Status, l.Error)
	}
	if p.Result.FramesSHA256 == l.Result.FramesSHA256 {
		t.Error("the LoRA changed nothing")
	}
	if len(l.Settings.LoRA) != 1 || l.Settings.LoRA[0].Weight != 2 {
		t.Errorf("the job's settings: %+v", l.Settings.LoRA)
	}
	if code, _, b := e.submit(`{`+base+`,"lora":[{"name":"notes.txt","weight":1}]}`, nil); code != http.StatusUnprocessableEntity {
		t.Errorf("a LoRA that is not a .safetensors file: %d %s", code, b)
	}
}

// The live workers are listed with what they run; a job waiting while no
// worker is live says so.
func TestWorkers(t *testing.T) {
	e := newEnv(t, envOptions{})
	for end := time.Now().Add(30 * time.Second); ; {
		_, b := e.do("GET", "/api/workers", nil, nil)
		var r struct{ Workers []farm.WorkerInfo }
		json.Unmarshal(b, &r)
		if len(r.Workers) == 1 && r.Workers[0].Name == "test" && r.Workers[0].Device != "" && r.Workers[0].DeviceBytes > 0 {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("the worker is not listed: %s", b)
		}
		time.Sleep(50 * time.Millisecond)
	}
	idle := newEnv(t, envOptions{noWorker: true})
	_, j, b := idle.submit(`{}`, nil)
	code, b := idle.do("GET", "/api/jobs/"+j.ID, nil, nil)
	if code != http.StatusOK || !strings.Contains(string(b), `"unrunnable":"no worker is live"`) {
		t.Errorf("a job waiting with no worker: %d %s", code, b)
	}
	if _, b = idle.do("GET", "/api/workers", nil, nil); strings.TrimSpace(string(b)) != `{"workers":[]}` {
		t.Errorf("no worker: %s", b)
	}
}
