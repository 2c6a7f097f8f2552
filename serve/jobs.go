package serve

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"io"
	"math"
	"math/rand/v2"
	"mime"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	_ "image/jpeg" // the uploads' formats
	_ "image/png"

	_ "golang.org/x/image/webp"

	"github.com/framepack-go/framepack"
	"github.com/framepack-go/framepack/farm"
	"github.com/framepack-go/framepack/memory"
	"github.com/framepack-go/framepack/section"
	"github.com/framepack-go/framepack/video"
	"github.com/framepack-go/framepack/worker"
)

// jobView is a job as the API shows it.
type jobView struct {
	*farm.Job
	// Position is a queued job's place in the queue (1: next).
	Position int `json:"position,omitempty"`
	// Progress is a running job's latest progress event.
	Progress *farm.Event       `json:"progress,omitempty"`
	Links    map[string]string `json:"links"`
}

func viewOf(j *farm.Job) jobView {
	base := "/api/jobs/" + j.ID
	links := map[string]string{"self": base, "events": base + "/events", "thumbnail": base + "/thumbnail"}
	if j.Image != nil {
		links["image"] = base + "/image"
	}
	if j.Video != nil {
		links["input_video"] = base + "/input-video"
	}
	if j.EndImage != nil {
		links["end_image"] = base + "/end-image"
	}
	if j.Status == farm.Done {
		links["video"], links["settings"] = base+"/video", base+"/settings"
	}
	if !farm.Finished(j.Status) && j.Section > 0 && j.Section < j.Sections {
		links["partial_video"] = sectionVideoURL(j.ID, j.Section)
	}
	return jobView{Job: j, Links: links}
}

// view is job j with its place in the queue and its live progress.
func (s *Server) view(j *farm.Job) jobView {
	j = s.waiting(j)
	v := viewOf(j)
	switch j.Status {
	case farm.Queued:
		n := 0
		for _, o := range s.hub.list() {
			if o.Status == farm.Queued {
				n++
				if o.ID == j.ID {
					v.Position = n
					break
				}
			}
		}
	case farm.Running:
		v.Progress = s.hub.progress(j.ID)
	}
	return v
}

// waiting is j, saying in a queued job's Unrunnable that no worker is
// live when none is (the workers' refusals say why none can run it only
// while some are): a copy when it changes.
func (s *Server) waiting(j *farm.Job) *farm.Job {
	if j.Status != farm.Queued || j.Unrunnable != "" {
		return j
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if live, err := s.liveWorkers(ctx); err == nil && len(live) == 0 {
		c := *j
		c.Unrunnable = "no worker is live"
		return &c
	}
	return j
}

// listJobs is GET /api/jobs[?status=a,b].
func (s *Server) listJobs(w http.ResponseWriter, r *http.Request) {
	want := map[string]bool{}
	if q := r.URL.Query().Get("status"); q != "" {
		for _, st := range strings.Split(q, ",") {
			switch st {
			case farm.Queued, farm.Running, farm.Done, farm.Failed, farm.Cancelled:
				want[st] = true
			default:
				writeError(w, http.StatusBadRequest, fmt.Sprintf("status %q: want queued, running, done, failed or cancelled", st))
				return
			}
		}
	}
	s.caughtUp(r.Context())
	views := []jobView{}
	pos := 0
	for _, j := range s.hub.list() {
		j = s.waiting(j)
		v := viewOf(j)
		if j.Status == farm.Queued {
			pos++
			v.Position = pos
		}
		if j.Status == farm.Running {
			v.Progress = s.hub.progress(j.ID)
		}
		if len(want) == 0 || want[j.Status] {
			views = append(views, v)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"jobs": views, "counts": s.hub.counts()})
}

// caughtUp waits, for at most a second or two, until the hub's jobs
// include every change made before now (this server's or another's: a job
// moved up, one just submitted), so that a list read after a change shows
// it; while the servers do not answer, the list is what the hub has.
func (s *Server) caughtUp(ctx context.Context) {
	ask, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	rev, err := s.f.StateRevision(ask)
	if err == nil && !s.hub.seen(ctx, rev, time.Second) {
		s.log.Debug(fmt.Sprintf("the job list lags the state bucket (revision %d)", rev))
	}
}

// job reads the job the path names, or answers 404.
func (s *Server) job(w http.ResponseWriter, r *http.Request) *farm.Job {
	id := r.PathValue("id")
	j, _, err := s.f.Get(r.Context(), id)
	if errors.Is(err, farm.ErrNotFound) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no job %q", id))
		return nil
	}
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return nil
	}
	return j
}

