package hunyuan

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/framepack-go/framepack/backend/cpu"
	"github.com/framepack-go/framepack/internal/testutil/errtest"
	"github.com/framepack-go/framepack/internal/testutil/golden"
	"github.com/framepack-go/framepack/internal/testutil/testdevice"
	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/weights"
)

// brokenCopy writes the golden model to a temporary folder with edit
// applied to its tensors.
func brokenCopy(t *testing.T, edit func(map[string]*tensor.Tensor)) string {
	t.Helper()
	return rewriteModel(t, golden.Cases(t, "transformer")[0].ModelDir, edit)
}

// rewriteModel writes the model in src (one safetensors file and its
// config) to a temporary folder with edit applied to its host tensors.
func rewriteModel(t *testing.T, src string, edit func(map[string]*tensor.Tensor)) string {
	t.Helper()
	ck, err := weights.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	ts := map[string]*tensor.Tensor{}
	for _, n := range ck.Names() {
		h, err := ck.Host(n)
		if err != nil {
			t.Fatal(err)
		}
		ts[n] = tensor.ToHost(h)
	}
	edit(ts)
	dir := t.TempDir()
	if err := weights.Save(filepath.Join(dir, "diffusion_pytorch_model.safetensors"), ts, nil); err != nil {
		t.Fatal(err)
	}
	cfg, err := os.ReadFile(filepath.Join(src, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestLoadErrors(t *testing.T) {
	missing := brokenCopy(t, func(ts map[string]*tensor.Tensor) { delete(ts, "transformer_blocks.1.attn.to_q.weight") })
	short := brokenCopy(t, func(ts map[string]*tensor.Tensor) {
		ts["single_transformer_blocks.0.proj_mlp.bias"] = tensor.New(tensor.F32, 3)
	})
	fromFile := Options{HostBlocks: true, StreamFromFile: true}
	for _, c := range []struct {
		name string
		dir  string
		opts Options
		want []string
	}{
		{"missing", missing, Options{}, []string{"transformer_blocks.1.attn.to_q.weight"}},
		{"missing-host", missing, Options{HostBlocks: true}, []string{"transformer_blocks.1.attn.to_q.weight"}},
		{"shape", short, Options{}, []string{"single_transformer_blocks.0.proj_mlp.bias", "[3]", "[256]"}},
		{"shape-host", short, Options{HostBlocks: true}, []string{"single_transformer_blocks.0.proj_mlp.bias", "[3]", "[256]"}},
		// Streaming from the file checks every block's tensors at load time.
		{"missing-file", missing, fromFile, []string{"transformer_blocks.1.attn.to_q.weight"}},
		{"shape-file", short, fromFile, []string{"single_transformer_blocks.0.proj_mlp.bias", "[3]", "[256]"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var be tensor.Backend = cpu.New()
			if c.opts.StreamFromFile {
				be = testdevice.NewFake() // the CPU computes on host memory: nothing streams there
			}
			m, err := Load(c.dir, be, c.opts)
			if err == nil {
				m.Close()
				t.Fatal("loaded a broken checkpoint")
			}
			errtest.Mentions(t, err, c.want...)
			t.Log(err)
		})
	}
}

func TestBadConfig(t *testing.T) {
	cfg := FramePackI2V()
	cfg.RopeAxesDim = []int{16, 56, 54}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "rope_axes_dim") {
		t.Errorf("rope axes summing to 126: %v", err)
	}
	cfg = FramePackI2V()
	cfg.PatchSize = 4
	if err := cfg.Validate(); err == nil {
		t.Error("patch_size 4 accepted")
	}
	if err := FramePackI2V().Validate(); err != nil {
		t.Errorf("FramePackI2V: %v", err)
	}
}

func TestBadInputs(t *testing.T) {
	c := golden.Cases(t, "transformer")[0]
	m := loadModel(t, c.ModelDir, Options{})
	for _, tc := range []struct {
		name string
		edit func(in *Inputs)
		want string
	}{
		{"mask not a prefix", func(in *Inputs) {
			in.EncoderAttentionMask = tensor.FromFloat32([]float32{1, 0, 1, 1, 0, 0, 0, 0, 0, 0}, 1, 10)
		}, "encoder_attention_mask"},
		{"odd width", func(in *Inputs) {
			in.HiddenStates = tensor.New(tensor.F32, 1, 16, 3, 16, 15)
		}, "hidden_states"},
		{"index count", func(in *Inputs) { in.CleanLatent4xIndices = in.CleanLatent4xIndices[:3] }, "clean_latent_4x_indices"},
		{"no image embeddings", func(in *Inputs) { in.ImageEmbeddings = nil }, "image_embeddings"},
		{"timesteps", func(in *Inputs) { in.Timestep = nil }, "timesteps"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := caseInputs(c)
			tc.edit(in)
			s := tensor.NewScope(m.Backend())
			defer s.Close()
			err := tensor.Catch(func() { m.Forward(s, in) })
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one naming %q", err, tc.want)
			}
		})
	}
}
