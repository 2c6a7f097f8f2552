package framepack

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/framepack-go/framepack/internal/testutil/errtest"
	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/weights"
)

// tinyEdited is a copy of the tiny model whose part's weights (and, when
// cfg is set, config.json) are changed: the other parts are links to the
// extracted tiny model.
func tinyEdited(t *testing.T, part string, edit func(map[string]*tensor.Tensor), cfg func(string) string) string {
	t.Helper()
	src := tinyDir(t)
	dir := t.TempDir()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != part {
			if err := os.Symlink(filepath.Join(src, e.Name()), filepath.Join(dir, e.Name())); err != nil {
				t.Fatal(err)
			}
		}
	}
	files, err := os.ReadDir(filepath.Join(src, part))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, part), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		in, out := filepath.Join(src, part, f.Name()), filepath.Join(dir, part, f.Name())
		if strings.HasSuffix(f.Name(), ".safetensors") && edit != nil {
			ck, err := weights.OpenFile(in)
			if err != nil {
				t.Fatal(err)
			}
			ts := map[string]*tensor.Tensor{}
			for _, name := range ck.Names() {
				h, err := ck.Host(name)
				if err != nil {
					t.Fatal(err)
				}
				c := tensor.New(h.DType(), h.Shape()...)
				copy(c.HostBytes(), h.HostBytes())
				ts[name] = c
			}
			ck.Close()
			edit(ts)
			if err := weights.Save(out, ts, nil); err != nil {
				t.Fatal(err)
			}
			continue
		}
		b, err := os.ReadFile(in)
		if err != nil {
			t.Fatal(err)
		}
		if f.Name() == "config.json" && cfg != nil {
			b = []byte(cfg(string(b)))
		}
		if err := os.WriteFile(out, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// setNaN puts a NaN into the first element of a float tensor.
func setNaN(t *testing.T, ts map[string]*tensor.Tensor, name string) {
	t.Helper()
	w := ts[name]
	if w == nil {
		t.Fatalf("no tensor %q", name)
	}
	switch w.DType() {
	case tensor.F32:
		w.Float32s()[0] = float32(math.NaN())
	case tensor.F16, tensor.BF16:
		w.Uint16s()[0] = 0x7fff // a NaN in both
	default:
		t.Fatalf("%s is %s", name, w.DType())
	}
}

// A NaN in the weights is an error naming the stage where it surfaced,
// never a black video.
func TestNonFiniteIsAnError(t *testing.T) {
	img := testImage(t)
	for _, c := range []struct {
		name, part, tensor string
		want               []string
	}{
		{"transformer", PartTransformer, "proj_out.bias", []string{"section 1 of 1", "sampling produced non-finite latents", "NaN"}},
		{"vae decoder", PartVAE, "decoder.conv_out.conv.bias", []string{"section 1 of 1", "the decoder produced non-finite pixels"}},
		{"vae encoder", PartVAE, "encoder.conv_out.conv.bias", []string{"vae encode produced non-finite start latents"}},
		{"image encoder", PartImageEncoder, "vision_model.post_layernorm.bias", []string{"image encode produced non-finite embeddings"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := tinyEdited(t, c.part, func(ts map[string]*tensor.Tensor) { setNaN(t, ts, c.tensor) }, nil)
			p, err := Load(dir, Options{Device: DeviceCPU, Logger: quietLogger(t)})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			req := smallRequest(img)
			req.Seconds = 0.2
			req.Steps = 2
			res, err := p.Generate(context.Background(), req)
			if err == nil {
				t.Fatalf("a NaN in %s made a %d-frame video", c.tensor, res.T)
			}
			t.Logf("NaN in %s: %v", c.tensor, err)
			errtest.Mentions(t, err, c.want...)
		})
	}
}

// A VAE config whose scaling factor would make the latents non-finite
// (they are divided by it) is refused at Load, naming the file.
func TestLoadRefusesBadScalingFactor(t *testing.T) {
	for _, v := range []string{"0", "-0.3", "0.0"} {
		dir := tinyEdited(t, PartVAE, nil, func(cfg string) string {
			return strings.Replace(cfg, `"scaling_factor": 0.476986`, `"scaling_factor": `+v, 1)
		})
		_, err := Load(dir, Options{Device: DeviceCPU, Logger: quietLogger(t)})
		if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, PartVAE, "config.json")) || !strings.Contains(err.Error(), "scaling_factor") {
			t.Errorf("scaling_factor %s: %v, want an error naming vae/config.json and scaling_factor", v, err)
		}
	}
}

// Load checks every part's weights before any model runs: a missing,
// misshapen or integer tensor in the VAE decoder (and in each other part)
// fails Load, naming the file and the tensor, instead of surfacing at the
// first section's decode after sampling.
func TestLoadChecksEveryPartsWeights(t *testing.T) {
	drop := func(name string) func(map[string]*tensor.Tensor) {
		return func(ts map[string]*tensor.Tensor) {
			if ts[name] == nil {
				t.Fatalf("no tensor %q", name)
			}
			delete(ts, name)
		}
	}
	reshape := func(name string) func(map[string]*tensor.Tensor) {
		return func(ts map[string]*tensor.Tensor) {
			if ts[name] == nil {
				t.Fatalf("no tensor %q", name)
			}
			ts[name] = tensor.New(ts[name].DType(), ts[name].Numel())
		}
	}
	retype := func(name string) func(map[string]*tensor.Tensor) {
		return func(ts map[string]*tensor.Tensor) {
			if ts[name] == nil {
				t.Fatalf("no tensor %q", name)
			}
			ts[name] = tensor.New(tensor.I64, ts[name].Shape()...)
		}
	}
	for _, c := range []struct {
		name, part string
		edit       func(map[string]*tensor.Tensor)
		want       []string
	}{
		{"vae decoder tensor missing", PartVAE, drop("decoder.conv_out.conv.weight"),
			[]string{"model part vae", "diffusion_pytorch_model.safetensors", "decoder.conv_out.conv.weight"}},
		{"vae decoder tensor reshaped", PartVAE, reshape("decoder.up_blocks.0.resnets.0.conv1.conv.weight"),
			[]string{"model part vae", "decoder.up_blocks.0.resnets.0.conv1.conv.weight", "[27648]", "[32 32 3 3 3]"}},
		{"vae decoder tensor of ints", PartVAE, retype("decoder.conv_in.conv.bias"),
			[]string{"model part vae", "decoder.conv_in.conv.bias", "I64"}},
		{"transformer block tensor reshaped", PartTransformer, reshape("single_transformer_blocks.1.proj_out.weight"),
			[]string{"model part transformer", "single_transformer_blocks.1.proj_out.weight", "[20480]", "[64 320]"}},
		{"text encoder tensor missing", PartTextEncoder, drop("layers.3.mlp.down_proj.weight"),
			[]string{"model part text_encoder", "model.safetensors", "layers.3.mlp.down_proj.weight"}},
		{"clip tensor reshaped", PartTextEncoder2, reshape("text_model.encoder.layers.1.mlp.fc1.weight"),
			[]string{"model part text_encoder_2", "layers.1.mlp.fc1.weight", "[2048]"}},
		{"siglip tensor missing", PartImageEncoder, drop("vision_model.post_layernorm.weight"),
			[]string{"model part image_encoder", "post_layernorm.weight"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := tinyEdited(t, c.part, c.edit, nil)
			p, err := Load(dir, Options{Device: DeviceCPU, Logger: quietLogger(t)})
			if err == nil {
				p.Close()
				t.Fatal("loaded")
			}
			t.Log(err)
			errtest.Mentions(t, err, c.want...)
		})
	}
}
