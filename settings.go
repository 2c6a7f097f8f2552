package framepack

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	"github.com/framepack-go/framepack/internal/atomicfile"
	"github.com/framepack-go/framepack/lora"
)

// Settings record how a video was made, so that it can be made again. The
// command line writes them as JSON beside the video (SettingsPath: out.mp4
// → out.mp4.json) and, compact and without the timings, in the video's
// comment tag (CommentTag, for video.Options.Comment). A program does the
// same with RequestSettings, SetResult and WriteSettings.
type Settings struct {
	Framepack BuildVersion `json:"framepack"`
	Image     FileRef      `json:"image"`
	// EndImage is the end image (--end-image), when given.
	EndImage *FileRef `json:"end_image,omitempty"`
	// Model is the transformer variant (framepack or f1).
	Model              string  `json:"model"`
	EmbedInterpolation string  `json:"embed_interpolation,omitempty"`
	StartEmbedStrength float64 `json:"start_embed_strength,omitempty"`
	Prompt             string  `json:"prompt"`
	Negative           string  `json:"negative_prompt"`
	Seed               uint64  `json:"seed"`
	// SeedRandom says the seed was drawn at random (--seed random).
	SeedRandom    bool    `json:"seed_random,omitempty"`
	Seconds       float64 `json:"seconds"`
	Steps         int     `json:"steps"`
	Window        int     `json:"window"`
	CFG           float64 `json:"cfg"`
	GS            float64 `json:"gs"`
	RS            float64 `json:"rs"`
	TeaCache      bool    `json:"teacache"`
	Resolution    int     `json:"resolution"`
	PosteriorMean bool    `json:"posterior_mean"`
	CRF           int     `json:"crf"`
	Device        string  `json:"device"`
	DType         string  `json:"dtype,omitempty"`
	Weights       string  `json:"weights,omitempty"`
	FP8Compute    string  `json:"fp8_compute,omitempty"` // with Weights fp8: auto, on or off
	FP8Attention  bool    `json:"fp8_attention,omitempty"`
	VRAMLimit     string  `json:"vram_limit,omitempty"`
	Preserve      string  `json:"preserve,omitempty"`
	VAETile       int     `json:"vae_tile,omitempty"`
	// PromptBlend is the timed prompts' blend (--prompt-blend).
	PromptBlend int `json:"prompt_blend,omitempty"`
	// LoRA are the LoRA files with their scales.
	LoRA []lora.File `json:"lora,omitempty"`
	// Cache is the step cache (teacache, magcache or none; TeaCache is
	// true for teacache), CacheThreshold its threshold (0: the cache's
	// default); the MagCache knobs are set with magcache only.
	Cache             string   `json:"cache"`
	CacheThreshold    float64  `json:"cache_threshold,omitempty"`
	MagCacheK         *int     `json:"magcache_k,omitempty"`
	MagCacheRetention *float64 `json:"magcache_retention,omitempty"`
	// Video is the video extended (--video: a file with its hash, or a
	// folder of frames), with its context frames and whether only the new
	// frames were written; InputFrames is how many of the output's frames
	// are the input's.
	Video              *FileRef `json:"video,omitempty"`
	VideoContextFrames int      `json:"video_context_frames,omitempty"`
	NewOnly            bool     `json:"new_only,omitempty"`
	InputFrames        int      `json:"input_frames,omitempty"`
	// TinyModel says the built-in random-weight model ran.
	TinyModel bool `json:"tiny_model,omitempty"`
	// Models are the model folders by part, each with its config's hash.
	Models map[string]ModelRef `json:"models"`

	Output string `json:"output"`
	Frames int    `json:"frames,omitempty"`
	FPS    int    `json:"fps,omitempty"`
	Width  int    `json:"width,omitempty"`
	Height int    `json:"height,omitempty"`
	// Timings are seconds per stage; absent from the comment tag, which is
	// written before the file is.
	Timings *Timings `json:"timings,omitempty"`
}

// FileRef is an input file and the hex SHA-256 of its contents.
type FileRef struct {
	Path   string `json:"path"`
	SHA256 string `json:"sha256,omitempty"`
}

// ModelRef is a part's folder.
type ModelRef struct {
	Folder string `json:"folder"`
	// ConfigSHA256 is the hash of the folder's config.json (or, for a
	// tokenizer, tokenizer_config.json); empty when it has none.
	ConfigSHA256 string `json:"config_sha256,omitempty"`
}

