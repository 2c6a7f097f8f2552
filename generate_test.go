package framepack

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/framepack-go/framepack/backend/cpu"
	"github.com/framepack-go/framepack/convchain"
	"github.com/framepack-go/framepack/memory"
	"github.com/framepack-go/framepack/section"
	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/tinymodel"
	"github.com/framepack-go/framepack/vae"
	"github.com/framepack-go/framepack/video"
)

var tiny struct {
	once sync.Once
	dir  string
	err  error
}

// tinyDir extracts the embedded tiny model once for the package's tests.
func tinyDir(t *testing.T) string {
	tiny.once.Do(func() {
		tiny.dir, tiny.err = os.MkdirTemp("", "framepack-test-tiny-")
		if tiny.err == nil {
			tiny.err = tinymodel.Extract(tiny.dir)
		}
	})
	if tiny.err != nil {
		t.Fatal(tiny.err)
	}
	return tiny.dir
}

func TestMain(m *testing.M) {
	convchain.MaybeRunChild() // a conv3d search (or an injected hang) runs in a child copy of this binary
	code := m.Run()
	if tiny.dir != "" {
		os.RemoveAll(tiny.dir)
	}
	os.Exit(code)
}

// logWriter is where the tests' pipelines log: stderr with -v.
func logWriter() io.Writer {
	if testing.Verbose() {
		return os.Stderr
	}
	return io.Discard
}

func quietLogger(t *testing.T) *slog.Logger { return slog.New(slog.NewTextHandler(logWriter(), nil)) }

