package randmodel

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/framepack-go/framepack/model/clip"
	"github.com/framepack-go/framepack/model/hunyuan"
	"github.com/framepack-go/framepack/model/llama"
	"github.com/framepack-go/framepack/model/siglip"
	"github.com/framepack-go/framepack/vae"
	"github.com/framepack-go/framepack/weights"
)

// loaderTensors lists the tensors of a component folder with config cfg as
// this project's loader of that part reads them: the config is read by the
// part's ReadConfig (as Load reads config.json) and planned by its Plan, so
// the names and shapes written cannot drift from those the loaders ask
// for. The list is in the order the loader asks, which decides which shard
// holds a tensor (near save_pretrained's module order; the number of shards
// is the released one). Values are weights.FillRandom's, whose
// initialisation follows the name and shape.
func loaderTensors(folder string, cfg map[string]any) ([]weights.Spec, error) {
	dir, err := os.MkdirTemp("", "randmodel-config-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	raw, err := marshal(cfg)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), raw, 0o644); err != nil {
		return nil, err
	}
	switch folder {
	case "transformer":
		return readPlan(dir, hunyuan.ReadConfig, hunyuan.Plan)
	case "text_encoder":
		return readPlan(dir, llama.ReadConfig, llama.Plan)
	case "text_encoder_2":
		return readPlan(dir, clip.ReadConfig, clip.Plan)
	case "image_encoder":
		c, err := siglip.ReadConfig(dir)
		if err != nil {
			return nil, err
		}
		specs, err := siglip.Plan(c)
		return append(specs, siglipHead(c.HiddenSize, c.IntermediateSize)...), err
	case "vae":
		return readPlan(dir, vae.ReadConfig, vae.Plan)
	}
	return nil, fmt.Errorf("no loader for %s", folder)
}

// siglipHead is SiglipVisionModel's attention-pooling head
// (vision_use_head defaults to true): in the released checkpoint, never
// read by FramePack, which takes the last hidden state.
func siglipHead(d, f int) []weights.Spec {
	h := "vision_model.head."
	return []weights.Spec{
		{Name: h + "probe", Shape: []int{1, 1, d}},
		{Name: h + "attention.in_proj_weight", Shape: []int{3 * d, d}},
		{Name: h + "attention.in_proj_bias", Shape: []int{3 * d}},
		{Name: h + "attention.out_proj.weight", Shape: []int{d, d}},
		{Name: h + "attention.out_proj.bias", Shape: []int{d}},
		{Name: h + "layernorm.weight", Shape: []int{d}},
		{Name: h + "layernorm.bias", Shape: []int{d}},
		{Name: h + "mlp.fc1.weight", Shape: []int{f, d}},
		{Name: h + "mlp.fc1.bias", Shape: []int{f}},
		{Name: h + "mlp.fc2.weight", Shape: []int{d, f}},
		{Name: h + "mlp.fc2.bias", Shape: []int{d}},
	}
}

// readPlan reads dir's config.json with read, as the model's Load does, and
// plans its weights.
func readPlan[C any](dir string, read func(string) (C, error), plan func(C) ([]weights.Spec, error)) ([]weights.Spec, error) {
	c, err := read(dir)
	if err != nil {
		return nil, err
	}
	return plan(c)
}
