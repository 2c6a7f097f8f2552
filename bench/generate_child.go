package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/framepack-go/framepack"
	"github.com/framepack-go/framepack/memory"
	"github.com/framepack-go/framepack/section"
	"github.com/framepack-go/framepack/video"
)

// ChildRun is the one run of a child process (bench generate --child and
// its hidden flags).
type ChildRun struct {
	Mode     string // nocap, or a --vram-limit
	TeaCache bool   // TeaCache, without Cache
	Cache    string // the step cache
	Model    string // the model variant
	Video    string // the video to write
	// Dump, when set, gets the final latents and frames (Dump + .latents,
	// .frames) for the parent to compare runs.
	Dump string
}

// GenerateChild runs one job in this process, from its start to the
// written video, and prints its line. join puts this process's GPU and
// communicator into the load options when it is one rank of several (one
// process per GPU); rank 0 writes and prints, the others only compute.
func GenerateChild(ctx context.Context, w io.Writer, o GenerateOptions, c ChildRun, join func(*framepack.Options) error) error {
	start, err := processStart()
	if err != nil {
		return fmt.Errorf("bench generate: %w", err)
	}
	if c.Video == "" {
		return errors.New("bench generate --child: no --video path")
	}
	ct := &compileTimer{Handler: slog.Default().Handler(), secs: new(compileSecs)}
	log := slog.New(ct)
	img, err := section.LoadImage(o.Image)
	if err != nil {
		return err
	}
	opts, err := childLoadOptions(&o, &c, log)
	if err != nil {
		return err
	}
	if join != nil {
		if err := join(&opts); err != nil {
			return err
		}
	}
	t := time.Now()
	beforeLoad := t.Sub(start)
	p, err := framepack.Load(o.Models, opts)
	if err != nil {
		return err
	}
	defer p.Close()
	loadPipeline := time.Since(t)
	req, err := childRequest(&o, &c, img)
	if err != nil {
		return err
	}
	res, err := p.Generate(ctx, req)
	if err != nil {
		return err
	}
	if opts.Ranks != nil && opts.Ranks.Rank != 0 { // rank 0 decodes, writes and reports
		return nil
	}
	t = time.Now()
	wrote, err := video.Write(ctx, c.Video, res.Frames, video.Options{FPS: res.FPS, Log: log})
	if err != nil {
		return err
	}
	end := time.Now()
	if c.Dump != "" {
		if err := writeDump(c.Dump, res); err != nil {
			return fmt.Errorf("bench generate: %w", err)
		}
	}
	gpus := 1
	if opts.Ranks != nil {
		gpus = opts.Ranks.Size // device_peak_gib and rss_peak_gib are rank 0's
	}
	r := genResult(res, o.Steps, gpus, loadPipeline, end.Sub(t))
	childKeys(r, &o, &c, req, p)
	r["total_s"] = end.Sub(start).Seconds()
	stages := 0.0
	for _, k := range []string{"load_s", "text_s", "image_s", "sample_s", "decode_s", "write_s"} {
		stages += r[k].(float64)
	}
	r["other_s"] = r["total_s"].(float64) - stages
	// Where other_s lies: before framepack.Load (process start, the image),
	// Load itself (device, libraries, configs; its model loads are in
	// load_s), and Generate's time outside its stages.
	r["before_load_s"] = beforeLoad.Seconds()
	r["pipeline_load_s"] = loadPipeline.Seconds()
	r["generate_s"] = res.Total.Seconds()
	r["compile_s"] = ct.secs.get()
	r["output"] = "mp4"
	if filepath.Ext(wrote) != ".mp4" {
		r["output"] = "png" // no ffmpeg: PNG frames (video.Write's fallback)
	}
	return Print(w, r)
}