func (s *Server) getJob(w http.ResponseWriter, r *http.Request) {
	if j := s.job(w, r); j != nil {
		writeJSON(w, http.StatusOK, s.view(j))
	}
}

// deleteJob cancels a queued job, asks a running one to stop, or removes
// a finished one with its files.
func (s *Server) deleteJob(w http.ResponseWriter, r *http.Request) {
	j := s.job(w, r)
	if j == nil {
		return
	}
	if farm.Finished(j.Status) {
		err := s.f.Delete(r.Context(), j.ID)
		switch {
		case err == nil:
			w.WriteHeader(http.StatusNoContent)
		case errors.Is(err, farm.ErrConflict):
			writeError(w, http.StatusConflict, "the job changed meanwhile; try again")
		case errors.Is(err, farm.ErrNotFound):
			writeError(w, http.StatusNotFound, fmt.Sprintf("no job %q", j.ID))
		default:
			writeError(w, http.StatusServiceUnavailable, err.Error())
		}
		return
	}
	j, err := s.f.Cancel(r.Context(), j.ID)
	switch {
	case errors.Is(err, farm.ErrNotFound):
		writeError(w, http.StatusNotFound, fmt.Sprintf("no job %q", r.PathValue("id")))
	case errors.Is(err, farm.ErrConflict):
		writeError(w, http.StatusConflict, fmt.Sprintf("the job is %s; delete it again to remove it", j.Status))
	case err != nil:
		writeError(w, http.StatusServiceUnavailable, err.Error())
	case j.Status == farm.Cancelled:
		writeJSON(w, http.StatusOK, s.view(j))
	default: // running: the worker stops it at its next step
		writeJSON(w, http.StatusAccepted, s.view(j))
	}
}

// moveUp is POST /api/jobs/{id}/up.
func (s *Server) moveUp(w http.ResponseWriter, r *http.Request) {
	j := s.job(w, r)
	if j == nil {
		return
	}
	err := s.f.MoveUp(r.Context(), j.ID)
	switch {
	case errors.Is(err, farm.ErrConflict):
		writeError(w, http.StatusConflict, fmt.Sprintf("the job is %s: only a queued job moves", j.Status))
	case err != nil:
		writeError(w, http.StatusServiceUnavailable, err.Error())
	default:
		if j, _, err = s.f.Get(r.Context(), j.ID); err == nil {
			writeJSON(w, http.StatusOK, viewOf(j))
		} else {
			w.WriteHeader(http.StatusNoContent)
		}
	}
}

// file serves one of a job's stored files; ctype "" takes the upload's.
func (s *Server) file(name, ctype string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		j := s.job(w, r)
		if j == nil {
			return
		}
		ct := ctype
		switch name {
		case farm.FileImage:
			if j.Image == nil {
				writeError(w, http.StatusNotFound, "the job has no start image: it extends a video (input-video)")
				return
			}
			ct = j.Image.Type
		case farm.FileInputVideo:
			if j.Video == nil {
				writeError(w, http.StatusNotFound, "the job extends no video")
				return
			}
			ct = j.Video.Type
		case farm.FileEndImage:
			if j.EndImage == nil {
				writeError(w, http.StatusNotFound, "the job has no end image")
				return
			}
			ct = j.EndImage.Type
		}
		b, err := s.f.GetBytes(r.Context(), j.ID, j.File(name))
		if errors.Is(err, farm.ErrNoFile) {
			msg := "not stored"
			switch name {
			case farm.FileVideo, farm.FileSettings:
				msg = fmt.Sprintf("the job is %s: its video and settings file are stored when it is done", j.Status)
			case farm.FilePartial:
				msg = "no video so far: the job has no finished section running"
			}
			writeError(w, http.StatusNotFound, msg)
			return
		}
		if err != nil {
			writeError(w, http.StatusServiceUnavailable, err.Error())
			return
		}
		w.Header().Set("Content-Type", ct)
		if r.URL.Query().Get("download") != "" {
			ext := map[string]string{"video/mp4": ".mp4", "application/json": ".json", "image/png": ".png", "image/jpeg": ".jpg", "image/webp": ".webp",
				"video/webm": ".webm", "video/avi": ".avi"}[ct]
			w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": "framepack-" + j.ID + "-" + strings.TrimSuffix(name, filepath.Ext(name)) + ext}))
		}
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(b))
	}
}

