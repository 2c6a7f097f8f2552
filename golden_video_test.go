package framepack

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/framepack-go/framepack/internal/testutil/golden"
	"github.com/framepack-go/framepack/section"
	"github.com/framepack-go/framepack/tensor"
)

// TestGoldenGenerateVideoExtend extends the case's video as FramePack
// Studio's "Video" generator does (backward sections), against Studio's own
// code run by bench/reference/make_golden_video_extend.py on the tiny
// model: the video's latents, each section's layout, the new history
// latents after every section and the new frames.
func TestGoldenGenerateVideoExtend(t *testing.T) { goldenVideoCase(t, "generate_video_extend") }

// TestGoldenGenerateVideoExtendF1 is the same for Studio's "Video F1"
// generator (forward sections).
func TestGoldenGenerateVideoExtendF1(t *testing.T) { goldenVideoCase(t, "generate_video_extend_f1") }

// goldenVideoSection is one entry of a video case's section_info.
type goldenVideoSection struct {
	Padding      int     `json:"latent_padding"`
	LatentFrames int     `json:"latent_frames"`
	PixelFrames  int     `json:"pixel_frames"`
	Clean        []int64 `json:"clean_latent_indices"`
	Latent       []int64 `json:"latent_indices"`
	Clean2x      []int64 `json:"clean_latent_2x_indices"`
	Clean4x      []int64 `json:"clean_latent_4x_indices"`
}

func goldenVideoCase(t *testing.T, name string) {
	dir, err := golden.Dir()
	if err != nil {
		t.Skipf("golden: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, name)); os.IsNotExist(err) {
		t.Skipf("golden: the case %s is absent from %s (bench/reference/make_golden_video_extend.py writes it)", name, dir)
	}
	cases := golden.Cases(t, name)
	if len(cases) != 1 || cases[0].Name != name {
		t.Fatalf("golden: want the one case %s with component %q", name, name)
	}
	c := cases[0]
	req := DefaultRequest()
	var (
		width, height, frames, sections, contextFrames int
		secs                                           []goldenVideoSection
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
	c.Param("width", &width)
	c.Param("height", &height)
	c.Param("frames", &frames)
	c.Param("sections", &sections)
	c.Param("section_info", &secs)
	c.Param("video_context_frames", &contextFrames)
	c.Param("video_new_only", &req.VideoNewOnly)
	if _, ok := c.Raw["model_variant"]; ok {
		c.Param("model_variant", &req.Model)
	}
	req.VideoContextFrames = contextFrames
	req.PosteriorMean = false
	if len(secs) != sections {
		t.Fatalf("case.json: %d entries in section_info for %d sections", len(secs), sections)
	}
	v := c.Tensor("video")
	if v.Rank() != 4 || v.Dim(3) != 3 {
		t.Fatalf("video %v: want T×H×W×3", v.Shape())
	}
	fh, fw := v.Dim(1), v.Dim(2)
	for i := 0; i < v.Dim(0); i++ {
		req.Video = append(req.Video, &section.RGB{W: fw, H: fh, Pix: append([]uint8(nil), v.HostBytes()[i*fh*fw*3:(i+1)*fh*fw*3]...)})
	}

	// Each section's layout from Studio's, given its generated latents.
	vlat := c.Tensor("video_latents")
	plan, err := section.NewPlan(req.Seconds, req.LatentWindowSize)
	if req.forward() {
		plan, err = section.NewForwardPlan(req.Seconds, req.LatentWindowSize)
	}
	if err != nil {
		t.Fatal(err)
	}
	plan.Video = true
	hs, err := section.NewVideoHistory(vlat, req.forward(), contextFrames)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range secs {
		sec, _, _, _, err := hs.VideoContext(plan, i, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(sec.CleanIndices, r.Clean) || !slices.Equal(sec.LatentIndices, r.Latent) ||
			!slices.Equal(sec.Clean2xIndices, r.Clean2x) || !slices.Equal(sec.Clean4xIndices, r.Clean4x) {
			t.Errorf("section %d: indices clean %v window %v 2x %v 4x %v; Studio's %v %v %v %v", i+1, sec.CleanIndices,
				sec.LatentIndices, sec.Clean2xIndices, sec.Clean4xIndices, r.Clean, r.Latent, r.Clean2x, r.Clean4x)
		}
		if err := hs.Add(c.Tensor(fmt.Sprintf("generated_latents_section_%d", i+1)), nil, sec.Last); err != nil {
			t.Fatal(err)
		}
	}

	modelDir := c.ModelDir
	if _, err := os.Stat(filepath.Join(modelDir, "transformer", "config.json")); modelDir == "" || err != nil {
		modelDir = tinyDir(t)
	}
	p, err := Load(modelDir, Options{Device: DeviceCPU, DType: tensor.F32, Logger: quietLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	// The encode, as Generate draws it.
	first, _ := section.VideoEncodeRange(len(req.Video))
	j := p.newJob(context.Background(), req)
	lat, err := j.encodeVideo(req.Video[first:], nil)
	if err == nil {
		err = p.Unload()
	}
	if err != nil {
		t.Fatal(err)
	}
	c.Compare(t, "video_latents", lat[0])

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
	if res.Width != width || res.Height != height || res.T != frames || len(res.Sections) != sections {
		t.Errorf("%d×%d, %d frames, %d sections; Studio's %d×%d, %d, %d", res.Width, res.Height, res.T, len(res.Sections),
			width, height, frames, sections)
	}
	for i, s := range res.Sections {
		r := secs[i]
		if req.forward() {
			r.Padding = 0 // Studio's Video F1 marks its sections 1, …, 1, 0; framepack's forward ones have none
		}
		if s.Padding != r.Padding || s.LatentFrames != r.LatentFrames || s.Frames != r.PixelFrames {
			t.Errorf("section %d: padding %d, %d latent frames, %d video frames; Studio's %d, %d, %d",
				i+1, s.Padding, s.LatentFrames, s.Frames, r.Padding, r.LatentFrames, r.PixelFrames)
		}
	}
	for k := 1; k <= sections; k++ {
		if history[k] == nil {
			t.Errorf("no history latents reported after section %d", k)
			continue
		}
		c.Compare(t, fmt.Sprintf("history_latents_section_%d", k), history[k])
	}
	if pixels == nil {
		t.Fatal("no pixels reported after the last section")
	}
	c.Compare(t, "pixels", pixels)
}
