// Package farm is framepack's job queue, job state and file store, on NATS
// JetStream: jobs wait in a work-queue stream, each job's state is a key
// of a key-value bucket, and its files (uploads, checkpoints, videos) are
// objects of an object store. Live progress goes over core NATS subjects.
//
// The same code runs on a NATS server embedded in the process (file
// storage under a data folder, reachable only from inside the process) or
// on an external server or cluster (Config.URL), which is how several
// machines share one queue: any number of API servers and workers can use
// the same farm.
//
// A job has exactly one live queue message, named by the job's generation
// (Job.Gen): moving or requeueing a job publishes a message of a new
// generation, so a message whose generation is not the job's is stale and
// is dropped. A worker holds its message while it runs the job, keeping it
// alive with progress acknowledgements, and acknowledges it only once the
// video is stored; a worker that dies leaves the message to be delivered
// again after the consumer's AckWait, and the next worker resumes the job
// from its last checkpoint.
package farm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/framepack-go/framepack/memory"
)

// Names of the streams, buckets and subjects.
const (
	StreamJobs    = "FRAMEPACK_JOBS"
	ConsumerName  = "workers"
	BucketState   = "framepack_jobs"
	BucketIdem    = "framepack_idempotency"
	BucketFiles   = "framepack_files"
	BucketWorkers = "framepack_workers"
	subjectRun    = "framepack.jobs.run."    // + job id: the queue message
	subjectEvent  = "framepack.jobs.events." // + job id: live progress
	subjectCancel = "framepack.jobs.cancel." // + job id: stop a running job
)

// Config configures Open.
type Config struct {
	// URL is an external NATS server or cluster (comma-separated URLs);
	// empty runs one embedded in the process, storing under DataDir.
	URL string
	// Options are extra NATS client options (credentials, TLS) for URL.
	Options []nats.Option
	// DataDir is where the embedded server keeps its files (DataDir/nats).
	DataDir string
	// AckWait is how long a job's message stays with a worker that stopped
	// acknowledging progress before it is delivered again. 0 keeps the
	// consumer's as it is on a server where it exists, and makes it with
	// DefaultAckWait where it does not.
	AckWait time.Duration
	// MaxStoredBytes caps the object store (uploads, videos, checkpoints);
	// 0 means 20 GiB, and on an external server leaves an existing store's
	// cap as it is.
	MaxStoredBytes int64
	// MaxQueued caps the queue stream's messages (a backstop to the API's
	// own check); 0 means 1000, and on an external server leaves an
	// existing stream's cap as it is.
	MaxQueued int
	// Replicas is how many servers of a cluster keep each stream, bucket
	// and store (1 or 3 in practice: 3 lose nothing when one server dies).
	// 0 means 3 when the client knows of 3 servers or more, else 1.
	Replicas int
	// Log receives the farm's lines; nil means slog.Default().
	Log *slog.Logger
}

// Farm is an open connection to the queue, the state and the files.
type Farm struct {
	cfg      Config
	replicas int
	ns       *server.Server // the embedded server, or nil
	nc       *nats.Conn
	js       jetstream.JetStream
	stream   jetstream.Stream
	cons     jetstream.Consumer
	state    jetstream.KeyValue
	idem     jetstream.KeyValue
	files    jetstream.ObjectStore
	workers  jetstream.KeyValue
	log      *slog.Logger
	ackWait  atomic.Int64 // the consumer's, in nanoseconds
	lock     *os.File     // the embedded server's data folder, locked
}

// DefaultAckWait is the consumer's ack wait when nothing sets it: a job
// whose worker died is delivered again within it.
const DefaultAckWait = 30 * time.Second

// Open connects to (or starts) the NATS server and makes sure the
// stream, the consumer and the buckets exist. With the embedded server
// the consumer is made anew, so that a job whose process was killed is
// delivered again at once: nothing else can be holding it.
func Open(ctx context.Context, cfg Config) (*Farm, error) {
	f := &Farm{cfg: cfg, log: cfg.Log}
	if f.log == nil {
		f.log = slog.Default()
	}
	var err error
	if cfg.URL == "" {
		if err = f.startEmbedded(); err != nil {
			return nil, err
		}
		f.nc, err = nats.Connect(f.ns.ClientURL(), nats.InProcessServer(f.ns), nats.Name("framepack"), nats.MaxReconnects(-1))
	} else {
		if err := CheckURL(cfg.URL); err != nil {
			return nil, err
		}
		opts := append([]nats.Option{nats.Name("framepack"), nats.MaxReconnects(-1), nats.ReconnectWait(250 * time.Millisecond),
			nats.RetryOnFailedConnect(false)}, cfg.Options...)
		f.nc, err = nats.Connect(cfg.URL, opts...)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("farm: connecting to NATS: %w", err)
	}
	// A cluster that has just started may not answer yet (its streams
	// elect their leaders): each try is bounded, and tried again.
	for end := time.Now().Add(2 * time.Minute); ; {
		sctx, cancel := context.WithTimeout(ctx, 3*opTimeout)
		err = f.setup(sctx)
		cancel()
		if err == nil {
			return f, nil
		}
		if !transient(err) || time.Now().After(end) || ctx.Err() != nil {
			f.Close()
			return nil, err
		}
		f.log.Warn("farm: waiting for JetStream: " + err.Error())
		sleep(ctx, time.Second)
	}
}

