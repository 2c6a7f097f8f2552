// Package worker runs framepack jobs from a farm: it takes a job from the
// queue, generates its video on a pipeline whose models stay loaded from
// one job to the next, checkpoints it after every section, reports its
// progress live and stores its video, then takes the next.
//
// A job resumes from its last checkpoint wherever it was stopped: by a
// shutdown (the worker puts it back in the queue), by a crash or a kill
// (the queue delivers it again), on this worker or another.
package worker

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/png"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/image/draw"

	"github.com/framepack-go/framepack"
	"github.com/framepack-go/framepack/farm"
	"github.com/framepack-go/framepack/lora"
	"github.com/framepack-go/framepack/memory"
	"github.com/framepack-go/framepack/section"
	"github.com/framepack-go/framepack/video"
)

// Config configures a Worker.
type Config struct {
	// Name names the worker in the jobs it runs (the host name, say).
	Name string
	// Models is the model folder Load reads.
	Models string
	// Options are Load's options; LoRA and Preserve are set per job.
	Options framepack.Options
	// LoRADir is the folder whose .safetensors files jobs name as LoRAs.
	LoRADir string
	// TempDir is where videos are encoded before they are stored.
	TempDir string
	// Info goes into every settings file (the build, the model folder).
	Info map[string]any
	// StopGrace is how long a job may take to stop when the worker is
	// stopped (at its next sampler step or decode tile) before it is put
	// back in the queue regardless; 1 s when 0.
	StopGrace time.Duration
	// Variants are the transformer variants the worker has
	// (framepack.ModelFramePack, framepack.ModelF1), each with the folder
	// of its transformer ("": the model folder's own). nil runs every
	// job on the model folder's transformer, whatever its variant.
	Variants map[string]string
	// Fit, when set, takes only the jobs the worker can run (its variants,
	// its LoRAs, its memory budget: Worker.Fit) and leaves the others to
	// other workers; unset, it takes any job.
	Fit bool
	// Announce makes the worker announce itself in the farm's live
	// workers while it runs (farm.Announce), with Info's "framepack"
	// version and GPUs.
	Announce bool
	GPUs     []int
	// Ranks, on a worker that runs each job on several GPUs, starts the
	// other ranks' share of a job (see Follow).
	Ranks Ranks
	// Log receives the worker's lines; nil means slog.Default().
	Log *slog.Logger
}

// Worker runs jobs one at a time.
type Worker struct {
	f   *farm.Farm
	cfg Config
	log *slog.Logger

	p    *framepack.Pipeline
	pkey string // the LoRAs and preserve p was loaded with

	mu       sync.Mutex
	current  string                  // the job running
	cancel   context.CancelCauseFunc // cancels it
	instance string                  // this run, as announced
	fatal    error                   // the ranks are out of step: Run must return
}

// Ranks starts the other ranks of a multi-GPU worker on a job, beside
// rank 0, which runs this Worker.
type Ranks interface {
	// Start tells the other ranks to run job j (its state as taken), from
	// the checkpoint object named (none when ""), and returns once each
	// has its request.
	Start(ctx context.Context, j *farm.Job, checkpoint string) error
}

// errCancelled is the cause of a job's context when its cancel is asked.
var errCancelled = errors.New("cancelled")

// New makes a worker on f.
func New(f *farm.Farm, cfg Config) *Worker {
	w := &Worker{f: f, cfg: cfg, log: cfg.Log}
	if w.log == nil {
		w.log = slog.Default()
	}
	if w.cfg.Name == "" {
		w.cfg.Name, _ = os.Hostname()
	}
	if w.cfg.TempDir == "" {
		w.cfg.TempDir = os.TempDir()
	}
	return w
}

// Close frees the loaded models; call it once Run has returned and no
// job runs.
func (w *Worker) Close() {
	if w.p != nil {
		w.p.Close()
		w.p = nil
	}
}