// thumbnail is the finished video's thumbnail, or the start image; for a
// job extending a video, until it is done, the video's last frame.
func (s *Server) thumbnail(w http.ResponseWriter, r *http.Request) {
	j := s.job(w, r)
	if j == nil {
		return
	}
	if j.Status == farm.Done || j.Video != nil {
		s.file(farm.FileThumbnail, "image/png")(w, r)
		return
	}
	s.file(farm.FileImage, "")(w, r)
}

func loraNames(dir string) []string {
	n := worker.LoRAs(dir)
	if n == nil {
		return []string{}
	}
	return n
}

// Upload limits beyond the body's.
const (
	maxSettingsBytes = 64 << 10
	maxIdemKey       = 255
)

// upload is a submission's parts, read and checked.
type upload struct {
	settings   []byte
	image, end []byte
	imageFile  *farm.File
	endFile    *farm.File
	start, fin *section.RGB
	// A video to extend, in place of the image: as uploaded, then read
	// (settings: its frames depend on the resolution).
	video      []byte
	videoName  string
	videoFile  *farm.File
	videoThumb []byte
}

// submit is POST /api/jobs.
func (s *Server) submit(w http.ResponseWriter, r *http.Request) {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/form-data" {
		writeError(w, http.StatusUnsupportedMediaType, "send multipart/form-data: an \"image\" file and a \"settings\" JSON part")
		return
	}
	key := r.Header.Get("Idempotency-Key")
	if len(key) > maxIdemKey || strings.ContainsFunc(key, func(r rune) bool { return r < 0x20 || r > 0x7e }) {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("Idempotency-Key: at most %d printable ASCII characters", maxIdemKey))
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxUpload)
	up, status, err := s.readUpload(r)
	if err != nil {
		writeError(w, status, err.Error())
		return
	}
	set, status, err := s.settings(r.Context(), up)
	if err != nil {
		writeError(w, status, err.Error())
		return
	}
	s.caughtUp(r.Context()) // the jobs queued a moment ago count
	if n := s.hub.counts()[farm.Queued]; n >= s.cfg.MaxQueued {
		writeError(w, http.StatusTooManyRequests, fmt.Sprintf("the queue is full: %d jobs wait (the limit is %d); wait for some to run or cancel some", n, s.cfg.MaxQueued))
		return
	}
	ctx := r.Context()
	stored, err := s.f.StoredBytes(ctx)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	// Room for the uploads and, roughly, the video and a checkpoint.
	if need := int64(len(up.image)+len(up.end)+len(up.video)) + 1<<20; stored+need > s.f.MaxStoredBytes() {
		writeError(w, http.StatusInsufficientStorage, fmt.Sprintf("the file store is full: %s of %s used; delete finished jobs to make room",
			memory.FormatBytes(stored), memory.FormatBytes(s.f.MaxStoredBytes())))
		return
	}

	now := time.Now().UTC()
	job := &farm.Job{ID: farm.NewID(now), Settings: *set, Image: up.imageFile, EndImage: up.endFile, Video: up.videoFile, Created: now}
	var idemKey string
	if key != "" {
		h := sha256.Sum256([]byte(key))
		idemKey = hex.EncodeToString(h[:])
		body := sha256.New()
		body.Write(up.settings)
		body.Write([]byte{0})
		body.Write(up.image)
		body.Write([]byte{0})
		body.Write(up.end)
		body.Write([]byte{0})
		body.Write(up.video)
		prev, same, err := s.f.Idempotent(ctx, idemKey, hex.EncodeToString(body.Sum(nil)), job.ID)
		switch {
		case err != nil:
			writeError(w, http.StatusServiceUnavailable, err.Error())
			return
		case prev != "" && !same:
			writeError(w, http.StatusUnprocessableEntity, "Idempotency-Key was used before with a different request")
			return
		case prev != "":
			// A retry: the job the first request made (it may still be
			// storing).
			for range 300 {
				if j, _, err := s.f.Get(ctx, prev); err == nil {
					w.Header().Set("Location", "/api/jobs/"+j.ID)
					w.Header().Set("Idempotent-Replayed", "true")
					writeJSON(w, http.StatusOK, s.view(j))
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
			writeError(w, http.StatusConflict, "a request with this Idempotency-Key is still being stored; retry")
			return
		}
	}
	fail := func(err error) {
		if idemKey != "" {
			s.f.ForgetIdempotent(context.Background(), idemKey)
		}
		s.f.DeleteFiles(context.Background(), job.ID, farm.FileImage, farm.FileEndImage, farm.FileInputVideo, farm.FileThumbnail)
		writeError(w, http.StatusServiceUnavailable, err.Error())
	}
	files := []struct {
		name string
		b    []byte
	}{{farm.FileImage, up.image}, {farm.FileInputVideo, up.video}, {farm.FileThumbnail, up.videoThumb}}
	for _, f := range files {
		if f.b == nil {
			continue
		}
		if err := s.f.PutBytes(ctx, job.ID, f.name, f.b); err != nil {
			fail(err)
			return
		}
	}
	if up.end != nil {
		if err := s.f.PutBytes(ctx, job.ID, farm.FileEndImage, up.end); err != nil {
			fail(err)
			return
		}
	}
	if err := s.f.Submit(ctx, job); err != nil {
		fail(err)
		return
	}
	s.log.Info(fmt.Sprintf("job %s: queued (%s, %.1f s, seed %d)", job.ID, clip(set.Prompt, 60), set.Seconds, set.Seed))
	w.Header().Set("Location", "/api/jobs/"+job.ID)
	if j, _, err := s.f.Get(ctx, job.ID); err == nil {
		job = j
	}
	writeJSON(w, http.StatusCreated, s.view(job))
}

func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n]) + "…"
}