// Timings are a run's stage times in seconds.
type Timings struct {
	Load        float64 `json:"load"`
	TextEncode  float64 `json:"text_encode"`
	VAEEncode   float64 `json:"vae_encode"`
	ImageEncode float64 `json:"image_encode"`
	Sampling    float64 `json:"sampling"`
	Decoding    float64 `json:"decoding"`
	Generate    float64 `json:"generate"`
	// Total is from the start of the command to the frames, ready to
	// write (the file's writing comes after this record).
	Total    float64          `json:"total"`
	Sections []SectionTimings `json:"sections"`
}

// SectionTimings are one section's times in seconds and the video frames
// after it.
type SectionTimings struct {
	Section  int     `json:"section"`
	Sampling float64 `json:"sampling"`
	Decoding float64 `json:"decoding"`
	Frames   int     `json:"frames"`
}

// RequestSettings are req's settings (what Generate reads of it) with
// this build's version; the caller adds the files (Image, Models, Output)
// and how it ran the job (Device, CRF, …) as it knows them.
func RequestSettings(req Request) Settings {
	model := req.Model
	if model == "" {
		model = ModelFramePack
	}
	return Settings{Framepack: ReadBuildVersion(), Model: model, EmbedInterpolation: req.EmbedInterpolation,
		StartEmbedStrength: req.StartEmbedStrength, Prompt: req.Prompt, Negative: req.NegativePrompt, Seed: req.Seed,
		Seconds: req.Seconds, Steps: req.Steps, Window: req.LatentWindowSize, CFG: req.CFG, GS: req.GS, RS: req.RS,
		TeaCache: req.TeaCache, Resolution: req.Resolution, PosteriorMean: req.PosteriorMean, PromptBlend: req.PromptBlend}
}

// SetResult records the video res made: its size, frame rate and stage
// times (load is the model loading before Generate, total the time from
// the program's start to the frames, 0 for res.Total).
func (s *Settings) SetResult(res *Result, load, total time.Duration) {
	s.Frames, s.FPS, s.Width, s.Height = res.T, res.FPS, res.W, res.H
	if total == 0 {
		total = res.Total
	}
	secs := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1e6 }
	t := &Timings{Total: secs(total), Load: secs(load), TextEncode: secs(res.TextEncode), VAEEncode: secs(res.VAEEncode),
		ImageEncode: secs(res.ImageEncode), Generate: secs(res.Total), Sections: []SectionTimings{}}
	for _, st := range res.Sections {
		t.Sampling += secs(st.Sample)
		t.Decoding += secs(st.Decode)
		t.Sections = append(t.Sections, SectionTimings{Section: st.Index, Sampling: secs(st.Sample), Decoding: secs(st.Decode), Frames: st.Frames})
	}
	s.Timings = t
}

// CommentTag is the settings as the video's comment tag holds them:
// compact JSON without the timings.
func (s *Settings) CommentTag() (string, error) {
	c := *s
	c.Timings = nil
	b, err := json.Marshal(&c)
	return string(b), err
}

// SettingsPath is where the settings of the video at path go: beside it,
// its name plus .json (out.mp4.json; a frames folder's: frames.json).
func SettingsPath(path string) string { return filepath.Clean(path) + ".json" }

// WriteSettings writes s as indented JSON to path, whole or not at all.
func WriteSettings(path string, s *Settings) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("settings %s: %w", path, err)
	}
	if err := atomicfile.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("settings %s: %w", path, err)
	}
	return nil
}

// BuildVersion describes the program from the build information the Go
// toolchain embeds: the main module's version ("(devel)" for a build from a
// checkout), the VCS revision and whether the tree had changes, and the Go
// version.
type BuildVersion struct {
	Module   string `json:"module"`
	Version  string `json:"version"`
	Revision string `json:"revision,omitempty"`
	Time     string `json:"time,omitempty"`
	Modified bool   `json:"modified,omitempty"`
	Go       string `json:"go"`
}

// ReadBuildVersion is the running program's BuildVersion.
func ReadBuildVersion() BuildVersion {
	v := BuildVersion{Module: "github.com/framepack-go/framepack", Version: "unknown"}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	v.Go = bi.GoVersion
	if bi.Main.Path != "" {
		v.Module, v.Version = bi.Main.Path, bi.Main.Version
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.time":
			v.Time = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}

// String is one line: "framepack (devel) rev 301ee1f2c4a1 (modified) 2026-… go1.26.8".
func (v BuildVersion) String() string {
	parts := []string{"framepack", v.Version}
	if v.Revision != "" {
		rev := v.Revision
		if len(rev) > 12 {
			rev = rev[:12]
		}
		parts = append(parts, "rev "+rev)
		if v.Modified {
			parts = append(parts, "(modified)")
		}
		if v.Time != "" {
			parts = append(parts, v.Time)
		}
	}
	if v.Go != "" {
		parts = append(parts, v.Go)
	}
	return strings.Join(parts, " ")
}
