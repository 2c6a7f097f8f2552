package lora

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"github.com/framepack-go/framepack/backend/cpu"
	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/weights"
)

func TestParseArg(t *testing.T) {
	for _, c := range []struct {
		in    string
		path  string
		scale float64
		bad   bool
	}{
		{"a.safetensors", "a.safetensors", 1, false},
		{"a.safetensors:0.7", "a.safetensors", 0.7, false},
		{"dir:x/a.safetensors", "dir:x/a.safetensors", 1, false},
		{"/m/a.safetensors:-1.5", "/m/a.safetensors", -1.5, false},
		{"a.safetensors:strong", "", 0, true},
		{":0.5", "", 0, true},
		// A scale that is no finite number stops the command, naming the LoRA.
		{"a.safetensors:NaN", "", 0, true},
		{"a.safetensors:Inf", "", 0, true},
		{"a.safetensors:-infinity", "", 0, true},
	} {
		f, err := ParseArg(c.in)
		if c.bad {
			if err == nil {
				t.Errorf("ParseArg(%q) = %+v, want an error", c.in, f)
			}
			continue
		}
		if err != nil || f.Path != c.path || f.Scale != c.scale {
			t.Errorf("ParseArg(%q) = %+v, %v; want %s:%v", c.in, f, err, c.path, c.scale)
		}
	}
}