// grace is how long a stopping worker waits for its job to stop.
func (w *Worker) grace() time.Duration {
	if w.cfg.StopGrace > 0 {
		return w.cfg.StopGrace
	}
	return time.Second
}

// Run takes and runs jobs until ctx ends. A job running then is left
// checkpointed at its last finished section and back in the queue.
func (w *Worker) Run(ctx context.Context) error {
	w.instance = farm.NewID(time.Now())
	if w.cfg.Fit || w.cfg.Announce {
		// The device and the configs now (no weights yet): the fit of each
		// job and the announcement need the budget.
		if _, err := w.pipeline(farm.Settings{Model: w.defaultVariant()}); err != nil {
			return err
		}
	}
	if w.cfg.Announce {
		info := w.info()
		if err := w.f.Announce(ctx, info); err != nil {
			return err
		}
		beat, stopBeat := context.WithCancel(context.Background())
		defer func() {
			stopBeat()
			w.f.Withdraw(context.Background(), info.Name, info.Instance)
		}()
		go w.announce(beat, info)
	}
	sub, err := w.f.Cancels(func(id string) {
		w.mu.Lock()
		if id == w.current && w.cancel != nil {
			w.cancel(errCancelled)
		}
		w.mu.Unlock()
	})
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	t := farm.Taker{Worker: w.cfg.Name, Instance: w.instance}
	if w.cfg.Fit {
		t.Fit = w.Fit
	}
	for {
		l, err := w.f.TakeWith(ctx, t)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		w.run(ctx, l)
		if w.fatal != nil {
			return w.fatal
		}
	}
}

// defaultVariant is the variant the worker loads first.
func (w *Worker) defaultVariant() string {
	if _, ok := w.cfg.Variants[framepack.ModelFramePack]; ok || len(w.cfg.Variants) == 0 {
		return framepack.ModelFramePack
	}
	return slices.Sorted(maps.Keys(w.cfg.Variants))[0]
}

// info is what the worker announces.
func (w *Worker) info() *farm.WorkerInfo {
	host, _ := os.Hostname()
	i := &farm.WorkerInfo{Name: w.cfg.Name, Instance: w.instance, Host: host, PID: os.Getpid(), Models: w.cfg.Models,
		LoRAs: LoRAs(w.cfg.LoRADir), GPUs: w.cfg.GPUs, Started: time.Now().UTC()}
	if w.cfg.Variants != nil {
		i.Variants = slices.Sorted(maps.Keys(w.cfg.Variants))
	}
	switch v := w.cfg.Info["framepack"].(type) {
	case string:
		i.Version = v
	case fmt.Stringer:
		i.Version = v.String()
	}
	if w.p != nil {
		i.Device, i.DeviceBytes, i.HostBytes = w.p.Device(), w.p.Budget().Cap, w.p.HostStats().Limit
	}
	return i
}

// announce writes the worker's entry every farm.WorkerBeat until ctx ends.
func (w *Worker) announce(ctx context.Context, info *farm.WorkerInfo) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(farm.WorkerBeat):
		}
		w.mu.Lock()
		info.Job = w.current
		w.mu.Unlock()
		info.LoRAs = LoRAs(w.cfg.LoRADir)
		if err := w.f.Announce(ctx, info); err != nil && ctx.Err() == nil {
			w.log.Warn("worker: " + err.Error())
		}
	}
}

