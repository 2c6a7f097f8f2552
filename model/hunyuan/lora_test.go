package hunyuan

import (
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/framepack-go/framepack/internal/numcmp"
	"github.com/framepack-go/framepack/internal/testutil/golden"
	"github.com/framepack-go/framepack/internal/testutil/plantest"
	"github.com/framepack-go/framepack/lora"
	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/weights"
)

// TestGoldenLoRA loads the golden model with the case's LoRA, in each file
// format (diffusers/PEFT, musubi-tuner, kohya with the original
// HunyuanVideo names), resident and with streamed blocks, and compares the
// forward with diffusers' (PEFT's) LoRA forward.
func TestGoldenLoRA(t *testing.T) {
	for _, c := range golden.Cases(t, "transformer_lora") {
		files, resolve := loraCase(t, c)
		for _, f := range files {
			set := resolve(f)
			for _, host := range []bool{false, true} {
				name := c.Name + "/" + f
				if host {
					name += "/host_blocks"
				}
				t.Run(name, func(t *testing.T) {
					m := loadModel(t, c.ModelDir, Options{LoRA: set, HostBlocks: host})
					c.Compare(t, "output", forward(t, m, caseInputs(c)))
				})
			}
		}
	}
}

// TestGoldenLoRAFP8 loads the golden model with FP8 weights and the case's
// LoRA, which is then added at run time rather than merged, resident and
// with streamed blocks: the output holds FP8's bound against diffusers'
// LoRA forward, and the LoRA's effect (the output with it less the output
// without it) is that of the f32 model.
func TestGoldenLoRAFP8(t *testing.T) {
	for _, c := range golden.Cases(t, "transformer_lora") {
		files, resolve := loraCase(t, c)
		set := resolve(files[0])
		in := caseInputs(c)
		want := c.Tensor("output").Float32s()
		plain := forward(t, loadModel(t, c.ModelDir, Options{}), in).Float32s()
		plainFP8 := forward(t, loadModel(t, c.ModelDir, Options{FP8: true}), in).Float32s()
		wantEffect := sub(want, plain)
		for _, host := range []bool{false, true} {
			m := loadModel(t, c.ModelDir, Options{LoRA: set, FP8: true, HostBlocks: host})
			if len(m.lowRank) == 0 {
				t.Fatal("no FP8 linear has a run-time LoRA")
			}
			got := forward(t, m, in).Float32s()
			effect := sub(got, plainFP8)
			r, re := numcmp.RelL2(got, want), numcmp.RelL2(effect, wantEffect)
			t.Logf("%s host blocks %v: rel_l2 %.3g vs diffusers' LoRA forward; the LoRA's effect %.3g from the f32 model's", c.Name, host, r, re)
			if r > 6e-2 || r != r {
				t.Errorf("host blocks %v: rel_l2 %.3g > 6e-2", host, r)
			}
			if re > 0.15 || re != re {
				t.Errorf("host blocks %v: the LoRA's effect is %.3g (relative L2) from the f32 model's", host, re)
			}
		}
	}
}

// loraCase is a LoRA golden case's files and a function resolving one of
// them, at the case's scale, against the case model's plan.
func loraCase(t *testing.T, c *golden.Case) (files []string, resolve func(file string) *lora.Set) {
	t.Helper()
	var scale float64
	c.Param("lora_files", &files)
	c.Param("lora_scale", &scale)
	_, plan := plantest.Plan(t, c.ModelDir, ReadConfig, Plan)
	return files, func(f string) *lora.Set {
		t.Helper()
		set, err := lora.Resolve([]lora.File{{Path: filepath.Join(c.Dir, f), Scale: scale}}, plan)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		return set
	}
}

// sub is a − b elementwise.
func sub(a, b []float32) []float32 {
	out := make([]float32, len(a))
	for i := range a {
		out[i] = a[i] - b[i]
	}
	return out
}

