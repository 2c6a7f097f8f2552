package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/framepack-go/framepack/section"
	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/video"
	"github.com/framepack-go/framepack/weights"
)

// runCLI runs the command line in-process with args and returns its
// standard output and error.
func runCLI(t *testing.T, ctx context.Context, args ...string) (string, error) {
	t.Helper()
	root := newRoot()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	return out.String(), err
}

const sceneImage = "../../testdata/images/scene.png"

var strip struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// stripImage is the middle strip of the test image (256×85) as a PNG, made
// once per test run: at --resolution 64 its bucket is 96×32, half the
// pixels of the whole image's, for the jobs whose checks do not depend on
// the picture (the decodes that dominate a job's time scale with them).
func stripImage(t *testing.T) string {
	t.Helper()
	strip.once.Do(func() {
		img, err := section.LoadImage(sceneImage)
		if err != nil {
			strip.err = err
			return
		}
		c := img.Crop(0, 53, img.W, 138)
		if strip.dir, strip.err = os.MkdirTemp("", "framepack-cli-test-strip-"); strip.err != nil {
			return
		}
		var b bytes.Buffer
		if strip.err = png.Encode(&b, (video.Frames{T: 1, H: c.H, W: c.W, Pix: c.Pix}).Frame(0)); strip.err != nil {
			return
		}
		strip.path = filepath.Join(strip.dir, "strip.png")
		strip.err = os.WriteFile(strip.path, b.Bytes(), 0o644)
	})
	if strip.err != nil {
		t.Fatal(strip.err)
	}
	return strip.path
}

// quick are the flags of a job the tiny model runs in a few seconds.
var quick = []string{"--resolution", "64", "--seconds", "0.2", "--window", "3", "--steps", "3"}

func tinyEnv(t *testing.T) {
	t.Setenv("FRAMEPACK_MODELS", "")
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
}