// Fit says why the worker cannot run job j, or nil when it can: the
// variant must be one it has, the LoRAs in its LoRA folder, and the job
// within its memory budgets (framepack.Pipeline.CheckFit). A job whose
// settings are invalid fits: running it fails it with the reason.
func (w *Worker) Fit(j *farm.Job) error {
	s := j.Settings
	variant := s.Model
	if variant == "" {
		variant = framepack.ModelFramePack
	}
	if w.cfg.Variants != nil {
		if _, ok := w.cfg.Variants[variant]; !ok {
			return fmt.Errorf("no %s transformer (it has %s)", variant, strings.Join(slices.Sorted(maps.Keys(w.cfg.Variants)), ", "))
		}
	}
	for _, lr := range s.LoRA {
		if _, err := LoRAPath(w.cfg.LoRADir, lr.Name); err != nil {
			return errors.New(strings.Replace(err.Error(), "the server has", "it has", 1))
		}
	}
	if w.cfg.Ranks != nil {
		if len(s.LoRA) > 0 || (s.Preserve != "" && !samePreserve(s.Preserve, w.cfg.Options.Preserve)) || variant != w.defaultVariant() {
			return fmt.Errorf("it runs each job on several GPUs, with its own models only (the %s variant, no LoRA, its own preserved memory)", w.defaultVariant())
		}
	}
	if j.Image == nil || w.p == nil {
		return nil
	}
	req := Request(s, nil, nil)
	if req.ValidateSize(j.Image.Width, j.Image.Height, j.EndImage != nil) != nil {
		return nil
	}
	var fe *framepack.FitError
	if err := w.p.CheckFit(req, j.Image.Width, j.Image.Height); errors.As(err, &fe) {
		return fe
	}
	return nil
}

// run runs one taken job to its end: done, failed, cancelled, or back in
// the queue when ctx ends.
func (w *Worker) run(ctx context.Context, l *farm.Lease) {
	job := l.Job
	jctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	w.mu.Lock()
	w.current, w.cancel = job.ID, cancel
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.current, w.cancel = "", nil
		w.mu.Unlock()
	}()
	log := w.log.With("job", job.ID)
	log.Info(fmt.Sprintf("job %s: started (attempt %d)", job.ID, job.Attempts))
	t0 := time.Now()

	var rep *reporter
	finished := make(chan error, 1)
	go func() {
		var res *framepack.Result
		var err error
		res, rep, err = w.generate(jctx, l, log)
		rep.wait()
		if err == nil {
			err = w.store(jctx, l, res, time.Since(t0))
		}
		finished <- err
	}()
	var err error
	select {
	case err = <-finished:
	case <-ctx.Done():
		// Stopping: the job stops at its next step, or else within the
		// grace; then it is queued again and goes on from its last
		// stored checkpoint, here or on another worker.
		select {
		case err = <-finished:
		case <-time.After(w.grace()):
			if rerr := l.Requeue(context.Background()); rerr != nil {
				log.Warn(fmt.Sprintf("job %s: putting it back in the queue: %v", job.ID, rerr))
			}
			log.Info(fmt.Sprintf("job %s: still running %s after the stop; queued again, to go on from its last checkpoint", job.ID, w.grace()))
			return
		}
	}
	if err == nil {
		log.Info(fmt.Sprintf("job %s: done in %s", job.ID, time.Since(t0).Round(time.Millisecond)))
		return
	}
	bg := context.Background()
	if w.cfg.Ranks != nil && rep.started {
		// The other ranks may be inside an exchange this rank left: only
		// a restart of every rank puts them back in step.
		w.fatal = fmt.Errorf("job %s stopped on rank 0 (%v): the processes on the other GPUs must start again with it", job.ID, ErrorText(err))
	}
	switch {
	case errors.Is(context.Cause(jctx), errCancelled):
		l.Finish(bg, nil, func(j *farm.Job) { j.Status = farm.Cancelled })
		log.Info(fmt.Sprintf("job %s: cancelled", job.ID))
	case ctx.Err() != nil || w.fatal != nil && !errors.Is(err, farm.ErrLost) && !errors.Is(context.Cause(jctx), farm.ErrLost):
		// Stopping: the job stays queued, checkpointed at its last section.
		if rerr := l.Requeue(bg); rerr != nil {
			log.Warn(fmt.Sprintf("job %s: putting it back in the queue: %v", job.ID, rerr))
		}
		log.Info(fmt.Sprintf("job %s: stopped; queued again, to go on after section %d", job.ID, rep.saved()))
	case errors.Is(err, farm.ErrLost) || errors.Is(context.Cause(jctx), farm.ErrLost):
		l.Release()
		log.Warn(fmt.Sprintf("job %s: another worker took it over; dropped here", job.ID))
	default:
		l.Finish(bg, nil, func(j *farm.Job) { j.Status, j.Error = farm.Failed, ErrorText(err) })
		log.Warn(fmt.Sprintf("job %s: failed: %s", job.ID, ErrorText(err)))
	}
}

