package farm

import (
	"crypto/rand"
	"encoding/hex"
	"time"
)

// Job statuses.
const (
	Queued    = "queued"
	Running   = "running"
	Done      = "done"
	Failed    = "failed"
	Cancelled = "cancelled"
)

// Finished tells whether a job in status s is over.
func Finished(s string) bool { return s == Done || s == Failed || s == Cancelled }

// Job is one job's state, the value of its key in the state bucket.
type Job struct {
	ID     string `json:"id"`
	Status string `json:"status"`
	// Gen is the generation of the job's live queue message.
	Gen uint64 `json:"gen"`
	// Seq is the stream sequence of that message (to delete it early).
	Seq      uint64   `json:"seq,omitempty"`
	Settings Settings `json:"settings"`
	Image    *File    `json:"image,omitempty"`
	EndImage *File    `json:"end_image,omitempty"`
	// Video is the video the job extends, uploaded in place of Image.
	Video *File `json:"video,omitempty"`

	Created  time.Time  `json:"created"`
	Started  *time.Time `json:"started,omitempty"`
	Finished *time.Time `json:"finished,omitempty"`

	// Attempts counts the runs that took the job (more than one after a
	// restart or a worker's death).
	Attempts int    `json:"attempts"`
	Worker   string `json:"worker,omitempty"`
	// Section is the sections finished and checkpointed, of Sections.
	Section  int `json:"section"`
	Sections int `json:"sections,omitempty"`
	// SectionWorkers[i] is the worker that ran section i+1.
	SectionWorkers []string `json:"section_workers,omitempty"`
	// ResumedAt is the section after which the last run went on from a
	// checkpoint (0: it started from the beginning).
	ResumedAt int `json:"resumed_at,omitempty"`
	// Files names the objects that hold the job's files now (File), by
	// the names of the files (FileCheckpoint, FileVideo, …): each run
	// writes objects of its own and the state, changed by compare-and-set,
	// names the ones that count, so that a worker that lost the job to
	// another stores nothing that is used.
	Files map[string]string `json:"files,omitempty"`
	// Refusals are the workers that took the job's message and left it
	// because they cannot run it, with why (cleared when one takes it).
	Refusals []Refusal `json:"refusals,omitempty"`
	// Unrunnable says why the job waits: no live worker can run it (every
	// live worker refused it). Empty while one may.
	Unrunnable string `json:"unrunnable,omitempty"`
	// CancelRequested: a cancel was asked while the job ran.
	CancelRequested bool    `json:"cancel_requested,omitempty"`
	Error           string  `json:"error,omitempty"`
	Result          *Result `json:"result,omitempty"`
}

// Refusal is a worker's reason for leaving a job it cannot run.
type Refusal struct {
	Worker string `json:"worker"`
	// Instance tells runs of workers of the same name apart: a refusal
	// counts only while the run that made it is live.
	Instance string    `json:"instance"`
	Reason   string    `json:"reason"`
	At       time.Time `json:"at"`
}

// File is the object that holds job j's file name now: the one its state
// names, else name itself (the files every run shares: the uploads).
func (j *Job) File(name string) string {
	if n, ok := j.Files[name]; ok {
		return n
	}
	return name
}

// File is an uploaded image or video (Type video/mp4, video/webm, … or
// application/octet-stream, from the content).
type File struct {
	// Name is the client's file name, for display only (never a path).
	Name   string `json:"name,omitempty"`
	Type   string `json:"type"` // image/png, image/jpeg or image/webp, from the content
	Bytes  int64  `json:"bytes"`
	Width  int    `json:"width"`
	Height int    `json:"height"`
	SHA256 string `json:"sha256"`

	// A video's frame count, codec and frame rate.
	Frames int     `json:"frames,omitempty"`
	Codec  string  `json:"codec,omitempty"`
	FPS    float64 `json:"fps,omitempty"`
}

// Result describes a finished job's video.
type Result struct {
	Frames  int     `json:"frames"`
	FPS     int     `json:"fps"`
	Width   int     `json:"width"`
	Height  int     `json:"height"`
	Seconds float64 `json:"seconds"`
	// VideoBytes and VideoSHA256 are the stored MP4's.
	VideoBytes  int64  `json:"video_bytes"`
	VideoSHA256 string `json:"video_sha256"`
	// FramesSHA256 is the hash of the frames' RGB bytes: equal for two
	// runs that made the same video.
	FramesSHA256 string `json:"frames_sha256"`
	// Generate is the seconds spent generating (all runs of the job).
	Generate float64 `json:"generate_seconds"`
	// Sample and Decode are the seconds the last run's sections spent
	// sampling and decoding (framepack.SectionStats), to set a served job
	// beside the same job run alone.
	Sample float64 `json:"sample_seconds,omitempty"`
	Decode float64 `json:"decode_seconds,omitempty"`
	// InputFrames is how many of Frames are the input video's (a video
	// extended without new_only), before the new ones.
	InputFrames int `json:"input_frames,omitempty"`
}

// Settings are a job's generation settings: the body of POST /api/jobs's
// settings part, and what the settings file records. The keys are those of
// `framepack generate`'s settings file.
type Settings struct {
	Prompt         string  `json:"prompt"`
	NegativePrompt string  `json:"negative_prompt"`
	Seed           uint64  `json:"seed"`
	SeedRandom     bool    `json:"seed_random,omitempty"`
	Seconds        float64 `json:"seconds"`
	Steps          int     `json:"steps"`
	Window         int     `json:"window"`
	CFG            float64 `json:"cfg"`
	GS             float64 `json:"gs"`
	RS             float64 `json:"rs"`
	TeaCache       bool    `json:"teacache"`
	Resolution     int     `json:"resolution"`
	Model          string  `json:"model"`
	PromptBlend    int     `json:"prompt_blend"`
	// With an end image.
	EmbedInterpolation string  `json:"embed_interpolation,omitempty"`
	StartEmbedStrength float64 `json:"start_embed_strength"`
	PosteriorMean      bool    `json:"posterior_mean,omitempty"`
	CRF                int     `json:"crf"`
	// Preserve is the device memory kept free while weights stream
	// (FramePack's "GPU inference preserved memory"), as --preserve takes
	// it ("6G"); empty for the server's.
	Preserve string `json:"preserve,omitempty"`
	// LoRA are files of the server's LoRA folder, by name, with weights.
	LoRA []LoRA `json:"lora,omitempty"`

	// Cache is the step cache: teacache, magcache or none; "" leaves it to
	// TeaCache (true: teacache, false: none), the older switch.
	Cache string `json:"cache,omitempty"`
	// CacheThreshold is the cache's threshold (0: the cache's default);
	// MagCacheK and MagCacheRetention are MagCache's knobs (nil: its
	// defaults), kept with cache magcache only.
	CacheThreshold    float64  `json:"cache_threshold,omitempty"`
	MagCacheK         *int     `json:"magcache_k,omitempty"`
	MagCacheRetention *float64 `json:"magcache_retention,omitempty"`

	// With a video (Job.Video): the context frames (0: the default) and
	// whether the result is the new frames alone.
	VideoContextFrames int  `json:"video_context_frames,omitempty"`
	NewOnly            bool `json:"new_only,omitempty"`
}

// LoRA is one LoRA of a job.
type LoRA struct {
	Name   string  `json:"name"`
	Weight float64 `json:"weight"`
}

// NewID is a new job id: its creation time (so ids sort by it) and 48
// random bits.
func NewID(now time.Time) string {
	var b [6]byte
	rand.Read(b[:])
	return now.UTC().Format("20060102T150405.000Z") + "-" + hex.EncodeToString(b[:])
}
