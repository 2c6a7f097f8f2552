package randmodel

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"

	"github.com/framepack-go/framepack/tinymodel"
)

// The released config.json values (docs: spec of the released
// checkpoints): lllyasviel/FramePackI2V_HY's transformer,
// hunyuanvideo-community/HunyuanVideo's text encoders and VAE,
// lllyasviel/flux_redux_bfl's image encoder and feature extractor.
func releasedConfigs() map[string]map[string]any {
	return map[string]map[string]any{
		"transformer": {
			"_class_name": "HunyuanVideoTransformer3DModelPacked", "_diffusers_version": "0.33.0.dev0",
			"attention_head_dim": 128, "guidance_embeds": true, "has_clean_x_embedder": true, "has_image_proj": true,
			"image_proj_dim": 1152, "in_channels": 16, "mlp_ratio": 4.0, "num_attention_heads": 24, "num_layers": 20,
			"num_refiner_layers": 2, "num_single_layers": 40, "out_channels": 16, "patch_size": 2, "patch_size_t": 1,
			"pooled_projection_dim": 768, "qk_norm": "rms_norm", "rope_axes_dim": []int{16, 56, 56}, "rope_theta": 256.0,
			"text_embed_dim": 4096,
		},
		"text_encoder": {
			"architectures": []string{"LlamaModel"}, "attention_bias": false, "attention_dropout": 0.0, "bos_token_id": 128000,
			"eos_token_id": 128001, "head_dim": 128, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
			"intermediate_size": 14336, "max_position_embeddings": 8192, "mlp_bias": false, "model_type": "llama",
			"num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "pretraining_tp": 1,
			"rms_norm_eps": 1e-05, "rope_scaling": nil, "rope_theta": 500000.0, "tie_word_embeddings": false,
			"torch_dtype": "float16", "transformers_version": "4.46.3", "use_cache": true, "vocab_size": 128320,
		},
		"text_encoder_2": {
			"architectures": []string{"CLIPTextModel"}, "attention_dropout": 0.0, "bos_token_id": 0, "dropout": 0.0,
			"eos_token_id": 2, "hidden_act": "quick_gelu", "hidden_size": 768, "initializer_factor": 1.0,
			"initializer_range": 0.02, "intermediate_size": 3072, "layer_norm_eps": 1e-05, "max_position_embeddings": 77,
			"model_type": "clip_text_model", "num_attention_heads": 12, "num_hidden_layers": 12, "pad_token_id": 1,
			"projection_dim": 768, "torch_dtype": "float16", "transformers_version": "4.48.0.dev0", "vocab_size": 49408,
		},
		"image_encoder": {
			"architectures": []string{"SiglipVisionModel"}, "attention_dropout": 0.0, "hidden_act": "gelu_pytorch_tanh",
			"hidden_size": 1152, "image_size": 384, "intermediate_size": 4304, "layer_norm_eps": 1e-06,
			"model_type": "siglip_vision_model", "num_attention_heads": 16, "num_channels": 3, "num_hidden_layers": 27,
			"patch_size": 14, "torch_dtype": "bfloat16", "transformers_version": "4.46.2",
		},
		// diffusers' default AutoencoderKLHunyuanVideo configuration.
		"vae": {
			"_class_name": "AutoencoderKLHunyuanVideo", "_diffusers_version": "0.32.0.dev0", "act_fn": "silu",
			"block_out_channels": []int{128, 256, 512, 512},
			"down_block_types":   []string{"HunyuanVideoDownBlock3D", "HunyuanVideoDownBlock3D", "HunyuanVideoDownBlock3D", "HunyuanVideoDownBlock3D"},
			"in_channels":        3, "latent_channels": 16, "layers_per_block": 2, "mid_block_add_attention": true,
			"norm_num_groups": 32, "out_channels": 3, "scaling_factor": 0.476986, "spatial_compression_ratio": 8,
			"temporal_compression_ratio": 4,
			"up_block_types":             []string{"HunyuanVideoUpBlock3D", "HunyuanVideoUpBlock3D", "HunyuanVideoUpBlock3D", "HunyuanVideoUpBlock3D"},
		},
	}
}

// preprocessorConfig is flux_redux_bfl's feature_extractor/preprocessor_config.json.
var preprocessorConfig = map[string]any{
	"do_convert_rgb": nil, "do_normalize": true, "do_rescale": true, "do_resize": true,
	"image_mean": []float64{0.5, 0.5, 0.5}, "image_processor_type": "SiglipImageProcessor",
	"image_std": []float64{0.5, 0.5, 0.5}, "processor_class": "SiglipProcessor", "resample": 3,
	"rescale_factor": 0.00392156862745098, "size": map[string]int{"height": 384, "width": 384},
}

// preprocessorFor is the feature extractor's config for the image encoder
// among cs: the released one, resizing to the encoder's image size.
func preprocessorFor(cs []*component) map[string]any {
	out := maps.Clone(preprocessorConfig)
	for _, c := range cs {
		if c.folder != "image_encoder" {
			continue
		}
		var n int
		switch v := c.config["image_size"].(type) {
		case int:
			n = v
		case json.Number:
			i, err := v.Int64()
			if err != nil {
				continue
			}
			n = int(i)
		default:
			continue
		}
		out["size"] = map[string]int{"height": n, "width": n}
	}
	return out
}

// tinyConfigs are the embedded tiny model's configs (tinymodel),
// with the released vocabulary sizes so that the released tokenizer ids
// (LLaMA-3's 128000…, CLIP's 49406/49407) index the embeddings, and the
// released special-token ids and dtypes.
func tinyConfigs() (map[string]map[string]any, error) {
	out := map[string]map[string]any{}
	for _, part := range []string{"transformer", "text_encoder", "text_encoder_2", "image_encoder", "vae"} {
		raw, err := fs.ReadFile(tinymodel.FS(), part+"/config.json")
		if err != nil {
			return nil, fmt.Errorf("tiny %s config: %w", part, err)
		}
		// json.Number keeps each number as written (1.0 stays a float for
		// transformers' typed config fields, 64 an int).
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			return nil, fmt.Errorf("tiny %s config: %w", part, err)
		}
		out[part] = m
	}
	rel := releasedConfigs()
	for _, part := range []string{"text_encoder", "text_encoder_2", "image_encoder"} {
		delete(out[part], "dtype")
		out[part]["torch_dtype"] = rel[part]["torch_dtype"]
	}
	for _, k := range []string{"vocab_size", "bos_token_id", "eos_token_id"} {
		out["text_encoder"][k] = rel["text_encoder"][k]
	}
	delete(out["text_encoder"], "pad_token_id")
	for _, k := range []string{"vocab_size", "bos_token_id", "eos_token_id", "pad_token_id"} {
		out["text_encoder_2"][k] = rel["text_encoder_2"][k]
	}
	return out, nil
}