// readUpload reads the multipart body: "settings" (JSON), "image" or
// "video", and optionally "end_image". It returns the HTTP status for an
// error. A video is read later, with the settings.
func (s *Server) readUpload(r *http.Request) (*upload, int, error) {
	mr, err := r.MultipartReader()
	if err != nil {
		return nil, http.StatusBadRequest, fmt.Errorf("reading the multipart body: %v", err)
	}
	up := &upload{}
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, bodyStatus(err), bodyError(err, s.cfg.MaxUpload)
		}
		name := p.FormName()
		var limit int64
		switch name {
		case "settings":
			limit = maxSettingsBytes
		case "image", "end_image", "video":
			limit = s.cfg.MaxUpload
		default:
			return nil, http.StatusBadRequest, fmt.Errorf("unknown part %q: send \"image\" (or \"video\"), \"settings\" and optionally \"end_image\"", name)
		}
		b, err := io.ReadAll(io.LimitReader(p, limit+1))
		if err != nil {
			return nil, bodyStatus(err), bodyError(err, s.cfg.MaxUpload)
		}
		if int64(len(b)) > limit {
			return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("part %q is larger than %s", name, memory.FormatBytes(limit))
		}
		switch name {
		case "settings":
			if up.settings != nil {
				return nil, http.StatusBadRequest, errors.New("two \"settings\" parts")
			}
			up.settings = b
		case "video":
			switch {
			case up.video != nil:
				return nil, http.StatusBadRequest, errors.New("two \"video\" parts")
			case len(b) == 0:
				return nil, http.StatusBadRequest, errors.New("the video is empty")
			}
			up.video, up.videoName = b, displayName(p.FileName())
		case "image", "end_image":
			what := map[string]string{"image": "image", "end_image": "end image"}[name]
			if (name == "image" && up.image != nil) || (name == "end_image" && up.end != nil) {
				return nil, http.StatusBadRequest, fmt.Errorf("two %q parts", name)
			}
			file, rgb, status, err := checkImage(b, p.FileName(), what)
			if err != nil {
				return nil, status, err
			}
			if name == "image" {
				up.image, up.imageFile, up.start = b, file, rgb
			} else {
				up.end, up.endFile, up.fin = b, file, rgb
			}
		}
	}
	switch {
	case up.image == nil && up.video == nil:
		return nil, http.StatusBadRequest, errors.New("no \"image\" part: send the start image (or a \"video\" to extend)")
	case up.image != nil && up.video != nil:
		return nil, http.StatusBadRequest, errors.New("an \"image\" and a \"video\": send one, the start image or the video to extend")
	}
	return up, 0, nil
}

func bodyStatus(err error) int {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return http.StatusRequestEntityTooLarge
	}
	return http.StatusBadRequest
}

func bodyError(err error, limit int64) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return fmt.Errorf("the upload is larger than the server's limit of %s", memory.FormatBytes(limit))
	}
	return fmt.Errorf("reading the multipart body: %v", err)
}

