package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/framepack-go/framepack"
	"github.com/framepack-go/framepack/internal/atomicfile"
	"github.com/framepack-go/framepack/lora"
)

// settings record how a video was made, so it can be made again: written
// as JSON beside the video (settingsPath) and, compact, in the container's
// comment tag.
type settings struct {
	Framepack buildVersion `json:"framepack"`
	Image     fileRef      `json:"image"`
	// EndImage is --end-image, when given.
	EndImage *fileRef `json:"end_image,omitempty"`
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
	// PromptBlend is --prompt-blend (timed prompts).
	PromptBlend int `json:"prompt_blend,omitempty"`
	// LoRA are the --lora files with their scales.
	LoRA []lora.File `json:"lora,omitempty"`
	// Cache is the step cache (teacache, magcache or none; TeaCache is
	// true for teacache), CacheThreshold --cache-threshold (0: the
	// cache's default); the MagCache knobs are set with magcache only.
	Cache             string   `json:"cache"`
	CacheThreshold    float64  `json:"cache_threshold,omitempty"`
	MagCacheK         *int     `json:"magcache_k,omitempty"`
	MagCacheRetention *float64 `json:"magcache_retention,omitempty"`
	// Video is --video (a file with its hash, or a folder of frames), with
	// --video-context-frames and --new-only; InputFrames is how many of the
	// output's frames are the input's.
	Video              *fileRef `json:"video,omitempty"`
	VideoContextFrames int      `json:"video_context_frames,omitempty"`
	NewOnly            bool     `json:"new_only,omitempty"`
	InputFrames        int      `json:"input_frames,omitempty"`
	// TinyModel says the built-in random-weight model ran.
	TinyModel bool `json:"tiny_model,omitempty"`
	// Models are the model folders by part, each with its config's hash.
	Models map[string]modelRef `json:"models"`

	Output string `json:"output"`
	Frames int    `json:"frames,omitempty"`
	FPS    int    `json:"fps,omitempty"`
	Width  int    `json:"width,omitempty"`
	Height int    `json:"height,omitempty"`
	// Timings are seconds per stage; absent from the comment tag, which is
	// written before the file is.
	Timings *timings `json:"timings,omitempty"`
}

type fileRef struct {
	Path   string `json:"path"`
	SHA256 string `json:"sha256,omitempty"`
}

type modelRef struct {
	Folder string `json:"folder"`
	// ConfigSHA256 is the hash of the folder's config.json (or, for a
	// tokenizer, tokenizer_config.json); empty when it has none.
	ConfigSHA256 string `json:"config_sha256,omitempty"`
}

// timings are a run's stage times in seconds.
type timings struct {
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
	Sections []sectionTimings `json:"sections"`
}

type sectionTimings struct {
	Section  int     `json:"section"`
	Sampling float64 `json:"sampling"`
	Decoding float64 `json:"decoding"`
	Frames   int     `json:"frames"`
}

func newTimings(total, load time.Duration, res *framepack.Result) *timings {
	t := &timings{Total: secs(total), Load: secs(load), TextEncode: secs(res.TextEncode), VAEEncode: secs(res.VAEEncode),
		ImageEncode: secs(res.ImageEncode), Generate: secs(res.Total), Sections: []sectionTimings{}}
	for _, s := range res.Sections {
		t.Sampling += secs(s.Sample)
		t.Decoding += secs(s.Decode)
		t.Sections = append(t.Sections, sectionTimings{Section: s.Index, Sampling: secs(s.Sample), Decoding: secs(s.Decode), Frames: s.Frames})
	}
	return t
}

func secs(d time.Duration) float64 { return float64(d.Microseconds()) / 1e6 }

// modelRefs are the folders Load reads for each part: the override, or
// <dir>/<part>.
func modelRefs(dir string, parts map[string]*string) (map[string]modelRef, error) {
	names := make([]string, 0, len(parts))
	for part := range parts {
		names = append(names, part)
	}
	sort.Strings(names)
	refs := map[string]modelRef{}
	for _, part := range names {
		folder := *parts[part]
		if folder == "" {
			folder = filepath.Join(dir, part)
		}
		ref := modelRef{Folder: folder}
		for _, name := range []string{"config.json", "tokenizer_config.json"} {
			sum, err := fileSHA256(filepath.Join(folder, name))
			if os.IsNotExist(err) {
				continue
			}
			if err != nil {
				return nil, err
			}
			ref.ConfigSHA256 = sum
			break
		}
		refs[part] = ref
	}
	return refs, nil
}

func fileSHA256(path string) (string, error) {
	fh, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer fh.Close()
	h := sha256.New()
	if _, err := io.Copy(h, fh); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// settingsFile is the settings written to a temporary file beside the
// video before the video is, and renamed into place after it: a run that
// fails leaves neither, one that succeeds both.
type settingsFile struct {
	path, tmp string
	untrack   func() // atomicfile.Track's, until committed or discarded
}

func createSettings(path string, s *settings) (*settingsFile, error) {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("settings %s: %w", path, err)
	}
	fh, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return nil, fmt.Errorf("settings %s: %w", path, err)
	}
	sf := &settingsFile{path: path, tmp: fh.Name(), untrack: atomicfile.Track(fh.Name())}
	_, err = fh.Write(append(b, '\n'))
	if err == nil {
		err = fh.Sync()
	}
	if cerr := fh.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(sf.tmp, 0o644)
	}
	if err != nil {
		sf.discard()
		return nil, fmt.Errorf("settings %s: %w", path, err)
	}
	return sf, nil
}

func (sf *settingsFile) discard() {
	os.Remove(sf.tmp)
	sf.untrack()
}

func (sf *settingsFile) commit() error {
	if err := os.Rename(sf.tmp, sf.path); err != nil {
		sf.discard()
		return fmt.Errorf("settings %s: %w", sf.path, err)
	}
	sf.untrack()
	return nil
}