// TestParseArgExistingFile: an existing file's path is taken as it is,
// colons and all; one that could also be a file and a scale is refused.
func TestParseArgExistingFile(t *testing.T) {
	dir := t.TempDir()
	touch := func(name string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	colon := touch("style:v2.safetensors")
	if f, err := ParseArg(colon); err != nil || f.Path != colon || f.Scale != 1 {
		t.Errorf("ParseArg(%q) = %+v, %v; want the file at scale 1", colon, f, err)
	}
	if f, err := ParseArg(colon + ":0.5"); err != nil || f.Path != colon || f.Scale != 0.5 {
		t.Errorf("ParseArg(%q) = %+v, %v; want the file at scale 0.5", colon+":0.5", f, err)
	}
	// "b.safetensors:0.5" is a file, and so is "b.safetensors".
	touch("b.safetensors")
	both := touch("b.safetensors:0.5")
	if f, err := ParseArg(both); err == nil || !strings.Contains(err.Error(), "both") {
		t.Errorf("ParseArg(%q) = %+v, %v; want an error naming the ambiguity", both, f, err)
	}
	if f, err := ParseArg(both + ":1"); err != nil || f.Path != both || f.Scale != 1 {
		t.Errorf("ParseArg(%q) = %+v, %v", both+":1", f, err)
	}
}

// tinyPlan is a double and a single block's linears as hunyuan.Plan lists
// them (d = 4, mlp = 8).
func tinyPlan() []weights.Spec {
	const d, mlp = 4, 8
	var ps []weights.Spec
	lin := func(name string, out, in int) {
		ps = append(ps, weights.Spec{Name: name + ".weight", Shape: []int{out, in}}, weights.Spec{Name: name + ".bias", Shape: []int{out}})
	}
	b := "transformer_blocks.0."
	lin(b+"norm1.linear", 6*d, d)
	for _, n := range []string{"to_q", "to_k", "to_v", "add_q_proj", "add_k_proj", "add_v_proj", "to_out.0", "to_add_out"} {
		lin(b+"attn."+n, d, d)
	}
	lin(b+"ff.net.0.proj", mlp, d)
	lin(b+"ff.net.2", d, mlp)
	s := "single_transformer_blocks.0."
	for _, n := range []string{"attn.to_q", "attn.to_k", "attn.to_v"} {
		lin(s+n, d, d)
	}
	lin(s+"proj_mlp", mlp, d)
	lin(s+"proj_out", d, d+mlp)
	ps = append(ps, weights.Spec{Name: s + "attn.norm_q.weight", Shape: []int{1}})
	return ps
}

func TestTargets(t *testing.T) {
	tg := newTargets(tinyPlan())
	for _, c := range []struct {
		module string
		want   []string
	}{
		{"transformer.transformer_blocks.0.attn.to_k", []string{"transformer_blocks.0.attn.to_k"}},
		{"transformer_blocks.0.attn.to_k", []string{"transformer_blocks.0.attn.to_k"}},
		{"diffusion_model.transformer_blocks.0.ff.net.2", []string{"transformer_blocks.0.ff.net.2"}},
		{"lora_unet_transformer_blocks_0_attn_to_k", []string{"transformer_blocks.0.attn.to_k"}},
		{"lora_unet_transformer_blocks_0_attn_to_out_0", []string{"transformer_blocks.0.attn.to_out.0"}},
		{"lora_unet_single_transformer_blocks_0_proj_mlp", []string{"single_transformer_blocks.0.proj_mlp"}},
		{"lora_unet_double_blocks_0_img_attn_qkv", []string{"transformer_blocks.0.attn.to_q", "transformer_blocks.0.attn.to_k", "transformer_blocks.0.attn.to_v"}},
		{"diffusion_model.double_blocks.0.txt_attn_qkv", []string{"transformer_blocks.0.attn.add_q_proj", "transformer_blocks.0.attn.add_k_proj", "transformer_blocks.0.attn.add_v_proj"}},
		{"lora_unet_double_blocks_0_img_mlp_fc1", []string{"transformer_blocks.0.ff.net.0.proj"}},
		{"lora_unet_single_blocks_0_linear1", []string{"single_transformer_blocks.0.attn.to_q", "single_transformer_blocks.0.attn.to_k", "single_transformer_blocks.0.attn.to_v", "single_transformer_blocks.0.proj_mlp"}},
		{"single_blocks.0.linear2", []string{"single_transformer_blocks.0.proj_out"}},
		{"lora_unet_transformer_blocks_1_attn_to_k", nil},
		{"transformer.single_transformer_blocks.0.attn.norm_q", nil},
		{"lora_te_text_model_encoder_layers_0_mlp_fc1", nil},
		{"transformer_blocks.0.attn.to_k.weight", nil},
	} {
		got := tg.find(c.module)
		var names []string
		for _, s := range got {
			names = append(names, strings.TrimSuffix(s.Name, ".weight"))
		}
		if strings.Join(names, " ") != strings.Join(c.want, " ") {
			t.Errorf("find(%q) = %v, want %v", c.module, names, c.want)
		}
	}
}

func randn(r *rand.Rand, n int) []float32 { return tensor.RandN(r, n).Float32s() }

func save(t *testing.T, path string, ts map[string][]float32, shapes map[string][]int) {
	t.Helper()
	m := map[string]*tensor.Tensor{}
	for k, v := range ts {
		m[k] = tensor.FromFloat32(v, shapes[k]...)
	}
	if err := weights.Save(path, m, nil); err != nil {
		t.Fatal(err)
	}
}

// TestMerge merges a kohya LoRA on the fused q|k|v (original HunyuanVideo
// name, with alpha) and a diffusers LoRA on to_k alone into a fused weight,
// and checks every element against the float64 sum rounded once.
func TestMerge(t *testing.T) {
	const d, r1, r2 = 4, 2, 3
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(1, 2))
	base := map[string][]float32{}
	shapes := map[string][]int{}
	for _, n := range tinyPlan() {
		if len(n.Shape) == 2 {
			base[n.Name] = randn(rng, n.Shape[0]*n.Shape[1])
			shapes[n.Name] = n.Shape
		}
	}
	save(t, filepath.Join(dir, "model.safetensors"), base, shapes)

	kA, kB := randn(rng, r1*d), randn(rng, 3*d*r1)
	save(t, filepath.Join(dir, "kohya.safetensors"), map[string][]float32{
		"lora_unet_double_blocks_0_img_attn_qkv.lora_down.weight": kA,
		"lora_unet_double_blocks_0_img_attn_qkv.lora_up.weight":   kB,
		"lora_unet_double_blocks_0_img_attn_qkv.alpha":            {1.5},
	}, map[string][]int{
		"lora_unet_double_blocks_0_img_attn_qkv.lora_down.weight": {r1, d},
		"lora_unet_double_blocks_0_img_attn_qkv.lora_up.weight":   {3 * d, r1},
		"lora_unet_double_blocks_0_img_attn_qkv.alpha":            {},
	})
	dA, dB := randn(rng, r2*d), randn(rng, d*r2)
	save(t, filepath.Join(dir, "peft.safetensors"), map[string][]float32{
		"transformer.transformer_blocks.0.attn.to_k.lora_A.weight": dA,
		"transformer.transformer_blocks.0.attn.to_k.lora_B.weight": dB,
	}, map[string][]int{
		"transformer.transformer_blocks.0.attn.to_k.lora_A.weight": {r2, d},
		"transformer.transformer_blocks.0.attn.to_k.lora_B.weight": {d, r2},
	})
	set, err := Resolve([]File{{filepath.Join(dir, "kohya.safetensors"), 0.8}, {filepath.Join(dir, "peft.safetensors"), -0.5}}, tinyPlan())
	if err != nil {
		t.Fatal(err)
	}
	if set.Len() != 3 {
		t.Errorf("set changes %d tensors, want 3", set.Len())
	}

	// want = W + 0.8·(1.5/2)·B_k·A_k (rows of q|k|v) − 0.5·(3/3)·B_d·A_d (k rows), in float64.
	p := "transformer_blocks.0.attn."
	var want []float64
	for part, name := range []string{"to_q", "to_k", "to_v"} {
		w := base[p+name+".weight"]
		for i := 0; i < d; i++ {
			for j := 0; j < d; j++ {
				v := float64(w[i*d+j])
				for k := 0; k < r1; k++ {
					v += 0.8 * 1.5 / r1 * float64(kB[(part*d+i)*r1+k]) * float64(kA[k*d+j])
				}
				if name == "to_k" {
					for k := 0; k < r2; k++ {
						v += -0.5 * float64(dB[i*r2+k]) * float64(dA[k*d+j])
					}
				}
				want = append(want, v)
			}
		}
	}

	ck, err := weights.OpenFile(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	be := cpu.New()
	src := &Source{Inner: &weights.CheckpointSource{Ck: ck, Be: be}, Be: be, Set: set}
	parts := []weights.Spec{{Name: p + "to_q.weight", Shape: []int{d, d}}, {Name: p + "to_k.weight", Shape: []int{d, d}}, {Name: p + "to_v.weight", Shape: []int{d, d}}}
	for _, dt := range []tensor.DType{tensor.F32, tensor.BF16} {
		w := weights.Weight{Name: parts[0].Name, Shape: []int{3 * d, d}, Parts: parts, DType: dt}
		got, err := src.Make(w)
		if err != nil {
			t.Fatal(err)
		}
		g := got.ToFloat32()
		for i, v := range want {
			e := float32(v)
			if dt == tensor.BF16 {
				e = tensor.RoundBF16(e)
			}
			if math.Abs(float64(g[i]-e)) > 1e-5*math.Abs(v) {
				t.Errorf("%s: element %d = %v, want %v (%v)", dt, i, g[i], e, v)
			}
		}
		tensor.Release(got)
		// An untouched weight is Inner's.
		u := weights.Weight{Name: p + "to_out.0.weight", Shape: []int{d, d}, Parts: []weights.Spec{{Name: p + "to_out.0.weight", Shape: []int{d, d}}}, DType: dt}
		buf := make([]byte, d*d*dt.Size())
		if err := src.Fill(u, buf); err != nil {
			t.Fatal(err)
		}
		for i, v := range base[u.Name] {
			if dt == tensor.F32 && *(*float32)(unsafe.Pointer(&buf[4*i])) != v {
				t.Fatalf("untouched weight changed at %d", i)
			}
		}
	}
}

func TestResolveErrors(t *testing.T) {
	dir := t.TempDir()
	ts, shapes := map[string][]float32{}, map[string][]int{}
	for i := 0; i < 8; i++ {
		m := "lora_unet_transformer_blocks_" + string(rune('0'+i)) + "_attn_to_q"
		ts[m+".lora_down.weight"], shapes[m+".lora_down.weight"] = make([]float32, 4), []int{1, 4}
		ts[m+".lora_up.weight"], shapes[m+".lora_up.weight"] = make([]float32, 4), []int{4, 1}
	}
	path := filepath.Join(dir, "half.safetensors")
	save(t, path, ts, shapes)
	_, err := Resolve([]File{{path, 1}}, tinyPlan())
	if err == nil || !strings.Contains(err.Error(), "7 of 8 modules match no weight") || !strings.Contains(err.Error(), "lora_unet_transformer_blocks_1_attn_to_q") || !strings.Contains(err.Error(), "and 2 more") {
		t.Errorf("half-matching LoRA: %v", err)
	}

	// Factors that do not fit the weight.
	save(t, path, map[string][]float32{"transformer_blocks.0.attn.to_q.lora_A.weight": make([]float32, 5), "transformer_blocks.0.attn.to_q.lora_B.weight": make([]float32, 4)},
		map[string][]int{"transformer_blocks.0.attn.to_q.lora_A.weight": {1, 5}, "transformer_blocks.0.attn.to_q.lora_B.weight": {4, 1}})
	if _, err := Resolve([]File{{path, 1}}, tinyPlan()); err == nil || !strings.Contains(err.Error(), "5 inputs") {
		t.Errorf("misshapen LoRA: %v", err)
	}
	// A scale that is no finite number, given through the library.
	for _, sc := range []float64{math.NaN(), math.Inf(1)} {
		if _, err := Resolve([]File{{path, sc}}, tinyPlan()); err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "not a finite number") {
			t.Errorf("scale %v: %v", sc, err)
		}
	}
	// A key that is no LoRA factor.
	save(t, path, map[string][]float32{"transformer_blocks.0.attn.to_q.weight": make([]float32, 16)}, map[string][]int{"transformer_blocks.0.attn.to_q.weight": {4, 4}})
	if _, err := Resolve([]File{{path, 1}}, tinyPlan()); err == nil || !strings.Contains(err.Error(), "not LoRA factors") {
		t.Errorf("not a LoRA: %v", err)
	}
}