// ErrorText is err's message without the "framepack: " each layer adds.
func ErrorText(err error) string {
	msg := err.Error()
	for {
		t := strings.TrimPrefix(msg, "framepack: ")
		t = strings.ReplaceAll(t, ": framepack: ", ": ")
		t = strings.TrimPrefix(t, "request: ")
		if t == msg {
			return msg
		}
		msg = t
	}
}

// generate runs the job's generation, from its checkpoint when it has one.
func (w *Worker) generate(ctx context.Context, l *farm.Lease, log *slog.Logger) (*framepack.Result, *reporter, error) {
	job := l.Job
	rep := newReporter(w, l, log)
	var start, end *section.RGB
	var err error
	if job.Video == nil {
		if start, err = w.image(ctx, job.ID, farm.FileImage); err != nil {
			return nil, rep, err
		}
	}
	if job.EndImage != nil {
		if end, err = w.image(ctx, job.ID, farm.FileEndImage); err != nil {
			return nil, rep, err
		}
	}
	req := Request(job.Settings, start, end)
	if job.Video != nil {
		if req.Video, err = w.video(ctx, job.ID, &req); err != nil {
			return nil, rep, err
		}
	}
	if err := req.Validate(); err != nil {
		return nil, rep, err
	}
	ckpt := job.File(farm.FileCheckpoint)
	if b, err := w.f.GetBytes(ctx, job.ID, ckpt); err == nil {
		c, err := framepack.UnmarshalCheckpoint(b)
		if err != nil {
			log.Warn(fmt.Sprintf("job %s: its checkpoint is unusable (%v); starting over", job.ID, err))
			ckpt = ""
		} else {
			req.Resume = c
			rep.resumed(c)
		}
	} else if errors.Is(err, farm.ErrNoFile) {
		ckpt = ""
	} else {
		return nil, rep, err
	}
	if _, err := l.Update(ctx, func(j *farm.Job) error {
		j.ResumedAt = 0
		if req.Resume != nil {
			j.ResumedAt = req.Resume.Section
		}
		return nil
	}); err != nil {
		return nil, rep, err
	}
	p, err := w.pipeline(job.Settings)
	if err != nil {
		return nil, rep, err
	}
	req.Progress = rep.progress
	if w.cfg.Ranks != nil {
		if err := w.cfg.Ranks.Start(ctx, job, ckpt); err != nil {
			return nil, rep, fmt.Errorf("starting the job on the other GPUs: %w", err)
		}
		rep.started = true
	}
	res, err := p.Generate(ctx, req)
	if err != nil && errors.Is(context.Cause(ctx), errCancelled) {
		err = errCancelled
	}
	if req.Resume != nil && err == nil {
		log.Info(fmt.Sprintf("job %s: resumed after section %d of %d", job.ID, req.Resume.Section, req.Resume.Sections))
	}
	return res, rep, err
}

// image reads and decodes one of the job's images.
func (w *Worker) image(ctx context.Context, id, name string) (*section.RGB, error) {
	b, err := w.f.GetBytes(ctx, id, name)
	if err != nil {
		return nil, err
	}
	img, err := section.DecodeImage(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("the %s: %w", strings.ReplaceAll(name, "_", " "), err)
	}
	return img, nil
}

