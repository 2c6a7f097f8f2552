package framepack

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/framepack-go/framepack/internal/testutil/golden"
	"github.com/framepack-go/framepack/model/hunyuan"
	"github.com/framepack-go/framepack/section"
	"github.com/framepack-go/framepack/tensor"
)

// goldenGenerateCases are the cases bench/reference/make_golden_generate.py
// writes: FramePack's own worker() loop on the tiny model, TeaCache off and
// on.
var goldenGenerateCases = []string{"generate_i2v", "generate_i2v_teacache"}

// TestGoldenGenerateI2V runs Generate on the CPU in float32 with each
// generate case's settings and compares it with FramePack's worker() run on
// the same model and image: the token ids and crop_start, the bucket crop,
// the history latents after every section (real_history_latents), the final
// pixels before their conversion to uint8, each section's padding, frames
// and TeaCache skips.
func TestGoldenGenerateI2V(t *testing.T) {
	t.Parallel() // its own pipelines; the tests that measure the process run first, alone
	dir, err := golden.Dir()
	if err != nil {
		t.Skipf("golden: %v", err)
	}
	var missing []string
	for _, n := range goldenGenerateCases {
		if _, err := os.Stat(filepath.Join(dir, n, "case.json")); err != nil {
			missing = append(missing, n)
		}
	}
	if len(missing) == len(goldenGenerateCases) {
		t.Skipf("golden: the cases %s are absent from %s (bench/reference/make_golden_generate.py writes them)",
			strings.Join(missing, ", "), dir)
	}
	for _, n := range missing {
		t.Logf("golden: the case %s is absent from %s", n, dir)
	}
	for _, c := range golden.Cases(t, "generate") {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			goldenGenerate(t, c)
		})
	}
}

// TestGoldenGenerateF1 is TestGoldenGenerateI2V for FramePack-F1's forward
// sections (demo_gradio_f1.py's worker, the tiny model's weights standing in
// for F1's): the case generate_f1.
func TestGoldenGenerateF1(t *testing.T) {
	t.Parallel() // its own pipelines; the tests that measure the process run first, alone
	goldenGenerateCase(t, "generate_f1")
}

// TestGoldenGenerateEndImage is TestGoldenGenerateI2V with an end image as
// ComfyUI-FramePackWrapper uses it (end_latent, linear embed interpolation):
// the case generate_end_image, whose start and end latents are compared too.
func TestGoldenGenerateEndImage(t *testing.T) {
	t.Parallel() // its own pipelines; the tests that measure the process run first, alone
	goldenGenerateCase(t, "generate_end_image")
}

// TestGoldenGenerateMagCache is TestGoldenGenerateI2V with
// MagCache4FramePack's MagCache (magcache_demo_gradio.py's ratios and
// defaults) in FramePack's loop: the case generate_magcache, made by
// bench/reference/make_golden_magcache.py. The calls MagCache skipped must
// be the reference's, section by section.
func TestGoldenGenerateMagCache(t *testing.T) { goldenGenerateCase(t, "generate_magcache") }

// TestGoldenGenerateF1MagCache is TestGoldenGenerateMagCache for
// FramePack-F1 (magcache_demo_gradio_f1.py's ratios): the case
// generate_f1_magcache.
func TestGoldenGenerateF1MagCache(t *testing.T) { goldenGenerateCase(t, "generate_f1_magcache") }

// goldenMagCacheSchedule is one entry of a MagCache case's
// magcache_schedules: the reference's ratios and skipped calls over one
// cycle of steps calls with the given knobs.
type goldenMagCacheSchedule struct {
	Variant   string    `json:"variant"`
	Steps     int       `json:"steps"`
	Threshold float64   `json:"threshold"`
	K         int       `json:"K"`
	Retention float64   `json:"retention"`
	Ratios    []float64 `json:"ratios"`
	Skipped   []int     `json:"skipped"`
}

// checkMagCacheSchedules compares MagRatios and the skip schedule with the
// reference's for every step count and knob setting the case recorded.
func checkMagCacheSchedules(t *testing.T, c *golden.Case, req Request) {
	var ratios []float64
	var scheds []goldenMagCacheSchedule
	c.Param("magcache_ratios", &ratios)
	c.Param("magcache_schedules", &scheds)
	if got := req.magCache().Ratios; !slices.Equal(got, ratios) {
		t.Errorf("MagCache ratios for %d steps:\n got %v\nwant %v", req.Steps, got, ratios)
	}
	if len(scheds) == 0 {
		t.Fatal("case.json: no magcache_schedules")
	}
	for _, sc := range scheds {
		r := req
		r.Steps, r.CacheThreshold, r.MagCacheK, r.MagCacheRetention = sc.Steps, sc.Threshold, sc.K, sc.Retention
		set := r.magCache()
		if !slices.Equal(set.Ratios, sc.Ratios) {
			t.Errorf("%s, %d steps: ratios\n got %v\nwant %v", sc.Variant, sc.Steps, set.Ratios, sc.Ratios)
		}
		if got := hunyuan.MagCacheSkips(*set, sc.Steps); !slices.Equal(got, sc.Skipped) {
			t.Errorf("%s, %d steps, threshold %v, K %d, retention %v: skips %v, the reference's %v",
				sc.Variant, sc.Steps, sc.Threshold, sc.K, sc.Retention, got, sc.Skipped)
		}
	}
}