func TestGenerateBadInput(t *testing.T) {
	tinyEnv(t)
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.png")
	os.WriteFile(garbage, []byte("not an image at all"), 0o644)
	// A PNG whose header claims 100000×100000 pixels.
	var huge bytes.Buffer
	png.Encode(&huge, image.NewGray(image.Rect(0, 0, 1, 1)))
	b := huge.Bytes()
	copy(b[16:24], []byte{0, 1, 0x86, 0xa0, 0, 1, 0x86, 0xa0})
	binary.BigEndian.PutUint32(b[29:33], crc32.ChecksumIEEE(b[12:29])) // IHDR's CRC
	hugePath := filepath.Join(dir, "huge.png")
	os.WriteFile(hugePath, b, 0o644)

	thin := filepath.Join(dir, "thin.png")
	var tb bytes.Buffer
	png.Encode(&tb, image.NewGray(image.Rect(0, 0, 4000, 1)))
	os.WriteFile(thin, tb.Bytes(), 0o644)

	// A LoRA for another model: its modules match nothing of the transformer.
	other := filepath.Join(t.TempDir(), "other.safetensors")
	if err := weights.Save(other, map[string]*tensor.Tensor{
		"lora_te_text_model_encoder_layers_0_mlp_fc1.lora_down.weight": tensor.New(tensor.F32, 1, 4),
		"lora_te_text_model_encoder_layers_0_mlp_fc1.lora_up.weight":   tensor.New(tensor.F32, 4, 1),
	}, nil); err != nil {
		t.Fatal(err)
	}

	pngDir := filepath.Join(t.TempDir(), "d.png")
	os.Mkdir(pngDir, 0o755)

	out := filepath.Join(dir, "out.mp4")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{}, "--image is required"},
		{[]string{"--image", filepath.Join(dir, "missing.png")}, "no such file"},
		{[]string{"--image", garbage}, "not a PNG, JPEG or WebP"},
		{[]string{"--image", hugePath}, "too large"},
		{[]string{"--image", thin}, "aspect ratio"},
		{[]string{"--image", sceneImage, "--seconds", "0"}, "--seconds must be"},
		{[]string{"--image", sceneImage, "--seconds", "121"}, "--seconds must be"},
		{[]string{"--image", sceneImage, "--seconds", "-1"}, "--seconds must be"},
		{[]string{"--image", sceneImage, "--steps", "0"}, "--steps must be"},
		{[]string{"--image", sceneImage, "--window", "40"}, "--window must be"},
		{[]string{"--image", sceneImage, "--cfg", "0.5"}, "--cfg must be"},
		{[]string{"--image", sceneImage, "--rs", "2"}, "--rs must be"},
		{[]string{"--image", sceneImage, "--resolution", "5000"}, "--resolution 5000"},
		{[]string{"--image", sceneImage, "--device", "tpu"}, `--device "tpu"`},
		{[]string{"--image", sceneImage, "--dtype", "int8"}, "--dtype"},
		{[]string{"--image", sceneImage, "--crf", "60"}, "--crf 60"},
		{[]string{"--image", sceneImage, "--vae-tile", "100"}, "--vae-tile 100"},
		{[]string{"--image", sceneImage, "--vram-limit", "lots"}, "--vram-limit"},
		{[]string{"--image", sceneImage, "--ram-limit", "lots"}, "--ram-limit"},
		{[]string{"--image", sceneImage, "--models", filepath.Join(dir, "nowhere")}, "does not exist"},
		{[]string{"--image", sceneImage, "--prompt", "un café"}, "ASCII prompts only"},
		{[]string{"--image", sceneImage, "--prompt", "[0s] a cat [2x] jumps"}, `--prompt: timed prompt: "[2x] jumps" is not a tag`},
		{[]string{"--image", sceneImage, "--prompt", "[0s: a cat] [3s-2s: jumps]"}, "not after its start"},
		{[]string{"--image", sceneImage, "--prompt", "a cat", "--prompts-file", sceneImage}, "--prompt and --prompts-file: give one"},
		{[]string{"--image", sceneImage, "--prompts-file", filepath.Join(dir, "missing.txt")}, "--prompts-file"},
		{[]string{"--image", sceneImage, "--prompt-blend", "-1"}, "prompt blend"},
		{[]string{"--image", sceneImage, "--lora", filepath.Join(dir, "missing.safetensors")}, "--lora: " + filepath.Join(dir, "missing.safetensors") + " is not a file"},
		{[]string{"--image", sceneImage, "--lora", other + ":lots"}, `scale "lots" is not a number`},
		{[]string{"--image", sceneImage, "--lora", other + ":0.5"}, "1 of 1 modules match no weight of the transformer: lora_te_text_model_encoder_layers_0_mlp_fc1"},
		{[]string{"--image", sceneImage, "--model", "f2"}, "--model must be"},
		{[]string{"--image", sceneImage, "--end-image", filepath.Join(dir, "missing.png")}, "--end-image"},
		{[]string{"--image", sceneImage, "--end-image", sceneImage, "--model", "f1"}, "an end image needs"},
		{[]string{"--image", sceneImage, "--end-image", sceneImage, "--embed-interpolation", "cubic"}, "--embed-interpolation must be"},
		{[]string{"--image", sceneImage, "--start-embed-strength", "2"}, "--start-embed-strength must be"},
		{[]string{"--image", sceneImage, "--preview", filepath.Join(dir, "live.jpg")}, "ending in .png"},
		{[]string{"--image", sceneImage, "--preview", filepath.Join(dir, "nowhere", "live.png")}, "does not exist"},
		{[]string{"--image", sceneImage, "--preview", pngDir}, "is a folder"},
		{[]string{"--image", sceneImage, "--cache", "deepcache"}, "--cache must be"},
		{[]string{"--image", sceneImage, "--cache-threshold", "1.5"}, "--cache-threshold must be"},
		{[]string{"--image", sceneImage, "--cache", "magcache", "--cache-threshold", "-0.1"}, "--cache-threshold must be"},
		{[]string{"--image", sceneImage, "--cache", "magcache", "--magcache-k", "0"}, "--magcache-k must be"},
		{[]string{"--image", sceneImage, "--magcache-k", "6"}, "--magcache-k must be"},
		{[]string{"--image", sceneImage, "--magcache-retention", "1.2"}, "--magcache-retention must be"},
		{[]string{"--image", sceneImage, "-o", filepath.Join(dir, "no", "such", "dir", "x.mp4")}, "does not exist"},
		{[]string{"--image", sceneImage, "-o", dir}, "is a folder"},
	} {
		args := append([]string{"generate", "-o", out}, c.args...)
		_, err := runCLI(t, context.Background(), args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want one containing %q", c.args, err, c.want)
		}
		if strings.Count(err.Error(), "\n") > 0 {
			t.Errorf("%v: the error should be one line: %q", c.args, err)
		}
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.Name() != "garbage.png" && e.Name() != "huge.png" && e.Name() != "thin.png" {
			t.Errorf("refused jobs left %s behind", e.Name())
		}
	}
}