// TestLoRAFormatsAgree writes one random LoRA in the three formats
// (diffusers/PEFT without alpha, musubi-tuner and original-HunyuanVideo
// kohya keys with alpha) and checks that each gives the same forward,
// resident or streamed, and that the LoRA changes it.
func TestLoRAFormatsAgree(t *testing.T) {
	c := golden.Cases(t, "transformer")[0]
	_, plan := plantest.Plan(t, c.ModelDir, ReadConfig, Plan)
	shape := map[string][]int{}
	for _, s := range plan {
		shape[s.Name] = s.Shape
	}
	const rank, alpha = 2, 4.0 // alpha/rank = 2: exact
	rng := rand.New(rand.NewPCG(3, 4))
	randn := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64()) * 0.3
		}
		return v
	}
	files := [3]map[string]*tensor.Tensor{{}, {}, {}} // diffusers, musubi, hunyuan
	group := func(orig string, mods ...string) {
		in := shape[mods[0]+".weight"][1]
		out := 0
		for _, m := range mods {
			out += shape[m+".weight"][0]
		}
		down, up := randn(rank*in), randn(out*rank)
		k := "lora_unet_" + strings.ReplaceAll(orig, ".", "_")
		files[2][k+".lora_down.weight"] = tensor.FromFloat32(down, rank, in)
		files[2][k+".lora_up.weight"] = tensor.FromFloat32(up, out, rank)
		files[2][k+".alpha"] = tensor.FromFloat32([]float32{alpha})
		row := 0
		for _, m := range mods {
			n := shape[m+".weight"][0]
			u := up[row*rank : (row+n)*rank]
			row += n
			k := "lora_unet_" + strings.ReplaceAll(m, ".", "_")
			files[1][k+".lora_down.weight"] = tensor.FromFloat32(down, rank, in)
			files[1][k+".lora_up.weight"] = tensor.FromFloat32(u, n, rank)
			files[1][k+".alpha"] = tensor.FromFloat32([]float32{alpha})
			scaled := make([]float32, len(u))
			for i, v := range u {
				scaled[i] = v * alpha / rank
			}
			files[0]["transformer."+m+".lora_A.weight"] = tensor.FromFloat32(down, rank, in)
			files[0]["transformer."+m+".lora_B.weight"] = tensor.FromFloat32(scaled, n, rank)
		}
	}
	group("double_blocks.1.img_attn_qkv", "transformer_blocks.1.attn.to_q", "transformer_blocks.1.attn.to_k", "transformer_blocks.1.attn.to_v")
	group("double_blocks.0.txt_mlp.fc2", "transformer_blocks.0.ff_context.net.2")
	group("single_blocks.1.linear1", "single_transformer_blocks.1.attn.to_q", "single_transformer_blocks.1.attn.to_k", "single_transformer_blocks.1.attn.to_v", "single_transformer_blocks.1.proj_mlp")
	group("single_blocks.0.linear2", "single_transformer_blocks.0.proj_out")

	in := caseInputs(c)
	base := forward(t, loadModel(t, c.ModelDir, Options{}), in).ToFloat32()
	var first []float32
	for i, f := range files {
		path := filepath.Join(t.TempDir(), "lora.safetensors")
		if err := weights.Save(path, f, nil); err != nil {
			t.Fatal(err)
		}
		set, err := lora.Resolve([]lora.File{{Path: path, Scale: 0.5}}, plan)
		if err != nil {
			t.Fatal(err)
		}
		if set.Len() != 9 {
			t.Errorf("format %d: %d weights changed, want 9", i, set.Len())
		}
		for _, host := range []bool{false, true} {
			got := forward(t, loadModel(t, c.ModelDir, Options{LoRA: set, HostBlocks: host}), in).ToFloat32()
			if first == nil {
				first = got
				if r := numcmp.RelL2(got, base); r < 1e-3 {
					t.Fatalf("the LoRA changes the output by rel_l2 %.3g only", r)
				}
				continue
			}
			if r := numcmp.RelL2(got, first); r > 1e-6 {
				t.Errorf("format %d (host blocks %v): rel_l2 %.3g from the diffusers file's output", i, host, r)
			}
		}
	}
}