func loadTiny(t *testing.T) *Pipeline {
	t.Helper()
	p, err := Load(tinyDir(t), Options{Device: DeviceCPU, Logger: quietLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// loadTinyLogged loads the tiny model on the CPU with opts (Device and
// Logger set here) and keeps its debug log; the pipeline closes when the
// test ends.
func loadTinyLogged(t *testing.T, opts Options) (*Pipeline, *bytes.Buffer) {
	t.Helper()
	var logs bytes.Buffer
	opts.Device = DeviceCPU
	opts.Logger = slog.New(slog.NewTextHandler(io.MultiWriter(&logs, logWriter()), &slog.HandlerOptions{Level: slog.LevelDebug}))
	p, err := Load(tinyDir(t), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p, &logs
}

// generateQuiet runs req on p without its Progress, failing the test on an
// error.
func generateQuiet(t *testing.T, p *Pipeline, req Request) *Result {
	t.Helper()
	req.Progress = nil
	res, err := p.Generate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// testImage is the middle strip of the test image, 256×85: at resolution
// 64 its bucket is 96×32, the smallest a job has (half the pixels of the
// whole image's, which the decodes that dominate a job's time scale with).
func testImage(t *testing.T) *section.RGB {
	t.Helper()
	img, err := section.LoadImage(filepath.Join("testdata", "images", "scene.png"))
	if err != nil {
		t.Fatal(err)
	}
	return img.Crop(0, 53, img.W, 138)
}

// smallRequest is a quick job on the tiny model: 64-resolution buckets
// (a 96×32 crop of testImage, 12×4 latents), a short window and few steps.
func smallRequest(img *section.RGB) Request {
	r := DefaultRequest()
	r.RGB = img
	r.Prompt = "A red kite flies over green hills."
	r.Resolution = 64
	r.LatentWindowSize = 3
	r.Steps = 4
	return r
}

func TestGenerateTiny(t *testing.T) {
	t.Parallel() // its own pipelines; the tests that measure the process run first, alone
	p := loadTiny(t)
	img := testImage(t)
	for _, c := range []struct {
		name     string
		seconds  float64
		sections int
	}{
		{"one section", 0.2, 1},  // round(6/12) = 0 → 1
		{"two sections", 0.8, 2}, // round(24/12) = 2
	} {
		t.Run(c.name, func(t *testing.T) {
			req := smallRequest(img)
			req.Seconds = c.seconds
			var steps, stages, done, tiles int
			req.Progress = func(pr Progress) {
				if pr.Stage == StageSectionDone {
					// The history latents (the start latent only after the
					// last section) and the video so far.
					done++
					if pr.Stats == nil || pr.Stats.Index != pr.Section || pr.Stats.Decode <= 0 {
						t.Errorf("section %d done: stats %+v", pr.Section, pr.Stats)
					}
					n := req.LatentWindowSize * pr.Section
					if pr.Section == pr.Sections {
						n++
					}
					if pr.Latents == nil || pr.Latents.Dim(2) != n || pr.Pixels == nil || pr.Pixels.Dim(2) != pr.Frames || pr.Frames != 4*n-3 {
						t.Errorf("section %d done: latents %v, pixels %v, %d frames; want %d latent frames", pr.Section, pr.Latents, pr.Pixels, pr.Frames, n)
					}
					return
				}
				if pr.Stage == StageSample {
					steps++
					if pr.Denoised == nil || pr.Denoised.Dim(2) != req.LatentWindowSize {
						t.Errorf("step %d: denoised %v", pr.Step, pr.Denoised)
					}
					if pr.Step == pr.Steps {
						// FramePack's preview: the window's latent frames side by side.
						im, err := pr.PreviewRGB()
						if d := pr.Denoised.Shape(); err != nil || im.W != d[2]*d[4] || im.H != d[3] {
							t.Errorf("preview %v for latents %v: %v", im, d, err)
						}
					}
				} else if pr.Tile == 0 { // Tile > 0: a decode's tiles
					stages++
					if pr.Stage == StageDecode {
						// The report starting a decode counts its tiles.
						if pr.Tiles < 1 {
							t.Errorf("section %d's decode starts with %d tiles", pr.Section, pr.Tiles)
						}
						tiles = pr.Tiles
					}
				} else if pr.Tiles != tiles || pr.Tile > tiles {
					t.Errorf("section %d: tile %d/%d of a decode planned in %d", pr.Section, pr.Tile, pr.Tiles, tiles)
				}
			}
			res, err := p.Generate(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			lws := req.LatentWindowSize
			plan, err := section.NewPlan(req.Seconds, lws)
			if err != nil || plan.Sections != c.sections || len(res.Sections) != c.sections {
				t.Fatalf("%d sections run, the plan has %d (%v), want %d", len(res.Sections), plan.Sections, err, c.sections)
			}
			wantFrames := 4*(lws*c.sections+1) - 3
			if res.T != wantFrames || res.W != res.Width || res.H != res.Height || len(res.Pix) != res.T*res.H*res.W*3 {
				t.Errorf("frames %d×%d×%d (%d bytes), want %d frames of the %d×%d bucket", res.T, res.W, res.H, len(res.Pix), wantFrames, res.Width, res.Height)
			}
			if bh, bw, _ := section.NearestBucket(img.H, img.W, 64); res.Width != bw || res.Height != bh {
				t.Errorf("bucket %d×%d, want %d×%d", res.Width, res.Height, bw, bh)
			}
			if sh := res.Latents.Shape(); sh[2] != lws*c.sections+1 || sh[3] != res.Height/8 || sh[4] != res.Width/8 {
				t.Errorf("latents %v", sh)
			}
			if steps != c.sections*req.Steps || stages != 3+c.sections || done != c.sections {
				t.Errorf("%d progress steps, %d stage reports and %d sections done, want %d, %d and %d",
					steps, stages, done, c.sections*req.Steps, 3+c.sections, c.sections)
			}
			if len(res.Pix) != res.T*res.H*res.W*3 {
				t.Errorf("%d bytes of pixels for %d frames of %d×%d", len(res.Pix), res.T, res.W, res.H)
			}
			checkEnds(t, p, req, res)
			if c.sections > 1 {
				// The same seed gives the same video, noise drawn for
				// every section from one generator, also from a
				// pipeline whose budget makes it load the transformer
				// and the VAE decoder for their stage only.
				small, logs := loadTinyLogged(t, Options{VRAMLimit: memory.Bytes(64 * memory.MiB), Preserve: memory.Bytes(60 * memory.MiB)})
				again := generateQuiet(t, small, req)
				if !bytes.Equal(again.Pix, res.Pix) {
					t.Error("the same request gave different frames")
				}
				if n := strings.Count(logs.String(), "transformer loaded"); n != c.sections {
					t.Errorf("the transformer was loaded %d times under the small budget, want once a section", n)
				}
				if again.PeakBytes > 64<<20 {
					t.Errorf("peak %d bytes above the 64 MiB cap", again.PeakBytes)
				}
			} else {
				// The GPU policies (encoders placed on the host when the
				// device lacks room, transformer blocks streamed, reload
				// per section), run on the CPU, change nothing.
				fake, logs := loadTinyLogged(t, Options{})
				fake.gpu = true
				fake.be = memory.Budgeted(fake.dev.CPU, memory.Budget{Device: "small", Total: 64 << 20, Cap: 64 << 20, Preserve: 61 << 20})
				streamed := generateQuiet(t, fake, req)
				if !bytes.Equal(streamed.Pix, res.Pix) {
					t.Error("the streamed transformer and host-placed encoders gave different frames")
				}
				for _, want := range []string{"text_encoder needs about", "image_encoder needs about", "blocks streamed from host memory", "loaded for its stage only"} {
					if !strings.Contains(logs.String(), want) {
						t.Errorf("no log line saying %q", want)
					}
				}
				req.Seed++
				other := generateQuiet(t, p, req)
				if bytes.Equal(other.Pix, res.Pix) {
					t.Error("another seed gave identical frames")
				}
			}
		})
	}
}

// checkEnds checks where the loop put what: the latents start with the
// start latent (the last section prepends it) and, with two sections, the
// video's last frame is exactly the last frame of the first section's
// decode (the soft append's weight there is 1). (The first frame depends on
// every latent of its decode through the VAE's GroupNorms.)
func checkEnds(t *testing.T, p *Pipeline, req Request, res *Result) {
	t.Helper()
	lws := req.LatentWindowSize
	all := res.Latents
	crop, err := section.ResizeAndCenterCrop(req.RGB, res.Width, res.Height)
	if err != nil {
		t.Fatal(err)
	}
	j := p.newJob(context.Background(), req)
	start, err := j.encodeImage(crop)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.unloadAll(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(start[0].Float32s(), section.Frames(all, 0, 1).Float32s()) {
		t.Error("the first latent is not the start latent")
	}
	if len(res.Sections) != 2 {
		return
	}
	v, err := vae.Load(filepath.Join(tinyDir(t), "vae"), cpu.New(), vae.Options{NoEncoder: true})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	z := section.Frames(all, 1+lws, 1+2*lws)
	zs := z.Float32s()
	for i := range zs {
		zs[i] /= v.ScalingFactor()
	}
	s := tensor.NewScope(cpu.New())
	defer s.Close()
	var px *tensor.Tensor
	if err := tensor.Catch(func() { px = v.Decode(s, z, vae.DefaultDecode()) }); err != nil {
		t.Fatal(err)
	}
	f, err := video.FromPixels(px)
	if err != nil {
		t.Fatal(err)
	}
	n := f.H * f.W * 3
	if !bytes.Equal(res.Pix[(res.T-1)*n:], f.Pix[(f.T-1)*n:]) {
		t.Error("the last frame is not the first section's last decoded frame")
	}
}

func TestGenerateCancel(t *testing.T) {
	p := loadTiny(t)
	req := smallRequest(testImage(t))
	req.Seconds = 0.8
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req.Progress = func(pr Progress) {
		if pr.Stage == StageSample && pr.Section == 1 && pr.Step == 2 {
			cancel()
		}
	}
	res, err := p.Generate(ctx, req)
	if !errors.Is(err, context.Canceled) || res != nil {
		t.Fatalf("Generate after cancel: %v, %v", res, err)
	}
	// Cancelled before it starts.
	res, err = p.Generate(ctx, req)
	if !errors.Is(err, context.Canceled) || res != nil {
		t.Fatalf("Generate with a cancelled context: %v, %v", res, err)
	}
	// The pipeline is usable afterwards and nothing stayed loaded.
	if in := p.MemoryStats().InUse; in != 0 {
		t.Errorf("%d bytes still in use after a cancelled job", in)
	}
	req.Progress = nil
	req.Seconds = 0.2
	if _, err := p.Generate(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	// Its models stay loaded for the next job until Unload.
	if err := p.Unload(); err != nil {
		t.Fatal(err)
	}
	if in := p.MemoryStats().InUse; in != 0 {
		t.Errorf("%d bytes still in use after a job and Unload", in)
	}
}
