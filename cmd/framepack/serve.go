package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/framepack-go/framepack/tinymodel"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/framepack-go/framepack"
	"github.com/framepack-go/framepack/farm"
	"github.com/framepack-go/framepack/internal/device"
	"github.com/framepack-go/framepack/memory"
	"github.com/framepack-go/framepack/serve"
	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/vae"
	"github.com/framepack-go/framepack/video"
	"github.com/framepack-go/framepack/worker"
)

// serveFlags are `framepack serve`'s options.
type serveFlags struct {
	models, listen, data, nats, token, loras string
	device, dtype, weightsMode, fp8Compute   string
	fp8Attention                             bool
	vramLimit, preserve, ramLimit            memory.Size
	vaeTile                                  int
	workers, maxQueued                       int
	maxUpload, maxStorage                    memory.Size
	ackWait                                  time.Duration
	natsAuth                                 natsFlags
}

func newServe() *cobra.Command {
	f := &serveFlags{}
	cmd := &cobra.Command{
		Use:   "serve [--models DIR] [--listen 127.0.0.1:7860] [--data DIR] [--nats URL] [--token T]",
		Short: "Serve FramePack's page and an HTTP API over a durable job queue",
		Long: `Serve a web page and an HTTP API (OpenAPI 3 at /api/openapi.json) to make videos: upload an
image, set the prompt and the settings, and follow the job live — section and step, the latent
preview at every step, the video so far after every section. Jobs wait in a queue (cancel them,
move them up), finished videos stay in a history with their settings. The models load once and
stay loaded between jobs.

The queue, the job states and the files (uploads, checkpoints, videos) live in NATS JetStream:
by default a server embedded in this process, storing under --data; with --nats, an external
server or cluster, which other framepack processes can share. After every section a job is
checkpointed; a server killed in the middle of a job goes on from its last finished section when
started again, and makes the same video. SIGINT or SIGTERM checkpoints the running job, leaves
it queued and exits.

It listens on loopback unless --listen says otherwise, which needs --token (or FRAMEPACK_TOKEN):
every API call must then send "Authorization: Bearer TOKEN"; open the page as
http://HOST:PORT/#token=TOKEN. Without --models (or FRAMEPACK_MODELS) the built-in tiny model
runs: the videos are noise, and the page says so.`,
		Example: `  framepack serve
  framepack serve --models ~/models/framepack --loras ~/models/loras
  FRAMEPACK_TOKEN=$(cat token) framepack serve --listen 0.0.0.0:7860 --models ~/models/framepack`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runServe(cmd.Context(), cmd, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.models, "models", "", "model folder (default $FRAMEPACK_MODELS, else the built-in tiny model)")
	fl.StringVar(&f.listen, "listen", "127.0.0.1:7860", "address to serve on; a non-loopback one needs --token")
	fl.StringVar(&f.data, "data", "", "folder of the embedded NATS server's files: the queue, the history, the videos (default $XDG_DATA_HOME/framepack)")
	fl.StringVar(&f.nats, "nats", "", "use this external NATS server or cluster (nats://host:4222[,…]) instead of the embedded one")
	fl.StringVar(&f.token, "token", "", "API token required of every request (default $FRAMEPACK_TOKEN); needed to listen beyond loopback")
	fl.StringVar(&f.loras, "loras", "", "folder of HunyuanVideo LoRA .safetensors files that jobs may use")
	fl.IntVar(&f.workers, "workers", 1, "jobs this process runs at a time: 1, or 0 to serve the page and the API only")
	fl.IntVar(&f.maxQueued, "max-queued", 100, "most jobs waiting in the queue; more are refused")
	f.maxUpload, f.maxStorage = mustSize("32M"), mustSize("20G")
	fl.Var(&f.maxUpload, "max-upload", "largest submission (its images and settings)")
	fl.Var(&f.maxStorage, "max-storage", "most bytes of uploads, videos and checkpoints stored; submissions are refused beyond")
	fl.DurationVar(&f.ackWait, "ack-wait", farm.DefaultAckWait, "how long a job stays with a worker that stopped answering before another takes it (with --nats: the queue's own unless given)")
	addEngineFlags(fl, f)
	f.natsAuth.add(fl)
	return cmd
}

// addEngineFlags adds the flags that choose the device and its memory,
// which serve and worker share.
func addEngineFlags(fl *pflag.FlagSet, f *serveFlags) {
	fl.StringVar(&f.device, "device", framepack.DeviceAuto, "auto, cpu or gpu")
	fl.StringVar(&f.dtype, "dtype", "", "compute dtype f32, bf16 or f16 (default: f32 on the CPU; bf16 transformer, f16 others on a GPU)")
	fl.StringVar(&f.weightsMode, "weights", "", "transformer block weights: empty for the compute dtype, or fp8")
	fl.StringVar(&f.fp8Compute, "fp8-compute", "auto", "with --weights fp8: on, off or auto")
	fl.BoolVar(&f.fp8Attention, "fp8-attention", false, "let the transformer's attention run in FP8 where the GPU has an engine for it")
	vramLimitVar(fl, &f.vramLimit, `hard cap on device memory ("20G", "90%")`)
	preserveVar(fl, &f.preserve, `memory kept free for activations while weights stream (default 6G); a job's "preserve" setting overrides it`)
	ramLimitVar(fl, &f.ramLimit, `host memory budget ("16G", "50%")`)
	fl.IntVar(&f.vaeTile, "vae-tile", 0, "decode in spatial tiles of this many pixels (0: planned from the budget)")
}

// dataDir is --data, else $XDG_DATA_HOME/framepack, else
// ~/.local/share/framepack.
func (f *serveFlags) dataDir() (string, error) {
	if f.data != "" {
		return f.data, nil
	}
	if x := os.Getenv("XDG_DATA_HOME"); x != "" {
		return filepath.Join(x, "framepack"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", usagef("--data: no home folder to default to (%v); give --data", err)
	}
	return filepath.Join(home, ".local", "share", "framepack"), nil
}

// check validates the flags before anything starts.
func (f *serveFlags) check() (maxUpload, maxStorage int64, err error) {
	if f.token == "" {
		f.token = os.Getenv("FRAMEPACK_TOKEN")
	}
	host, _, err := net.SplitHostPort(f.listen)
	if err != nil {
		return 0, 0, usagef("--listen %q: want HOST:PORT (%v)", f.listen, err)
	}
	if !loopbackListen(host) && f.token == "" {
		return 0, 0, usagef("--listen %s is reachable from other machines: give --token (or FRAMEPACK_TOKEN) so that only those who have it can use the server", f.listen)
	}
	if f.nats != "" {
		if err := farm.CheckURL(f.nats); err != nil {
			return 0, 0, usage(err)
		}
	}
	if f.workers < 0 || f.workers > 1 {
		return 0, 0, usagef("--workers %d: want 1, or 0 to serve the API only", f.workers)
	}
	if f.maxQueued < 1 {
		return 0, 0, usagef("--max-queued %d: want at least 1", f.maxQueued)
	}
	var ok bool
	if maxUpload, ok = f.maxUpload.Fixed(); !ok || maxUpload < 1<<10 {
		return 0, 0, usagef("--max-upload %q: want a size of at least 1K", f.maxUpload)
	}
	if maxStorage, ok = f.maxStorage.Fixed(); !ok || maxStorage < 1<<20 {
		return 0, 0, usagef("--max-storage %q: want a size of at least 1M", f.maxStorage)
	}
	if f.ackWait < time.Second {
		return 0, 0, usagef("--ack-wait %s: want at least 1s", f.ackWait)
	}
	if err := f.checkEngine(); err != nil {
		return 0, 0, err
	}
	if f.models != "" {
		if st, err := os.Stat(f.models); err != nil || !st.IsDir() {
			return 0, 0, usagef("--models %s: the folder does not exist", f.models)
		}
	}
	if f.loras != "" {
		if st, err := os.Stat(f.loras); err != nil || !st.IsDir() {
			return 0, 0, usagef("--loras %s: the folder does not exist", f.loras)
		}
	}
	if f.workers > 0 && !video.HaveFFmpeg() {
		return 0, 0, errors.New("serve writes MP4s through ffmpeg, which is not installed (run scripts/setup.sh)")
	}
	return maxUpload, maxStorage, nil
}

// checkEngine checks the device and memory flags.
func (f *serveFlags) checkEngine() error {
	if _, err := device.ParseChoice(f.device); err != nil {
		return usage(err)
	}
	if f.dtype != "" {
		if _, err := tensor.ParseDType(f.dtype); err != nil {
			return usagef("--dtype: %v", err)
		}
	}
	if f.weightsMode != "" && f.weightsMode != "fp8" {
		return usagef("--weights %q: want fp8 or nothing", f.weightsMode)
	}
	if _, err := framepack.ParseFP8Compute(f.fp8Compute); err != nil {
		return usagef("--fp8-compute: %v", err)
	}
	if f.vaeTile != 0 && (f.vaeTile < 32 || f.vaeTile%32 != 0) {
		return usagef("--vae-tile %d: want a multiple of 32, at least 32", f.vaeTile)
	}
	return nil
}

// loopbackListen tells whether a --listen host is loopback only.
func loopbackListen(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// loadOptions are framepack.Load's options from the flags.
func (f *serveFlags) loadOptions(log *slog.Logger) framepack.Options {
	opts := framepack.Options{Device: f.device, VRAMLimit: f.vramLimit, Preserve: f.preserve, RAMLimit: f.ramLimit, Logger: log,
		FP8Weights: f.weightsMode == "fp8", FP8Attention: f.fp8Attention}
	if f.dtype != "" {
		opts.DType, _ = tensor.ParseDType(f.dtype)
	}
	opts.FP8Compute, _ = framepack.ParseFP8Compute(f.fp8Compute)
	if f.vaeTile > 0 {
		til := vae.SpatialTiling(f.vaeTile, f.vaeTile*3/4)
		opts.VAETiling = &til
	}
	return opts
}

// defaultSettings are a job's settings before its own: FramePack's demo's.
func defaultSettings(tiny bool) farm.Settings {
	r := framepack.DefaultRequest()
	s := farm.Settings{Seed: r.Seed, Seconds: r.Seconds, Steps: r.Steps, Window: r.LatentWindowSize, CFG: r.CFG, GS: r.GS, RS: r.RS,
		TeaCache: r.TeaCache, Resolution: r.Resolution, Model: framepack.ModelFramePack, PromptBlend: r.PromptBlend,
		StartEmbedStrength: r.StartEmbedStrength, CRF: video.DefaultCRF}
	if tiny {
		s.Resolution = tinymodel.Resolution
	}
	return s
}

func runServe(ctx context.Context, cmd *cobra.Command, f *serveFlags) error {
	if ctx == nil {
		ctx = context.Background()
	}
	log := slog.Default()
	maxUpload, maxStorage, err := f.check()
	if err != nil {
		return err
	}
	dir, model, tiny, cleanup, err := f.modelDir(log)
	if err != nil {
		return err
	}
	defer cleanup()
	data := ""
	if f.nats == "" {
		if data, err = f.dataDir(); err != nil {
			return err
		}
		if err := os.MkdirAll(data, 0o700); err != nil {
			return fmt.Errorf("--data: %w", err)
		}
	}
	// The listener first: a port in use fails before anything loads.
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return fmt.Errorf("--listen %s: %w", f.listen, err)
	}
	defer ln.Close()

	fcfg := farm.Config{DataDir: data, MaxStoredBytes: maxStorage, MaxQueued: 10 * f.maxQueued, Log: log}
	if f.nats != "" {
		if fcfg.URL, fcfg.Options, err = f.natsAuth.options(f.nats); err != nil {
			return err
		}
		fcfg.Replicas = f.natsAuth.replicas
		if cmd.Flags().Changed("ack-wait") {
			fcfg.AckWait = f.ackWait // else the consumer's, where it exists
		}
	} else {
		fcfg.AckWait = f.ackWait
	}
	fm, err := farm.Open(ctx, fcfg)
	if err != nil {
		return err
	}
	defer fm.Close()
	if n, err := fm.Reconcile(ctx); err != nil {
		log.Warn("serve: checking the queue: " + err.Error())
	} else if n > 0 {
		log.Info(fmt.Sprintf("serve: queued %d jobs again that had no queue message", n))
	}
	srv, err := serve.New(serve.Config{Farm: fm, Token: f.token, LoopbackOnly: f.token == "", Defaults: defaultSettings(tiny),
		TinyModel: tiny, Model: model, Device: f.device, LoRADir: f.loras, MaxUpload: maxUpload, MaxQueued: f.maxQueued,
		Workers: f.workers, Version: versionLine(), Log: log})
	if err != nil {
		return err
	}
	defer srv.Close()
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()

	wctx, stopWorker := context.WithCancel(ctx)
	defer stopWorker()
	wg, err := f.startWorker(wctx, fm, dir, model, tiny, data, log)
	if err != nil {
		return err
	}
	url := "http://" + ln.Addr().String() + "/"
	what := "the models in " + model
	if tiny {
		what = "the built-in tiny model"
	}
	fmt.Fprintf(cmd.OutOrStdout(), "framepack serve: %s with %s (data %s)\n", url, what, dataWhere(data, f.nats))
	log.Info("serve: listening on " + url)

	select {
	case <-ctx.Done():
	case err := <-served:
		stopWorker()
		wg.Wait()
		return fmt.Errorf("serving: %w", err)
	}
	stopServing(hs, stopWorker, wg, log)
	return nil
}

// modelDir is the model folder the worker loads (--models, else
// $FRAMEPACK_MODELS, else the built-in tiny model, unpacked when a worker
// runs) and how the page names it; cleanup removes what it unpacked.
func (f *serveFlags) modelDir(log *slog.Logger) (dir, model string, tiny bool, cleanup func(), err error) {
	dir = f.models
	if dir == "" {
		dir = os.Getenv("FRAMEPACK_MODELS")
	}
	tiny, model, cleanup = dir == "", dir, func() {}
	if tiny && f.workers > 0 {
		if dir, cleanup, err = tinyModel(log, fmt.Sprintf(" at --resolution %d by default", tinymodel.Resolution)); err != nil {
			return "", "", false, nil, err
		}
		model = "the built-in tiny model (random weights: every stage runs, the videos are noise)"
	}
	return dir, model, tiny, cleanup, nil
}

// startWorker starts this process's worker when --workers is 1; the group
// ends when it has stopped.
func (f *serveFlags) startWorker(ctx context.Context, fm *farm.Farm, dir, model string, tiny bool, data string, log *slog.Logger) (*sync.WaitGroup, error) {
	var wg sync.WaitGroup
	if f.workers == 0 {
		return &wg, nil
	}
	tmp := filepath.Join(os.TempDir())
	if data != "" {
		tmp = filepath.Join(data, "tmp")
		os.RemoveAll(tmp)
		if err := os.MkdirAll(tmp, 0o700); err != nil {
			return nil, err
		}
	}
	// A stopping job gets 600 ms to reach its next step before it is
	// queued again as it stands, so the process exits within 2 s.
	w := worker.New(fm, worker.Config{Name: hostName(), Models: dir, Options: f.loadOptions(log), LoRADir: f.loras, TempDir: tmp,
		StopGrace: 600 * time.Millisecond, Fit: true, Announce: true,
		Info: map[string]any{"framepack": readBuildVersion(), "models": model, "tiny_model": tiny}, Log: log})
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := w.Run(ctx); err != nil {
			log.Error("serve: the worker stopped: " + err.Error())
		}
		// The models are not freed here: a job abandoned at the stop
		// may still hold them until the process exits.
	}()
	return &wg, nil
}

// stopServing stops the worker (its running job is checkpointed and
// queued again) and the server (the connections, event streams included,
// close).
func stopServing(hs *http.Server, stopWorker func(), wg *sync.WaitGroup, log *slog.Logger) {
	t := time.Now()
	stopWorker()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Second):
		log.Warn("serve: the worker did not stop within 1 s; its job goes on from its last checkpoint at the next start")
	}
	sctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	hs.Shutdown(sctx)
	hs.Close()
	log.Info(fmt.Sprintf("serve: stopped in %s", time.Since(t).Round(time.Millisecond)))
}

func dataWhere(data, nats string) string {
	if nats != "" {
		return "in NATS at " + nats
	}
	return data
}

func hostName() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "framepack"
	}
	return h
}
