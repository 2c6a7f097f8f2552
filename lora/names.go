package lora

import (
	"fmt"
	"strings"

	"github.com/framepack-go/framepack/weights"
)

// targets finds the checkpoint tensors (linear weights) a LoRA module
// adapts. Modules are named as diffusers names the packed transformer's
// linears ("transformer_blocks.0.attn.to_q"), or as the original
// HunyuanVideo does ("double_blocks.0.img_attn_qkv", whose rows are to_q,
// to_k and to_v of the fused matrix; "single_blocks.0.linear1": to_q, to_k,
// to_v and proj_mlp), with an optional "transformer." or
// "diffusion_model." prefix, or as kohya and musubi-tuner do: "lora_unet_"
// and the same path with every dot an underscore.
type targets struct {
	dotted     map[string][]weights.Spec
	underscore map[string][]weights.Spec
}

func newTargets(plan []weights.Spec) *targets {
	t := &targets{dotted: map[string][]weights.Spec{}, underscore: map[string][]weights.Spec{}}
	byName := map[string]weights.Spec{}
	for _, s := range plan {
		if len(s.Shape) == 2 && strings.HasSuffix(s.Name, ".weight") {
			byName[strings.TrimSuffix(s.Name, ".weight")] = s
		}
	}
	add := func(mod string, parts ...string) {
		var ss []weights.Spec
		for _, p := range parts {
			s, ok := byName[p]
			if !ok {
				return
			}
			ss = append(ss, s)
		}
		t.dotted[mod] = ss
		t.underscore[strings.ReplaceAll(mod, ".", "_")] = ss
	}
	for m := range byName {
		add(m, m)
	}
	for i := 0; ; i++ {
		d, o := fmt.Sprintf("transformer_blocks.%d.", i), fmt.Sprintf("double_blocks.%d.", i)
		if _, ok := byName[d+"attn.to_q"]; !ok {
			break
		}
		add(o+"img_attn_qkv", d+"attn.to_q", d+"attn.to_k", d+"attn.to_v")
		add(o+"txt_attn_qkv", d+"attn.add_q_proj", d+"attn.add_k_proj", d+"attn.add_v_proj")
		add(o+"img_attn_proj", d+"attn.to_out.0")
		add(o+"txt_attn_proj", d+"attn.to_add_out")
		add(o+"img_mlp.fc1", d+"ff.net.0.proj")
		add(o+"img_mlp.fc2", d+"ff.net.2")
		add(o+"txt_mlp.fc1", d+"ff_context.net.0.proj")
		add(o+"txt_mlp.fc2", d+"ff_context.net.2")
		add(o+"img_mod.linear", d+"norm1.linear")
		add(o+"txt_mod.linear", d+"norm1_context.linear")
	}
	for i := 0; ; i++ {
		d, o := fmt.Sprintf("single_transformer_blocks.%d.", i), fmt.Sprintf("single_blocks.%d.", i)
		if _, ok := byName[d+"attn.to_q"]; !ok {
			break
		}
		add(o+"linear1", d+"attn.to_q", d+"attn.to_k", d+"attn.to_v", d+"proj_mlp")
		add(o+"linear2", d+"proj_out")
		add(o+"modulation.linear", d+"norm.linear")
	}
	return t
}

// find returns the tensors module adapts, in row order; nil when none.
func (t *targets) find(module string) []weights.Spec {
	if rest, ok := strings.CutPrefix(module, "lora_unet_"); ok {
		return t.underscore[rest]
	}
	for _, p := range []string{"transformer.", "diffusion_model.", "base_model.model."} {
		module = strings.TrimPrefix(module, p)
	}
	return t.dotted[module]
}