// Request is the framepack request for settings s on the images given
// (start nil for a video job: the caller sets Video).
func Request(s farm.Settings, start, end *section.RGB) framepack.Request {
	r := framepack.DefaultRequest()
	r.RGB, r.EndRGB = start, end
	r.Prompt, r.NegativePrompt = s.Prompt, s.NegativePrompt
	r.Seed, r.Seconds, r.Steps, r.LatentWindowSize = s.Seed, s.Seconds, s.Steps, s.Window
	r.CFG, r.GS, r.RS, r.TeaCache = s.CFG, s.GS, s.RS, s.TeaCache
	r.Resolution, r.Model, r.PromptBlend, r.PosteriorMean = s.Resolution, s.Model, s.PromptBlend, s.PosteriorMean
	r.EmbedInterpolation, r.StartEmbedStrength = s.EmbedInterpolation, s.StartEmbedStrength
	r.Cache, r.CacheThreshold = s.Cache, s.CacheThreshold
	if s.MagCacheK != nil {
		r.MagCacheK = *s.MagCacheK
	}
	if s.MagCacheRetention != nil {
		r.MagCacheRetention = *s.MagCacheRetention
	}
	if s.VideoContextFrames != 0 {
		r.VideoContextFrames = s.VideoContextFrames
	}
	r.VideoNewOnly = s.NewOnly
	return r
}

// pipeline is a pipeline loaded with the job's LoRAs and preserved
// memory: the one loaded when they are the same, else a new one (the
// models load again).
func (w *Worker) pipeline(s farm.Settings) (*framepack.Pipeline, error) {
	opts := w.cfg.Options
	opts.Logger = w.log
	if s.Preserve != "" {
		p, err := memory.ParseSize(s.Preserve)
		if err != nil {
			return nil, fmt.Errorf("settings: preserve: %w", err)
		}
		opts.Preserve = p
	}
	for _, lr := range s.LoRA {
		path, err := LoRAPath(w.cfg.LoRADir, lr.Name)
		if err != nil {
			return nil, err
		}
		opts.LoRA = append(opts.LoRA, lora.File{Path: path, Scale: lr.Weight})
	}
	variant := s.Model
	if variant == "" {
		variant = framepack.ModelFramePack
	}
	if tr := w.cfg.Variants[variant]; tr != "" {
		opts.Transformer = tr
	}
	key, _ := json.Marshal([]any{opts.LoRA, opts.Preserve, opts.Transformer})
	if w.p != nil && w.pkey == string(key) {
		return w.p, nil
	}
	w.Close()
	p, err := framepack.Load(w.cfg.Models, opts)
	if err != nil {
		return nil, err
	}
	w.p, w.pkey = p, string(key)
	return p, nil
}

// LoRAPath is the file of LoRA name in dir: a .safetensors file directly
// in it (a name is never a path).
func LoRAPath(dir, name string) (string, error) {
	if dir == "" {
		return "", fmt.Errorf("LoRA %q: the server has no LoRA folder (--loras)", name)
	}
	if name == "" || name != filepath.Base(name) || strings.HasPrefix(name, ".") || !strings.HasSuffix(name, ".safetensors") {
		return "", fmt.Errorf("LoRA %q: not a .safetensors file name of the LoRA folder", name)
	}
	path := filepath.Join(dir, name)
	if st, err := os.Stat(path); err != nil || !st.Mode().IsRegular() {
		return "", fmt.Errorf("LoRA %q: not in the LoRA folder", name)
	}
	return path, nil
}