// TestGenerateTiny runs the whole command on the built-in tiny model: the
// MP4 when ffmpeg is installed, PNG frames without it.
func TestGenerateTiny(t *testing.T) {
	tinyEnv(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "clip.mp4")
	if _, err := exec.LookPath("ffmpeg"); err != nil {
		t.Log("ffmpeg is not installed: checking the PNG fallback only")
	} else {
		stdout, err := runCLI(t, context.Background(), append([]string{"generate", "--image", sceneImage, "--prompt", "a kite", "-o", out}, quick...)...)
		if err != nil {
			t.Fatal(err)
		}
		// 0.2 s at window 3: one section, 4·(3+1) − 3 = 13 frames.
		if !strings.Contains(stdout, "wrote "+out+": 13 frames") || !strings.Contains(stdout, "peak memory") {
			t.Errorf("summary:\n%s", stdout)
		}
		if st, err := os.Stat(out); err != nil || st.Size() == 0 {
			t.Fatalf("no MP4: %v", err)
		}
		if _, err := exec.LookPath("ffprobe"); err == nil {
			probe, err := exec.Command("ffprobe", "-v", "error", "-count_frames", "-select_streams", "v:0",
				"-show_entries", "stream=width,height,nb_read_frames", "-of", "csv=p=0", out).Output()
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.TrimSpace(string(probe)); got != "96,64,13" {
				t.Errorf("ffprobe: %q, want 96,64,13", got)
			}
		}
	}

	// Without ffmpeg on the PATH: PNG frames in clip_frames/; without
	// --resolution the tiny model runs at 128 (a 128×96 bucket).
	t.Setenv("PATH", t.TempDir())
	os.Remove(out)
	stdout, err := runCLI(t, context.Background(), append([]string{"generate", "--image", sceneImage, "-o", out}, quick[2:]...)...)
	if err != nil {
		t.Fatal(err)
	}
	frames := filepath.Join(dir, "clip_frames")
	if !strings.Contains(stdout, "wrote "+frames+": 13 frames (0.43 s at 30 fps), 128×96") {
		t.Errorf("summary:\n%s", stdout)
	}
	ents, _ := os.ReadDir(frames)
	if len(ents) != 13 {
		t.Errorf("%d PNG frames, want 13", len(ents))
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Error("an MP4 was written without ffmpeg")
	}
}

// TestGenerateCancelled: an interrupted job writes nothing.
func TestGenerateCancelled(t *testing.T) {
	tinyEnv(t)
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := runCLI(t, ctx, append([]string{"generate", "--image", sceneImage, "-o", filepath.Join(dir, "x.mp4")}, quick...)...)
	if err == nil || !strings.Contains(err.Error(), "cancel") {
		t.Fatalf("error %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("a cancelled job left %d entries", len(ents))
	}
}

// TestGenerateF1AndEndImage runs --model f1 and --end-image on the tiny
// model (as PNG frames, one section) and checks the settings file records
// them.
func TestGenerateF1AndEndImage(t *testing.T) {
	tinyEnv(t)
	for _, c := range []struct {
		name string
		args []string
		want map[string]any
	}{
		{"f1", []string{"--model", "f1"}, map[string]any{"model": "f1", "cache": "teacache", "teacache": true}},
		{"magcache", []string{"--model", "f1", "--cache", "magcache", "--magcache-k", "2"},
			map[string]any{"cache": "magcache", "teacache": false, "magcache_k": 2.0, "magcache_retention": 0.2}},
		{"no teacache", []string{"--teacache=false"}, map[string]any{"cache": "none", "teacache": false, "magcache_k": nil}},
		{"end", []string{"--end-image", stripImage(t), "--embed-interpolation", "linear"},
			map[string]any{"model": "framepack", "embed_interpolation": "linear"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "frames")
			args := append(append([]string{"generate", "--image", stripImage(t), "-o", out}, quick...), "--steps", "2")
			if _, err := runCLI(t, context.Background(), append(args, c.args...)...); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(out + ".json")
			if err != nil {
				t.Fatal(err)
			}
			var got map[string]any
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			for k, v := range c.want {
				if got[k] != v {
					t.Errorf("settings %s = %v, want %v", k, got[k], v)
				}
			}
			if c.name == "end" && got["end_image"] == nil {
				t.Error("settings lack end_image")
			}
			// 0.2 s at window 3: 1 section, 4·(3+1)−3 frames.
			if fr, _ := got["frames"].(float64); fr != 13 {
				t.Errorf("%v frames, want 13", got["frames"])
			}
		})
	}
}

