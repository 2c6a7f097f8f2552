package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/framepack-go/framepack"
	"github.com/framepack-go/framepack/farm"
	"github.com/framepack-go/framepack/internal/launch"
	"github.com/framepack-go/framepack/video"
	"github.com/framepack-go/framepack/worker"
)

// natsFlags are the options to reach an external NATS server or cluster,
// which serve and worker share. Secrets are files or the environment.
type natsFlags struct {
	farm.Auth
	replicas int
}

func (n *natsFlags) add(fl *pflag.FlagSet) {
	fl.StringVar(&n.User, "nats-user", "", "NATS user (default $NATS_USER, or the user of a nats://USER@host URL); the password comes from $NATS_PASSWORD or --nats-password-file")
	fl.StringVar(&n.PasswordFile, "nats-password-file", "", "file holding the NATS user's password")
	fl.StringVar(&n.TokenFile, "nats-token-file", "", "file holding a NATS token (default $NATS_TOKEN)")
	fl.StringVar(&n.NKeyFile, "nats-nkey", "", "NATS nkey seed file (default $NATS_NKEY)")
	fl.StringVar(&n.CredsFile, "nats-creds", "", "NATS credentials file, a user JWT and its seed (default $NATS_CREDS)")
	fl.StringVar(&n.TLSCA, "nats-tls-ca", "", "CA certificate that signed the NATS servers' certificates (PEM)")
	fl.StringVar(&n.TLSCert, "nats-tls-cert", "", "client certificate for NATS servers that ask for one (PEM; with --nats-tls-key)")
	fl.StringVar(&n.TLSKey, "nats-tls-key", "", "the client certificate's key (PEM)")
	fl.IntVar(&n.replicas, "replicas", 0, "servers of the NATS cluster that keep each job, state and file (0: 3 when the cluster has 3 servers or more, else 1)")
}

// options are the farm's URL and NATS options for the server URLs urls.
func (n *natsFlags) options(urls string) (string, []nats.Option, error) {
	dial, opts, err := n.Auth.Options(urls)
	if err != nil {
		return "", nil, usage(err)
	}
	if n.replicas < 0 || n.replicas > 5 {
		return "", nil, usagef("--replicas %d: want 0 to 5", n.replicas)
	}
	return dial, opts, nil
}

// workerFlags are `framepack worker`'s options: serve's engine flags, and
// who the worker is.
type workerFlags struct {
	serveFlags
	name, variants, gpus, rankGroup, temp string
}