func (f *Farm) startEmbedded() error {
	if f.cfg.DataDir == "" {
		return errors.New("farm: no data folder for the embedded NATS server")
	}
	dir := filepath.Join(f.cfg.DataDir, "nats")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("farm: %w", err)
	}
	// One process at a time: two embedded servers on one store would
	// corrupt it.
	lock, err := os.OpenFile(filepath.Join(f.cfg.DataDir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("farm: %w", err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		return fmt.Errorf("farm: the data folder %s is in use by another framepack process (%v); give it another --data, or share one queue through --nats", f.cfg.DataDir, err)
	}
	f.lock = lock
	ns, err := server.NewServer(&server.Options{ServerName: "framepack", JetStream: true, StoreDir: dir,
		DontListen: true, NoSigs: true, NoLog: true, JetStreamMaxStore: -1})
	if err != nil {
		return fmt.Errorf("farm: the embedded NATS server: %w", err)
	}
	ns.Start()
	if !ns.ReadyForConnections(30 * time.Second) {
		ns.Shutdown()
		return errors.New("farm: the embedded NATS server did not start within 30 s")
	}
	f.ns = ns
	return nil
}

func (f *Farm) setup(ctx context.Context) error {
	var err error
	if f.js, err = jetstream.New(f.nc); err != nil {
		return fmt.Errorf("farm: %w", err)
	}
	f.replicas = f.cfg.Replicas
	if f.replicas <= 0 {
		f.replicas = 1
		if f.ns == nil && len(f.nc.Servers()) >= 3 {
			f.replicas = 3
		}
	}
	storage := jetstream.FileStorage
	scfg := jetstream.StreamConfig{
		Name: StreamJobs, Description: "framepack jobs waiting or running", Subjects: []string{subjectRun + ">"},
		Retention: jetstream.WorkQueuePolicy, Storage: storage, MaxMsgs: int64(orDefault(f.cfg.MaxQueued, 1000)), Discard: jetstream.DiscardNew,
		Duplicates: 2 * time.Minute, Replicas: f.replicas,
	}
	if f.stream, err = f.js.Stream(ctx, StreamJobs); err == nil && f.ns == nil {
		// Another process made it: its caps stay unless this one sets them.
		have := f.stream.CachedInfo().Config
		if f.cfg.MaxQueued <= 0 {
			scfg.MaxMsgs = have.MaxMsgs
		}
		scfg.Replicas = max(scfg.Replicas, have.Replicas)
		if scfg.MaxMsgs != have.MaxMsgs || scfg.Replicas != have.Replicas {
			f.stream, err = f.js.UpdateStream(ctx, scfg)
		}
	} else {
		f.stream, err = f.js.CreateOrUpdateStream(ctx, scfg)
	}
	if err != nil {
		return fmt.Errorf("farm: the job stream: %w", err)
	}
	if err := f.setupConsumer(ctx); err != nil {
		return err
	}
	if f.state, err = f.keyValue(ctx, jetstream.KeyValueConfig{Bucket: BucketState,
		Description: "framepack job state", History: 1, Storage: storage, Replicas: f.replicas}); err != nil {
		return fmt.Errorf("farm: the state bucket: %w", err)
	}
	if f.idem, err = f.keyValue(ctx, jetstream.KeyValueConfig{Bucket: BucketIdem,
		Description: "framepack Idempotency-Key → job", History: 1, TTL: 24 * time.Hour, Storage: storage, Replicas: f.replicas}); err != nil {
		return fmt.Errorf("farm: the idempotency bucket: %w", err)
	}
	if f.workers, err = f.keyValue(ctx, jetstream.KeyValueConfig{Bucket: BucketWorkers,
		Description: "framepack workers alive, with what they can run", History: 1, TTL: WorkerTTL, Storage: jetstream.MemoryStorage,
		Replicas: f.replicas}); err != nil {
		return fmt.Errorf("farm: the worker bucket: %w", err)
	}
	ocfg := jetstream.ObjectStoreConfig{Bucket: BucketFiles, Description: "framepack uploads, checkpoints and videos", Storage: storage,
		MaxBytes: orDefault(f.cfg.MaxStoredBytes, 20<<30), Replicas: f.replicas}
	if f.files, err = f.js.ObjectStore(ctx, BucketFiles); err == nil && f.ns == nil {
		st, serr := f.files.Status(ctx)
		if serr != nil {
			return fmt.Errorf("farm: the file store: %w", serr)
		}
		have := st.(*jetstream.ObjectBucketStatus).StreamInfo().Config
		if f.cfg.MaxStoredBytes <= 0 {
			ocfg.MaxBytes = have.MaxBytes
		}
		ocfg.Replicas = max(ocfg.Replicas, have.Replicas)
		if ocfg.MaxBytes != have.MaxBytes || ocfg.Replicas != have.Replicas {
			f.files, err = f.js.UpdateObjectStore(ctx, ocfg)
		}
	} else {
		f.files, err = f.js.CreateOrUpdateObjectStore(ctx, ocfg)
	}
	if err != nil {
		var api *jetstream.APIError
		if errors.As(err, &api) && api.ErrorCode == errStorageExceeded {
			where := "the NATS server's storage limit"
			if f.ns != nil {
				// nats-server's own default for an embedded store.
				where = "the three quarters of the free disk under " + f.cfg.DataDir + " that the embedded NATS server may use"
			}
			return fmt.Errorf("farm: the file store's %s (MaxStoredBytes, serve's --max-storage) is more than %s: "+
				"give a smaller size or free some disk (%w)", memory.FormatBytes(ocfg.MaxBytes), where, err)
		}
		return fmt.Errorf("farm: the file store: %w", err)
	}
	if st, err := f.files.Status(ctx); err == nil {
		f.cfg.MaxStoredBytes = st.(*jetstream.ObjectBucketStatus).StreamInfo().Config.MaxBytes
	}
	return nil
}

// errStorageExceeded is nats-server's "insufficient storage resources
// available": a stream's MaxBytes beyond what the server may store.
const errStorageExceeded jetstream.ErrorCode = 10047

// keyValue makes or updates a bucket; on an external server it never
// lowers the replicas another process gave it.
func (f *Farm) keyValue(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	if f.ns == nil {
		if kv, err := f.js.KeyValue(ctx, cfg.Bucket); err == nil {
			if st, err := kv.Status(ctx); err == nil {
				if have := st.(*jetstream.KeyValueBucketStatus).StreamInfo().Config.Replicas; have > cfg.Replicas {
					cfg.Replicas = have
				}
			}
		}
	}
	return f.js.CreateOrUpdateKeyValue(ctx, cfg)
}

// setupConsumer makes the workers' consumer, or takes the one that
// exists on an external server with its ack wait (unless Config.AckWait
// sets it).
func (f *Farm) setupConsumer(ctx context.Context) error {
	ccfg := jetstream.ConsumerConfig{Durable: ConsumerName, Description: "framepack workers", AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: orDefault(f.cfg.AckWait, DefaultAckWait), MaxDeliver: -1, FilterSubject: subjectRun + ">", MaxAckPending: 10000,
		Replicas: f.replicas}
	var err error
	if f.ns != nil {
		// Only this process uses the embedded server: a message held by
		// the consumer is one a killed run of it left.
		if err := f.js.DeleteConsumer(ctx, StreamJobs, ConsumerName); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return fmt.Errorf("farm: resetting the consumer: %w", err)
		}
	} else if f.cons, err = f.js.Consumer(ctx, StreamJobs, ConsumerName); err == nil {
		have := f.cons.CachedInfo().Config
		if f.cfg.AckWait <= 0 {
			ccfg.AckWait = have.AckWait
		}
		ccfg.Replicas = max(ccfg.Replicas, have.Replicas)
		if ccfg.AckWait == have.AckWait && ccfg.Replicas == have.Replicas {
			f.ackWait.Store(int64(have.AckWait))
			return nil
		}
	}
	if f.cons, err = f.js.CreateOrUpdateConsumer(ctx, StreamJobs, ccfg); err != nil {
		return fmt.Errorf("farm: the worker consumer: %w", err)
	}
	f.ackWait.Store(int64(f.cons.CachedInfo().Config.AckWait))
	return nil
}