// TestGenerateRefusesBeforeWork: bad values and outputs that would replace
// what is not the run's own are usage errors (exit status 2), refused
// before any work, naming the problem; every file stays as it was.
func TestGenerateRefusesBeforeWork(t *testing.T) {
	tinyEnv(t)
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	scene, err := os.ReadFile(sceneImage)
	if err != nil {
		t.Fatal(err)
	}
	img := write("scene.png", scene)
	inMP4 := write("in.mp4", scene) // a PNG, whatever the name says
	frame := write("clip/frame_00000.png", scene)
	prompts := write("prompts.mp4", []byte("a cat"))
	hard := filepath.Join(dir, "hard.mp4")
	if err := os.Link(img, hard); err != nil {
		t.Fatal(err)
	}
	// A model folder whose vae/config.json the settings file of -o
	// models/vae/config would replace, and a user's own clip2.json.
	modelCfg := write("models/vae/config.json", []byte(`{"_class_name": "AutoencoderKLHunyuanVideo"}`))
	userJSON := write("clip2.json", []byte(`{"mine": true}`))
	nullJSON := write("empty.mp4.json", []byte("null"))
	// A LoRA for another model whose name has a colon: it is read (and
	// refused for its modules), not taken for a file and a scale.
	other := filepath.Join(dir, "style:v2.safetensors")
	if err := weights.Save(other, map[string]*tensor.Tensor{
		"lora_te_text_model_encoder_layers_0_mlp_fc1.lora_down.weight": tensor.New(tensor.F32, 1, 4),
		"lora_te_text_model_encoder_layers_0_mlp_fc1.lora_up.weight":   tensor.New(tensor.F32, 4, 1),
	}, nil); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, dir)

	out := filepath.Join(dir, "out.mp4")
	for _, c := range []struct {
		args []string
		want string
	}{
		// Sizes: bad values are usage errors, as the docs say.
		{[]string{"--ram-limit", "garbage"}, `invalid argument "garbage" for "--ram-limit" flag: memory size "garbage"`},
		{[]string{"--ram-limit", "0"}, `invalid argument "0" for "--ram-limit" flag: 0: the host budget must be above 0`},
		{[]string{"--vram-limit", "32M"}, `invalid argument "32M" for "--vram-limit" flag: 32M (32.0 MiB) is below the 64.0 MiB the engine needs`},
		{[]string{"--vram-limit", "0"}, "is below the 64.0 MiB"},
		// A LoRA scale that is no number stops the command, naming the LoRA.
		{[]string{"--lora", other + ":NaN"}, `--lora: lora "` + other + `:NaN": scale "NaN" is not a finite number`},
		{[]string{"--lora", other + ":-Inf"}, "is not a finite number"},
		// An output that is an input, or holds one.
		{[]string{"-o", inMP4, "--image", inMP4}, inMP4 + " is the --image input"},
		{[]string{"-o", hard}, hard + " is the --image input"},
		{[]string{"-o", filepath.Join(dir, "clip"), "--image", frame}, "the --image input " + frame + " is in the folder the frames would replace"},
		{[]string{"-o", inMP4, "--end-image", inMP4}, "is the --end-image input"},
		{[]string{"-o", prompts, "--prompts-file", prompts}, "is the --prompts-file input"},
		// The settings file replaces only a settings file of ours.
		{[]string{"-o", filepath.Join(dir, "models", "vae", "config")}, modelCfg + ", which is not a framepack settings file"},
		{[]string{"-o", filepath.Join(dir, "clip2")}, userJSON + ", which is not a framepack settings file"},
		{[]string{"-o", filepath.Join(dir, "empty.mp4")}, nullJSON + ", which is not a framepack settings file"},
		// A FIFO where PNG frames would go is named for what it is.
		{[]string{"-o", fifo}, "-o " + fifo + " exists and is not a regular file (a named pipe)"},
	} {
		args := append(append([]string{"generate", "--image", img, "-o", out}, quick...), c.args...)
		_, err := runCLI(t, context.Background(), args...)
		var ue *usageError
		if err == nil || !strings.Contains(err.Error(), c.want) || !errors.As(err, &ue) {
			t.Errorf("%v: error %v, want a usage error containing %q", c.args, err, c.want)
		}
	}
	// A LoRA file whose name has a colon is that file.
	if _, err := runCLI(t, context.Background(), "generate", "--image", img, "-o", out, "--lora", other); err == nil ||
		!strings.Contains(err.Error(), "1 of 1 modules match no weight of the transformer") {
		t.Errorf("--lora %s: %v, want the LoRA read (and refused for its modules)", other, err)
	}
	if after := snapshot(t, dir); after != before {
		t.Errorf("the folder changed:\nbefore %s\nafter  %s", before, after)
	}
}

// snapshot lists dir's files with their sizes and contents' sums.
func snapshot(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s %v", strings.TrimPrefix(p, dir), info.Mode().Type())
		if info.Mode().IsRegular() {
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			fmt.Fprintf(&b, " %x", crc32.ChecksumIEEE(data))
		}
		b.WriteString("; ")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}