func newWorker() *cobra.Command {
	f := &workerFlags{}
	cmd := &cobra.Command{
		Use:   "worker --nats URL[,URL…] [--models DIR] [--gpus …] [--name N]",
		Short: "Run jobs from a shared queue on NATS JetStream, with the models loaded once",
		Long: `Take jobs from the queue that framepack serve --nats fills (a NATS JetStream server or cluster,
shared by any number of workers on any number of machines), run them with the models loaded once,
and store their videos there. After every section a job is checkpointed; a worker that dies
(SIGKILL, power, network) leaves its job to another, which goes on from its last finished section
after the queue's ack wait (30 s unless --ack-wait sets it) and makes the same video.

A worker takes only the jobs it can run: the transformer variant it has (--model), the LoRAs in its
--loras folder, and a resolution and length that fit its memory budget; it leaves the others to
other workers, and records why in the job's state. While it runs it announces itself (its name,
its device and what it can run) in the farm's list of live workers (GET /api/workers of serve).
With --gpus naming several GPUs it runs each job on all of them (one process per GPU, sequence
parallel). SIGINT or SIGTERM checkpoints the running job, leaves it queued and exits.

The NATS credentials come from files or the environment, never the command line: a user with
$NATS_PASSWORD (or --nats-password-file), a token ($NATS_TOKEN), an nkey or a creds file, and TLS
(--nats-tls-ca, and a client certificate where the servers ask for one). See docs/cluster.md.`,
		Example: `  framepack worker --nats nats://queue1:4222,nats://queue2:4222,nats://queue3:4222 --models ~/models/framepack
  NATS_PASSWORD=$(cat pw) framepack worker --nats tls://gpu@queue1:4222 --nats-tls-ca ca.pem --gpus 0,1 --name box1-gpus01`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return runWorker(cmd.Context(), cmd, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.nats, "nats", "", "the NATS server or cluster holding the queue: nats://host:4222[,nats://host2:4222…] (required)")
	fl.StringVar(&f.models, "models", "", "model folder, or a Hugging Face hub cache (default $FRAMEPACK_MODELS, else the built-in tiny model)")
	fl.StringVar(&f.variants, "model", "", "the transformer variants this worker runs, framepack and/or f1 (default: framepack for a model folder, every one a hub cache holds, any for the tiny model)")
	fl.StringVar(&f.loras, "loras", "", "folder of HunyuanVideo LoRA .safetensors files that jobs may use")
	fl.StringVar(&f.name, "name", "", "this worker's name in the jobs it runs and the live workers (default: the host name, with the GPUs)")
	fl.StringVar(&f.gpus, "gpus", "", "GPUs to run each job on, one process each: a count (2: GPUs 0 and 1) or ordinals (0,2)")
	fl.DurationVar(&f.ackWait, "ack-wait", 0, "set the queue's ack wait: how long a job stays with a worker that stopped answering (default: the queue's own, 30 s when this makes it)")
	fl.StringVar(&f.temp, "temp", "", "folder for the videos being encoded (default: the system's temporary folder)")
	fl.StringVar(&f.rankGroup, "rank-group", "", "")
	fl.MarkHidden("rank-group")
	addEngineFlags(fl, &f.serveFlags)
	f.natsAuth.add(fl)
	return cmd
}

// check validates the flags before anything starts.
func (f *workerFlags) check() error {
	if f.nats == "" {
		return usagef("--nats is required: the NATS server or cluster holding the queue (nats://host:4222)")
	}
	if err := farm.CheckURL(f.nats); err != nil {
		return usage(err)
	}
	if f.name != "" {
		if err := farm.ValidWorkerName(f.name); err != nil {
			return usagef("--name: %v", err)
		}
	}
	if err := f.checkEngine(); err != nil {
		return err
	}
	for _, v := range f.variantList() {
		if v != framepack.ModelFramePack && v != framepack.ModelF1 {
			return usagef("--model %q: want framepack, f1 or both (framepack,f1)", f.variants)
		}
	}
	if f.models != "" {
		if st, err := os.Stat(f.models); err != nil || !st.IsDir() {
			return usagef("--models %s: the folder does not exist", f.models)
		}
	}
	if f.loras != "" {
		if st, err := os.Stat(f.loras); err != nil || !st.IsDir() {
			return usagef("--loras %s: the folder does not exist", f.loras)
		}
	}
	if !video.HaveFFmpeg() {
		return fmt.Errorf("worker writes MP4s through ffmpeg, which is not installed (run scripts/setup.sh)")
	}
	return nil
}

func (f *workerFlags) variantList() []string {
	var list []string
	for _, v := range strings.Split(f.variants, ",") {
		if v = strings.TrimSpace(v); v != "" && !slices.Contains(list, v) {
			list = append(list, v)
		}
	}
	return list
}

// variantMap is worker.Config.Variants for the model folder dir.
func (f *workerFlags) variantMap(dir string, tiny bool) (map[string]string, error) {
	list := f.variantList()
	switch {
	case tiny && len(list) == 0:
		return nil, nil // the tiny transformer stands for both
	case tiny:
		m := map[string]string{}
		for _, v := range list {
			m[v] = ""
		}
		return m, nil
	case framepack.IsHubCache(dir):
		m := map[string]string{}
		for _, v := range []string{framepack.ModelFramePack, framepack.ModelF1} {
			parts, err := framepack.HubCacheParts(dir, v)
			if err == nil {
				m[v] = parts[framepack.PartTransformer]
			} else if slices.Contains(list, v) {
				return nil, usage(fmt.Errorf("--model %s: %w", v, err))
			}
		}
		if len(list) > 0 {
			for v := range m {
				if !slices.Contains(list, v) {
					delete(m, v)
				}
			}
		}
		if len(m) == 0 {
			return nil, usagef("--models %s: the hub cache holds no FramePack transformer", dir)
		}
		return m, nil
	}
	if len(list) > 1 {
		return nil, usagef("--model %s: a model folder holds one transformer; run the other variant from a hub cache, or on another worker", f.variants)
	}
	if len(list) == 0 {
		list = []string{framepack.ModelFramePack}
	}
	return map[string]string{list[0]: ""}, nil
}

func runWorker(ctx context.Context, cmd *cobra.Command, f *workerFlags) error {
	if ctx == nil {
		ctx = context.Background()
	}
	log := slog.Default()
	if err := f.check(); err != nil {
		return err
	}
	if f.rankGroup == "" {
		var b [8]byte
		rand.Read(b[:])
		f.rankGroup = hex.EncodeToString(b[:])
	}
	if supervised, err := superviseGPUs(ctx, cmd, f.gpus, "--rank-group", f.rankGroup); supervised {
		return err
	}
	rank, _ := thisRank()
	dir := f.models
	if dir == "" {
		dir = os.Getenv("FRAMEPACK_MODELS")
	}
	tiny := dir == ""
	model := dir
	if tiny {
		tdir, cleanup, err := tinyModel(log, "")
		if err != nil {
			return err
		}
		defer cleanup()
		dir, model = tdir, "the built-in tiny model"
	}
	variants, err := f.variantMap(dir, tiny)
	if err != nil {
		return err
	}
	url, opts, err := f.natsAuth.options(f.nats)
	if err != nil {
		return err
	}
	fcfg := farm.Config{URL: url, Options: opts, Replicas: f.natsAuth.replicas, Log: log}
	if cmd.Flags().Changed("ack-wait") {
		if f.ackWait < time.Second {
			return usagef("--ack-wait %s: want at least 1s", f.ackWait)
		}
		fcfg.AckWait = f.ackWait
	}
	fm, err := farm.Open(ctx, fcfg)
	if err != nil {
		return err
	}
	defer fm.Close()
	lopts := f.loadOptions(log)
	if err := rankOptions(&lopts); err != nil {
		return err
	}
	if framepack.IsHubCache(dir) {
		// The first variant's transformer; the others load as jobs need them.
		for _, v := range []string{framepack.ModelFramePack, framepack.ModelF1} {
			if tr, ok := variants[v]; ok {
				lopts.Transformer = tr
				break
			}
		}
	}
	if rank != nil && rank.Rank > 0 {
		// A follower: its share of each job rank 0 starts.
		fw, err := worker.NewFollower(fm, f.rankGroup, log)
		if err != nil {
			return err
		}
		p, err := framepack.Load(dir, lopts)
		if err != nil {
			return err
		}
		defer p.Close()
		return fw.Run(ctx, p)
	}
	name := f.name
	if name == "" {
		name = hostName()
		if f.gpus != "" {
			name += "-gpu" + strings.ReplaceAll(f.gpus, ",", "-")
		}
	}
	tmp, err := os.MkdirTemp(f.temp, "framepack-worker-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	cfg := worker.Config{Name: name, Models: dir, Options: lopts, LoRADir: f.loras, TempDir: tmp, StopGrace: 600 * time.Millisecond,
		Variants: variants, Fit: true, Announce: true,
		Info: map[string]any{"framepack": readBuildVersion().String(), "models": model, "tiny_model": tiny}, Log: log}
	if rank != nil {
		list, _ := launch.ParseGPUs(f.gpus)
		cfg.GPUs = list
		cfg.Ranks = worker.NewRanks(fm, f.rankGroup, rank.Size)
	} else if f.gpus != "" {
		cfg.GPUs, _ = launch.ParseGPUs(f.gpus)
	}
	w := worker.New(fm, cfg)
	notice(log, fmt.Sprintf("worker %s: taking jobs from NATS at %s (%d replicas, ack wait %s) with %s", name, redactURLs(f.nats),
		fm.Replicas(), fm.AckWait(), model))
	err = w.Run(ctx)
	// The models are not freed here: a job abandoned at the stop may
	// still hold them until the process exits.
	return err
}

// redactURLs is urls as they can be printed.
func redactURLs(urls string) string {
	var out []string
	for _, u := range strings.Split(urls, ",") {
		if i := strings.LastIndex(u, "@"); i >= 0 {
			if j := strings.Index(u, "://"); j >= 0 && j < i {
				u = u[:j+3] + "…@" + u[i+1:]
			}
		}
		out = append(out, u)
	}
	return strings.Join(out, ",")
}