// refreshAckWait reads the consumer's ack wait again (another process
// may have changed it), so that progress acknowledgements keep up.
func (f *Farm) refreshAckWait(ctx context.Context) {
	if info, err := f.cons.Info(ctx); err == nil && info.Config.AckWait > 0 {
		f.ackWait.Store(int64(info.Config.AckWait))
	}
}

func orDefault[T int | int64 | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// Embedded tells whether the NATS server runs in this process.
func (f *Farm) Embedded() bool { return f.ns != nil }

// AckWait is the consumer's: how long a silent worker keeps a job.
func (f *Farm) AckWait() time.Duration { return time.Duration(f.ackWait.Load()) }

// Replicas is how many servers keep the queue, the states and the files.
func (f *Farm) Replicas() int { return f.replicas }

// MaxStoredBytes is the file store's cap.
func (f *Farm) MaxStoredBytes() int64 { return f.cfg.MaxStoredBytes }

// Conn is the NATS connection.
func (f *Farm) Conn() *nats.Conn { return f.nc }

// Close flushes and closes the connection and stops the embedded server.
func (f *Farm) Close() {
	if f.nc != nil {
		f.nc.Flush()
		f.nc.Close()
	}
	if f.ns != nil {
		f.ns.Shutdown()
		f.ns.WaitForShutdown()
	}
	if f.lock != nil {
		f.lock.Close()
	}
}