// checkImage checks an uploaded image: its type from its content, its
// size from its header before it is decoded (the command line's pixel
// limit), then its pixels.
func checkImage(b []byte, clientName, what string) (*farm.File, *section.RGB, int, error) {
	if len(b) == 0 {
		return nil, nil, http.StatusBadRequest, fmt.Errorf("the %s is empty", what)
	}
	cfg, format, err := image.DecodeConfig(bytes.NewReader(b))
	if err != nil {
		return nil, nil, http.StatusUnsupportedMediaType, fmt.Errorf("the %s is not a PNG, JPEG or WebP image", what)
	}
	if cfg.Width <= 0 || cfg.Height <= 0 {
		return nil, nil, http.StatusUnprocessableEntity, fmt.Errorf("the %s has no pixels (%d×%d)", what, cfg.Width, cfg.Height)
	}
	if int64(cfg.Width)*int64(cfg.Height) > section.MaxImagePixels {
		return nil, nil, http.StatusRequestEntityTooLarge, fmt.Errorf("the %s is %d×%d pixels, more than the limit of %d megapixels",
			what, cfg.Width, cfg.Height, section.MaxImagePixels/1000000)
	}
	rgb, err := section.DecodeImage(bytes.NewReader(b))
	if err != nil {
		return nil, nil, http.StatusUnprocessableEntity, fmt.Errorf("the %s: %v", what, err)
	}
	sum := sha256.Sum256(b)
	return &farm.File{Name: displayName(clientName), Type: "image/" + format, Bytes: int64(len(b)), Width: cfg.Width, Height: cfg.Height,
		SHA256: hex.EncodeToString(sum[:])}, rgb, 0, nil
}

// displayName is a client's file name made safe to show: its last
// element, printable, at most 100 characters. It is never used as a path.
func displayName(name string) string {
	name = strings.ReplaceAll(name, "\\", "/")
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		name = name[i+1:]
	}
	name = strings.Map(func(r rune) rune {
		if !unicode.IsPrint(r) {
			return -1
		}
		return r
	}, name)
	return clip(name, 100)
}

// settings reads and checks a submission's settings on top of the
// defaults, and its video if it has one. It returns the HTTP status for an
// error.
func (s *Server) settings(ctx context.Context, up *upload) (*farm.Settings, int, error) {
	bad := http.StatusUnprocessableEntity
	set := s.cfg.Defaults
	// The decoder writes through pointers: the defaults' are not shared.
	set.LoRA, set.MagCacheK, set.MagCacheRetention = nil, nil, nil
	if len(bytes.TrimSpace(up.settings)) > 0 {
		dec := json.NewDecoder(bytes.NewReader(up.settings))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&set); err != nil {
			return nil, bad, fmt.Errorf("settings: %v", err)
		}
		if dec.More() {
			return nil, bad, errors.New("settings: more than one JSON value")
		}
		// The older teacache switch, given without cache, decides.
		var keys map[string]json.RawMessage
		json.Unmarshal(up.settings, &keys)
		if _, ok := keys["cache"]; !ok && keys["teacache"] != nil {
			set.Cache = ""
		}
	}
	if set.MagCacheK == nil {
		set.MagCacheK = s.cfg.Defaults.MagCacheK
	}
	if set.MagCacheRetention == nil {
		set.MagCacheRetention = s.cfg.Defaults.MagCacheRetention
	}
	if set.SeedRandom {
		set.Seed = uint64(rand.Uint32())
	}
	if up.fin == nil && (set.EmbedInterpolation != "" && set.EmbedInterpolation != "disabled") {
		return nil, bad, errors.New("settings: embed_interpolation needs an end image")
	}
	req := worker.Request(set, up.start, up.fin)
	if up.video != nil {
		if status, err := s.readVideo(ctx, up, &req); err != nil {
			return nil, status, err
		}
	}
	if err := req.Validate(); err != nil {
		msg := worker.ErrorText(err)
		if !strings.HasPrefix(msg, "the video") {
			msg = "settings: " + msg
		}
		return nil, bad, errors.New(msg)
	}
	// What the job runs with, as generate's settings file says it: the
	// cache by name, MagCache's knobs with magcache only, the video's
	// options with a video only.
	set.Cache = req.CacheChoice()
	set.TeaCache = set.Cache == framepack.CacheTeaCache
	if set.Cache == framepack.CacheMagCache {
		k, ret := req.MagCacheK, req.MagCacheRetention
		set.MagCacheK, set.MagCacheRetention = &k, &ret
	} else {
		set.MagCacheK, set.MagCacheRetention = nil, nil
	}
	set.VideoContextFrames, set.NewOnly = 0, false
	if up.video != nil {
		set.VideoContextFrames, set.NewOnly = req.VideoContextFrames, req.VideoNewOnly
	}
	switch {
	case set.CRF < 0 || set.CRF > 51:
		return nil, bad, fmt.Errorf("settings: crf must be in 0–51, have %d", set.CRF)
	case len(set.LoRA) > 16:
		return nil, bad, fmt.Errorf("settings: at most 16 LoRAs, have %d", len(set.LoRA))
	}
	if set.Preserve != "" {
		if _, err := memory.ParseSize(set.Preserve); err != nil {
			return nil, bad, fmt.Errorf("settings: preserve: %v", err)
		}
	}
	for _, l := range set.LoRA {
		if _, err := worker.LoRAPath(s.cfg.LoRADir, l.Name); err != nil {
			return nil, bad, errors.New("settings: " + err.Error())
		}
		if math.IsNaN(l.Weight) || math.IsInf(l.Weight, 0) || math.Abs(l.Weight) > 10 {
			return nil, bad, fmt.Errorf("settings: LoRA %q: weight must be in −10–10, have %v", l.Name, l.Weight)
		}
	}
	if s.cfg.TinyModel {
		for _, p := range []string{set.Prompt, set.NegativePrompt} {
			if i := strings.IndexFunc(p, func(r rune) bool { return r > unicode.MaxASCII }); i >= 0 {
				return nil, bad, fmt.Errorf("settings: the built-in tiny model reads ASCII prompts only; %q is not ASCII", []rune(p[i:])[0])
			}
		}
	}
	return &set, 0, nil
}