// LoRAs lists the .safetensors files of dir.
func LoRAs(dir string) []string {
	if dir == "" {
		return nil
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var names []string
	for _, e := range ents {
		if n := e.Name(); e.Type().IsRegular() && strings.HasSuffix(n, ".safetensors") && !strings.HasPrefix(n, ".") {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names
}

// store encodes and stores the finished video, its settings file and its
// thumbnail, then marks the job done and acknowledges it.
func (w *Worker) store(ctx context.Context, l *farm.Lease, res *framepack.Result, took time.Duration) error {
	job := l.Job
	sum := sha256.Sum256(res.Pix)
	r := &farm.Result{Frames: res.T, FPS: res.FPS, Width: res.W, Height: res.H, Seconds: float64(res.T) / float64(res.FPS),
		FramesSHA256: hex.EncodeToString(sum[:]), Generate: took.Seconds()}
	for _, st := range res.Sections {
		r.Sample += st.Sample.Seconds()
		r.Decode += st.Decode.Seconds()
	}
	// The comment tag holds the settings only, so that the same settings
	// make the same file.
	tag, _ := json.Marshal(job.Settings)
	mp4, err := encodeMP4(ctx, w.cfg.TempDir, res.Frames, res.FPS, job.Settings.CRF, string(tag))
	if err != nil {
		return err
	}
	vs := sha256.Sum256(mp4)
	r.VideoBytes, r.VideoSHA256 = int64(len(mp4)), hex.EncodeToString(vs[:])
	r.InputFrames = res.InputFrames
	set := map[string]any{"id": job.ID, "settings": job.Settings, "image": job.Image, "end_image": job.EndImage, "result": r,
		"worker": w.cfg.Name, "created": job.Created, "finished": time.Now().UTC()}
	if job.Video != nil {
		set["video"] = job.Video
	}
	for k, v := range w.cfg.Info {
		set[k] = v
	}
	sb, _ := json.MarshalIndent(set, "", "  ")
	thumb, err := thumbnail(res.Frames)
	if err != nil {
		return err
	}
	files := map[string]string{}
	for _, f := range []struct {
		name string
		b    []byte
	}{{farm.FileVideo, mp4}, {farm.FileSettings, append(sb, '\n')}, {farm.FileThumbnail, thumb}} {
		obj := l.FileName(f.name)
		if err := w.f.PutBytes(ctx, job.ID, obj, f.b); err != nil {
			return err
		}
		files[f.name] = obj
	}
	// One compare-and-set makes this run's video the job's: a worker that
	// lost the job meanwhile stores nothing that is used.
	if _, err := l.Finish(ctx, files, func(j *farm.Job) {
		j.Status, j.Result, j.Error = farm.Done, r, ""
		if j.Result != nil && j.Started != nil {
			j.Result.Generate = time.Since(*j.Started).Seconds()
		}
	}); err != nil {
		return err
	}
	return nil
}

// encodeMP4 writes frames as an MP4 through ffmpeg into a temporary file
// and returns its bytes.
func encodeMP4(ctx context.Context, dir string, f video.Frames, fps, crf int, comment string) ([]byte, error) {
	tmp, err := os.MkdirTemp(dir, "framepack-video-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	if crf == 0 {
		crf = video.CRFZero
	}
	path := filepath.Join(tmp, "video.mp4")
	if err := video.WriteMP4(ctx, path, f, video.Options{FPS: fps, CRF: crf, Comment: comment}); err != nil {
		return nil, err
	}
	return os.ReadFile(path)
}

// thumbnail is the video's middle frame, at most 320 pixels wide, as PNG.
func thumbnail(f video.Frames) ([]byte, error) {
	src := f.Frame(f.T / 2)
	w, h := f.W, f.H
	if w > 320 {
		w, h = 320, max(1, f.H*320/f.W)
	}
	dst := image.NewNRGBA(image.Rect(0, 0, w, h))
	draw.ApproxBiLinear.Scale(dst, dst.Bounds(), src, src.Bounds(), draw.Src, nil)
	var b bytes.Buffer
	if err := png.Encode(&b, dst); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// samePreserve tells whether a job's preserve setting is the size p.
func samePreserve(setting string, p memory.Size) bool {
	z, err := memory.ParseSize(setting)
	return err == nil && z.Same(p)
}
