package randmodel

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/framepack-go/framepack/backend/cpu"
	"github.com/framepack-go/framepack/model/clip"
	"github.com/framepack-go/framepack/model/hunyuan"
	"github.com/framepack-go/framepack/model/llama"
	"github.com/framepack-go/framepack/model/siglip"
	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/vae"
)

// writeComponent writes one component folder (config.json and weights).
func writeComponent(t *testing.T, c *component) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, c.folder), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg, err := marshal(c.config)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeAtomic(filepath.Join(dir, c.folder, "config.json"), cfg); err != nil {
		t.Fatal(err)
	}
	files, err := plan(dir, c)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeShards(context.Background(), files, 1, 0, nil); err != nil {
		t.Fatal(err)
	}
	if len(files) > 1 {
		idx, err := index(files)
		if err != nil {
			t.Fatal(err)
		}
		if err := writeAtomic(filepath.Join(dir, c.folder, c.weightsName+".safetensors.index.json"), idx); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, c.folder)
}

// TestDistinctDimsLoad writes each component at a configuration whose
// dimensions all differ (where the tiny reference configs repeat some,
// e.g. text_embed_dim = inner dim, a SigLIP image a multiple of its patch),
// and loads it through this project's loaders, which check every shape.
func TestDistinctDimsLoad(t *testing.T) {
	be := cpu.New()
	mk := func(folder, weights, dtype string, shard int64, cfg map[string]any) *component {
		ts, err := loaderTensors(folder, cfg)
		if err != nil {
			t.Fatalf("%s: %v", folder, err)
		}
		return &component{folder: folder, config: cfg, weightsName: weights, dtype: dtype, maxShard: shard, tensors: ts}
	}

	tr := map[string]any{"_class_name": "HunyuanVideoTransformer3DModelPacked", "attention_head_dim": 16, "guidance_embeds": true,
		"has_clean_x_embedder": true, "has_image_proj": true, "image_proj_dim": 20, "in_channels": 16, "mlp_ratio": 3.0,
		"num_attention_heads": 3, "num_layers": 2, "num_refiner_layers": 1, "num_single_layers": 3, "out_channels": 16,
		"patch_size": 2, "patch_size_t": 1, "pooled_projection_dim": 24, "qk_norm": "rms_norm", "rope_axes_dim": []int{4, 6, 6},
		"rope_theta": 256.0, "text_embed_dim": 40}
	c := mk("transformer", "diffusion_pytorch_model", "BF16", 100_000, tr)
	loads[*hunyuan.Model](t, "transformer")(hunyuan.Load(writeComponent(t, c), be, hunyuan.Options{DType: tensor.F32}))

	ll := map[string]any{"architectures": []string{"LlamaModel"}, "hidden_size": 48, "intermediate_size": 80, "num_hidden_layers": 2,
		"num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 50, "rms_norm_eps": 1e-5,
		"rope_theta": 500000.0, "rope_scaling": nil, "max_position_embeddings": 64, "hidden_act": "silu", "model_type": "llama"}
	c = mk("text_encoder", "model", "F16", 10_000, ll)
	loads[*llama.Model](t, "text_encoder")(llama.Load(writeComponent(t, c), be, tensor.F32))

	cl := map[string]any{"architectures": []string{"CLIPTextModel"}, "hidden_size": 36, "intermediate_size": 56, "num_hidden_layers": 2,
		"num_attention_heads": 3, "vocab_size": 70, "max_position_embeddings": 77, "hidden_act": "quick_gelu", "layer_norm_eps": 1e-5,
		"eos_token_id": 2, "bos_token_id": 0, "pad_token_id": 1, "model_type": "clip_text_model"}
	c = mk("text_encoder_2", "model", "F16", 0, cl)
	loads[*clip.Model](t, "text_encoder_2")(clip.Load(writeComponent(t, c), be, tensor.F32))

	sg := map[string]any{"architectures": []string{"SiglipVisionModel"}, "hidden_size": 40, "intermediate_size": 72, "num_hidden_layers": 2,
		"num_attention_heads": 4, "image_size": 30, "patch_size": 7, "num_channels": 3, "layer_norm_eps": 1e-6,
		"hidden_act": "gelu_pytorch_tanh", "model_type": "siglip_vision_model"}
	c = mk("image_encoder", "model", "BF16", 0, sg)
	if m, err := siglip.Load(writeComponent(t, c), be, tensor.F32); err != nil {
		t.Errorf("image_encoder: %v", err)
	} else {
		// 30 is not a multiple of 7, as the released 384 is not of 14.
		s := tensor.NewScope(be)
		err := tensor.Catch(func() {
			out := m.Forward(s, tensor.FromFloat32(make([]float32, 3*30*30), 1, 3, 30, 30))
			if sh := out.Shape(); len(sh) != 3 || sh[1] != 16 || sh[2] != 40 {
				t.Errorf("image_encoder output %v, want (1, 16, 40)", sh)
			}
		})
		if err != nil {
			t.Errorf("image_encoder forward: %v", err)
		}
		s.Close()
		m.Close()
	}

	va := map[string]any{"_class_name": "AutoencoderKLHunyuanVideo", "act_fn": "silu", "block_out_channels": []int{8, 16, 24, 24},
		"in_channels": 3, "latent_channels": 16, "layers_per_block": 2, "mid_block_add_attention": true, "norm_num_groups": 4,
		"out_channels": 3, "scaling_factor": 0.476986, "spatial_compression_ratio": 8, "temporal_compression_ratio": 4,
		"down_block_types": []string{"HunyuanVideoDownBlock3D", "HunyuanVideoDownBlock3D", "HunyuanVideoDownBlock3D", "HunyuanVideoDownBlock3D"},
		"up_block_types":   []string{"HunyuanVideoUpBlock3D", "HunyuanVideoUpBlock3D", "HunyuanVideoUpBlock3D", "HunyuanVideoUpBlock3D"}}
	c = mk("vae", "diffusion_pytorch_model", "F16", 0, va)
	loads[*vae.VAE](t, "vae")(vae.Load(writeComponent(t, c), be, vae.Options{DType: tensor.F32}))
}

// loads checks that the component name loads, and frees it.
func loads[M interface{ Close() }](t *testing.T, name string) func(M, error) {
	return func(m M, err error) {
		t.Helper()
		if err != nil {
			t.Errorf("%s: %v", name, err)
			return
		}
		m.Close()
	}
}