// readVideo reads a submission's video through ffmpeg as its job will
// (worker.ReadVideo, each frame cropped to its bucket), keeping the last
// frames the extension reads, and puts them in req, for Validate to
// check the video's length with the settings. A file that is no video
// ffmpeg can read, or that it cannot decode, is refused here, before the
// job is queued. It sets up's file description and thumbnail (the last
// frame).
func (s *Server) readVideo(ctx context.Context, up *upload, req *framepack.Request) (int, error) {
	f, err := os.CreateTemp("", "framepack-upload-")
	if err != nil {
		return http.StatusServiceUnavailable, err
	}
	defer os.Remove(f.Name())
	_, err = f.Write(up.video)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return http.StatusServiceUnavailable, fmt.Errorf("storing the video to read it: %v", err)
	}
	name := "the video"
	if up.videoName != "" {
		name = fmt.Sprintf("the video %q", up.videoName)
	}
	var sizeErr error // the settings refuse the frames' size
	v, err := worker.ReadVideo(ctx, f.Name(), name, req.Resolution, false, func(w, h int) error {
		sizeErr = req.ValidateSize(w, h, req.EndRGB != nil)
		return sizeErr
	})
	switch {
	case errors.Is(err, video.ErrNoFFprobe) || errors.Is(err, video.ErrNoFFmpeg):
		return http.StatusNotImplemented, fmt.Errorf("this server cannot read videos: %v", err)
	case sizeErr != nil:
		return http.StatusUnprocessableEntity, errors.New("settings: " + worker.ErrorText(err))
	case errors.Is(err, worker.ErrNotVideo):
		return http.StatusUnsupportedMediaType, err
	case err != nil:
		return http.StatusUnprocessableEntity, err
	}
	req.RGB, req.Video = nil, v.Frames
	ctype := http.DetectContentType(up.video)
	if !strings.HasPrefix(ctype, "video/") {
		ctype = "application/octet-stream"
	}
	sum := sha256.Sum256(up.video)
	up.videoFile = &farm.File{Name: up.videoName, Type: ctype, Bytes: int64(len(up.video)), Width: v.Info.W, Height: v.Info.H,
		SHA256: hex.EncodeToString(sum[:]), Frames: v.Count, Codec: v.Info.Codec, FPS: v.Info.FPS}
	if !req.VideoNewOnly && v.Count > worker.MaxVideoFrames {
		return http.StatusUnprocessableEntity, fmt.Errorf("%s has %d frames, more than %d; trim it, or extend it with new_only (which keeps only its last %d)",
			name, v.Count, worker.MaxVideoFrames, section.VideoEncodeFrames)
	}
	if up.videoThumb, err = worker.VideoThumbnail(v.Last); err != nil {
		return http.StatusUnprocessableEntity, fmt.Errorf("%s: its last frame: %v", name, err)
	}
	return 0, nil
}