// childLoadOptions are Load's options for the run: the mode's
// --vram-limit, the --preserve, the weights.
func childLoadOptions(o *GenerateOptions, c *ChildRun, log *slog.Logger) (framepack.Options, error) {
	opts := framepack.Options{Device: o.Device, Preserve: o.Preserve, Logger: log, FP8Weights: o.Weights == "fp8",
		FP8Attention: o.FP8Attention}
	var err error
	if opts.FP8Compute, err = framepack.ParseFP8Compute(o.FP8Compute); err != nil {
		return opts, fmt.Errorf("bench generate: --fp8-compute: %w", err)
	}
	if o.Weights != "" && o.Weights != "fp8" {
		return opts, fmt.Errorf("bench generate: --weights %q: want fp8 or nothing", o.Weights)
	}
	if c.Mode != "nocap" {
		if opts.VRAMLimit, err = memory.ParseSize(c.Mode); err != nil {
			return opts, fmt.Errorf("bench generate: --mode: %w", err)
		}
	}
	return opts, nil
}

// childRequest is the run's job.
func childRequest(o *GenerateOptions, c *ChildRun, img *section.RGB) (framepack.Request, error) {
	req := framepack.DefaultRequest()
	req.RGB = img
	req.Prompt = o.Prompt
	req.Seconds, req.Resolution, req.Steps, req.LatentWindowSize, req.Seed = o.Seconds, o.Resolution, o.Steps, o.Window, o.Seed
	req.TeaCache = c.TeaCache
	req.Cache, req.Model = c.Cache, c.Model
	req.CacheThreshold, req.MagCacheK, req.MagCacheRetention = o.CacheThreshold, o.MagCacheK, o.MagCacheRetention
	req.CFG = o.CFG
	if err := req.Validate(); err != nil {
		return req, fmt.Errorf("bench generate: %w", err)
	}
	return req, nil
}

// childKeys are the run's settings and the device in its line.
func childKeys(r Result, o *GenerateOptions, c *ChildRun, req framepack.Request, p *framepack.Pipeline) {
	r["mode"], r["teacache"], r["cfg"] = c.Mode, req.CacheChoice() == framepack.CacheTeaCache, o.CFG
	r["cache"], r["model"] = req.CacheChoice(), req.Model
	if req.CacheChoice() != framepack.CacheNone {
		r["cache_threshold"] = req.CacheThreshold // 0: the cache's default
	}
	if req.CacheChoice() == framepack.CacheMagCache {
		r["magcache_k"], r["magcache_retention"] = req.MagCacheK, req.MagCacheRetention
	}
	r["weights"], r["fp8_compute"], r["fp8_attention"] = o.Weights, p.FP8Compute(), o.FP8Attention
	r["seconds"], r["steps"] = o.Seconds, o.Steps
	r["device"] = p.Device()
	r["pid"] = os.Getpid()
	r["budget_cap_gib"] = gib(p.Budget().Cap)
	r["rss_peak_gib"] = gib(processPeakRSS(os.Getpid())) // 0 where /proc has no VmHWM
}

// compileSecs adds up seconds from several goroutines.
type compileSecs struct {
	mu sync.Mutex
	s  float64
}

func (c *compileSecs) add(s float64) {
	c.mu.Lock()
	c.s += s
	c.mu.Unlock()
}

func (c *compileSecs) get() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.s
}

// compileTimer passes log records on, adding up the seconds of the GPU
// backend's "compiled kernels" lines (the backend reports compile time
// only there).
type compileTimer struct {
	slog.Handler
	secs *compileSecs
}

func (h *compileTimer) Handle(ctx context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, "gpu: compiled kernels") {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "seconds" {
				switch a.Value.Kind() {
				case slog.KindFloat64:
					h.secs.add(a.Value.Float64())
				case slog.KindInt64:
					h.secs.add(float64(a.Value.Int64()))
				}
			}
			return true
		})
	}
	return h.Handler.Handle(ctx, r)
}

func (h *compileTimer) WithAttrs(as []slog.Attr) slog.Handler {
	return &compileTimer{h.Handler.WithAttrs(as), h.secs}
}

func (h *compileTimer) WithGroup(name string) slog.Handler {
	return &compileTimer{h.Handler.WithGroup(name), h.secs}
}