// goldenGenerateCase runs the case folder name, whose component is its name;
// the test skips only when the folder is absent.
func goldenGenerateCase(t *testing.T, name string) {
	dir, err := golden.Dir()
	if err != nil {
		t.Skipf("golden: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, name)); os.IsNotExist(err) {
		t.Skipf("golden: the case %s is absent from %s (bench/reference/make_golden_generate.py --cases %s writes it)", name, dir, name)
	}
	cases := golden.Cases(t, name)
	if len(cases) != 1 || cases[0].Name != name {
		t.Fatalf("golden: want the one case %s with component %q", name, name)
	}
	goldenGenerate(t, cases[0])
}

// goldenSection is one entry of a generate case's section_info.
type goldenSection struct {
	Padding      int  `json:"latent_padding"`
	Last         bool `json:"is_last_section"`
	LatentFrames int  `json:"latent_frames"`
	PixelFrames  int  `json:"pixel_frames"`
	Computed     int  `json:"teacache_computed"`
	Skipped      int  `json:"teacache_skipped"`
	Calls        int  `json:"transformer_calls"`
	// CacheSkipped: the calls that reused the residual (MagCache cases).
	CacheSkipped []int `json:"cache_skipped"`
}

func goldenGenerate(t *testing.T, c *golden.Case) {
	req := DefaultRequest()
	var (
		thresh                                 *float64
		width, height, frames, sections, crop0 int
		secs                                   []goldenSection
	)
	c.Param("prompt", &req.Prompt)
	c.Param("negative_prompt", &req.NegativePrompt)
	c.Param("seed", &req.Seed)
	c.Param("seconds", &req.Seconds)
	c.Param("latent_window_size", &req.LatentWindowSize)
	c.Param("steps", &req.Steps)
	c.Param("cfg", &req.CFG)
	c.Param("gs", &req.GS)
	c.Param("rs", &req.RS)
	c.Param("resolution", &req.Resolution)
	c.Param("teacache", &req.TeaCache)
	c.Param("teacache_rel_l1_thresh", &thresh)
	c.Param("width", &width)
	c.Param("height", &height)
	c.Param("frames", &frames)
	c.Param("sections", &sections)
	c.Param("section_info", &secs)
	c.Param("crop_start", &crop0)
	// Entries only the F1 and end-image cases have.
	var endImage bool
	for name, v := range map[string]any{"model_variant": &req.Model, "end_image": &endImage,
		"embed_interpolation": &req.EmbedInterpolation, "start_embed_strength": &req.StartEmbedStrength,
		"cache": &req.Cache, "magcache_threshold": &req.CacheThreshold, "magcache_k": &req.MagCacheK,
		"magcache_retention": &req.MagCacheRetention} {
		if _, ok := c.Raw[name]; ok {
			c.Param(name, v)
		}
	}
	req.PosteriorMean = false // the reference samples the posterior with the seeded CPU generator
	if len(secs) != sections {
		t.Fatalf("case.json: %d entries in section_info for %d sections", len(secs), sections)
	}
	magCache := req.CacheChoice() == CacheMagCache
	if magCache {
		checkMagCacheSchedules(t, c, req)
	}

	// The case names the tiny model by its place in the module; the
	// embedded copy is the same files.
	modelDir := c.ModelDir
	if _, err := os.Stat(filepath.Join(modelDir, "transformer", "config.json")); modelDir == "" || err != nil {
		modelDir = tinyDir(t)
	}
	opts := Options{Device: DeviceCPU, DType: tensor.F32, Logger: quietLogger(t)}
	if thresh != nil {
		opts.TeaCacheThreshold = float32(*thresh)
	}
	p, err := Load(modelDir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	// What the reference fed its text encoders.
	if p.CropStart() != crop0 {
		t.Errorf("crop_start %d, the reference's %d", p.CropStart(), crop0)
	}
	ids, err := section.LlamaIDs(p.llamaTok, p.cropStart, req.Prompt)
	if err != nil {
		t.Fatal(err)
	}
	if ref := c.Tensor("llama_input_ids").Int64s(); !slices.Equal(ids, ref) {
		t.Errorf("LLaMA token ids differ from the reference's:\n got %v\nwant %v", ids, ref)
	}
	cids, err := p.clipTok.Encode(req.Prompt)
	if err != nil {
		t.Fatal(err)
	}
	if ref := c.Tensor("clip_input_ids").Int64s(); len(cids) > len(ref) || !slices.Equal(cids, ref[:len(cids)]) {
		t.Errorf("CLIP token ids differ from the reference's (padded to %d):\n got %v\nwant %v", len(ref), cids, ref)
	}

	// The start image as recorded (the original), cropped here and by
	// Generate as FramePack crops it.
	im := c.Tensor("image")
	if im.Rank() != 3 || im.Dim(2) != 3 {
		t.Fatalf("image %v: want H×W×3", im.Shape())
	}
	rgb := &section.RGB{W: im.Dim(1), H: im.Dim(0), Pix: append([]uint8(nil), im.HostBytes()...)}
	bh, bw, err := section.NearestBucket(rgb.H, rgb.W, req.Resolution)
	if err != nil {
		t.Fatal(err)
	}
	if bw != width || bh != height {
		t.Fatalf("bucket %d×%d, the reference's %d×%d", bw, bh, width, height)
	}
	crop, err := section.ResizeAndCenterCrop(rgb, bw, bh)
	if err != nil {
		t.Fatal(err)
	}
	ct := tensor.New(tensor.U8, bh, bw, 3)
	copy(ct.HostBytes(), crop.Pix)
	c.Compare(t, "image_cropped", ct)
	req.RGB = rgb
	if endImage {
		em := c.Tensor("end_image")
		req.EndRGB = &section.RGB{W: em.Dim(1), H: em.Dim(0), Pix: append([]uint8(nil), em.HostBytes()...)}
		ecrop, err := section.ResizeAndCenterCrop(req.EndRGB, bw, bh)
		if err != nil {
			t.Fatal(err)
		}
		et := tensor.New(tensor.U8, bh, bw, 3)
		copy(et.HostBytes(), ecrop.Pix)
		c.Compare(t, "end_image_cropped", et)
		// Both latents as Generate draws them: one generator, start first.
		j := p.newJob(context.Background(), req)
		lat, err := j.encodeImage(crop, ecrop)
		if err == nil {
			err = p.Unload()
		}
		if err != nil {
			t.Fatal(err)
		}
		c.Compare(t, "start_latent", lat[0])
		c.Compare(t, "end_latent", lat[1])
	}

	history := map[int]*tensor.Tensor{}
	var pixels *tensor.Tensor
	req.Progress = func(pr Progress) {
		if pr.Stage != StageSectionDone {
			return
		}
		history[pr.Section] = hostCopy(pr.Latents)
		if pr.Section == pr.Sections {
			pixels = hostCopy(pr.Pixels)
		}
	}
	res, err := p.Generate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}

	if res.Width != width || res.Height != height || res.T != frames {
		t.Errorf("video %d×%d, %d frames; the reference's %d×%d, %d frames", res.Width, res.Height, res.T, width, height, frames)
	}
	if len(res.Sections) != sections {
		t.Fatalf("%d sections, the reference's %d", len(res.Sections), sections)
	}
	for i, s := range res.Sections {
		r := secs[i]
		if s.Padding != r.Padding || s.LatentFrames != r.LatentFrames || s.Frames != r.PixelFrames {
			t.Errorf("section %d: padding %d, %d latent frames, %d video frames; the reference's %d, %d, %d",
				i+1, s.Padding, s.LatentFrames, s.Frames, r.Padding, r.LatentFrames, r.PixelFrames)
		}
		if magCache && (s.TransformerCalls != r.Calls || !slices.Equal(s.CacheSkipped, r.CacheSkipped)) {
			t.Errorf("section %d: MagCache skipped the calls %v of %d; the reference %v of %d",
				i+1, s.CacheSkipped, s.TransformerCalls, r.CacheSkipped, r.Calls)
		}
		if req.CacheChoice() == CacheTeaCache && (s.TeaCacheComputed != r.Computed || s.TeaCacheSkipped != r.Skipped) {
			t.Errorf("section %d: TeaCache computed %d and skipped %d transformer calls; the reference %d and %d",
				i+1, s.TeaCacheComputed, s.TeaCacheSkipped, r.Computed, r.Skipped)
		}
	}
	for k := 1; k <= sections; k++ {
		name := fmt.Sprintf("history_latents_section_%d", k)
		if history[k] == nil {
			t.Errorf("no history latents reported after section %d", k)
			continue
		}
		c.Compare(t, name, history[k])
	}
	if pixels == nil {
		t.Fatal("no pixels reported after the last section")
	}
	// The MagCache cases keep no pixels: their decode is the other cases'.
	var tensors map[string]json.RawMessage
	c.Param("tensors", &tensors)
	if _, ok := tensors["pixels"]; ok || !magCache {
		c.Compare(t, "pixels", pixels)
	}
}
