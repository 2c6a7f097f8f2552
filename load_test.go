package framepack

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/framepack-go/framepack/internal/testutil/errtest"
	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/tinymodel"
	"github.com/framepack-go/framepack/weights"
)

// shardedTiny is the tiny model with its transformer split into two shards
// and an index, as the released transformer is; edit then changes the
// folder.
func shardedTiny(t *testing.T, edit func(dir string, shards *[2]map[string]*tensor.Tensor) string) string {
	t.Helper()
	dir := t.TempDir()
	if err := tinymodel.Extract(dir); err != nil {
		t.Fatal(err)
	}
	tr := filepath.Join(dir, PartTransformer)
	single := filepath.Join(tr, "diffusion_pytorch_model.safetensors")
	ck, err := weights.Open(single)
	if err != nil {
		t.Fatal(err)
	}
	names := ck.Names()
	sort.Strings(names)
	var shards [2]map[string]*tensor.Tensor
	for i := range shards {
		shards[i] = map[string]*tensor.Tensor{}
	}
	for i, n := range names {
		h, err := ck.Host(n)
		if err != nil {
			t.Fatal(err)
		}
		c := tensor.New(h.DType(), h.Shape()...)
		copy(c.HostBytes(), h.HostBytes())
		shards[i*2/len(names)][n] = c
	}
	ck.Close()
	if err := os.Remove(single); err != nil {
		t.Fatal(err)
	}
	index := edit(dir, &shards)
	for i, s := range shards {
		if s == nil {
			continue
		}
		if err := weights.Save(filepath.Join(tr, shardName(i)), s, nil); err != nil {
			t.Fatal(err)
		}
	}
	if index == "" {
		var b strings.Builder
		b.WriteString(`{"metadata": {}, "weight_map": {`)
		first := true
		seen := map[string]bool{}
		for i, s := range shards {
			for n := range s {
				if seen[n] {
					continue
				}
				seen[n] = true
				if !first {
					b.WriteString(",\n")
				}
				first = false
				b.WriteString(`"` + n + `": "` + shardName(i) + `"`)
			}
		}
		b.WriteString("}}")
		index = b.String()
	}
	if err := os.WriteFile(filepath.Join(tr, "diffusion_pytorch_model.safetensors.index.json"), []byte(index), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func shardName(i int) string {
	return []string{"diffusion_pytorch_model-00001-of-00002.safetensors", "diffusion_pytorch_model-00002-of-00002.safetensors"}[i]
}

// Bad real-size layouts stop Load with one error naming the file and the
// problem, before any device work: the device choice here is invalid, so a
// Load that reached the device would fail there instead.
func TestLoadBadInput(t *testing.T) {
	keep := func(string, *[2]map[string]*tensor.Tensor) string { return "" }
	if p, err := Load(shardedTiny(t, keep), Options{Device: DeviceCPU, Logger: quietLogger(t)}); err != nil {
		t.Fatalf("sharded tiny model: %v", err)
	} else {
		p.Close()
	}
	first := func(s map[string]*tensor.Tensor) string {
		var names []string
		for n := range s {
			names = append(names, n)
		}
		sort.Strings(names)
		return names[0]
	}
	rows := []struct {
		name string
		edit func(dir string, s *[2]map[string]*tensor.Tensor) string
		want []string
	}{
		{"missing shard", func(dir string, s *[2]map[string]*tensor.Tensor) string {
			var b strings.Builder
			for i, sh := range s {
				for n := range sh {
					b.WriteString(`, "` + n + `": "` + shardName(i) + `"`)
				}
			}
			s[1] = nil // listed in the index, not written
			return `{"weight_map": {` + b.String()[2:] + `}}`
		}, []string{"model part transformer", "shard diffusion_pytorch_model-00002-of-00002.safetensors", "missing"}},
		{"shard of the wrong dtype", func(dir string, s *[2]map[string]*tensor.Tensor) string {
			for n, v := range s[1] {
				s[1][n] = tensor.New(tensor.I32, v.Shape()...)
			}
			return ""
		}, []string{"diffusion_pytorch_model-00002-of-00002.safetensors", "is I32, not a floating-point dtype", "more problems"}},
		{"index names a tensor twice", func(dir string, s *[2]map[string]*tensor.Tensor) string {
			n := first(s[0])
			return `{"weight_map": {"` + n + `": "` + shardName(0) + `", "` + n + `": "` + shardName(1) + `"}}`
		}, []string{"diffusion_pytorch_model.safetensors.index.json", "twice"}},
		{"tensor in two shards", func(dir string, s *[2]map[string]*tensor.Tensor) string {
			n := first(s[0])
			s[1][n] = s[0][n]
			return ""
		}, []string{"is stored in two shards", "diffusion_pytorch_model-00001-of-00002.safetensors", "diffusion_pytorch_model-00002-of-00002.safetensors"}},
		{"tensor missing", func(dir string, s *[2]map[string]*tensor.Tensor) string {
			delete(s[1], first(s[1]))
			return ""
		}, []string{"model part transformer", "no tensor"}},
		{"index points to a missing shard", func(dir string, s *[2]map[string]*tensor.Tensor) string {
			n := first(s[0])
			return `{"weight_map": {"` + n + `": "diffusion_pytorch_model-00003-of-00003.safetensors"}}`
		}, []string{"diffusion_pytorch_model.safetensors.index.json", "diffusion_pytorch_model-00003-of-00003.safetensors", "missing"}},
		{"tokenizer folder without its files", func(dir string, _ *[2]map[string]*tensor.Tensor) string {
			os.Remove(filepath.Join(dir, PartTokenizer, "tokenizer.json"))
			return ""
		}, []string{filepath.Join(PartTokenizer), "has no tokenizer.json"}},
		{"tokenizer_2 folder without its files", func(dir string, _ *[2]map[string]*tensor.Tensor) string {
			os.Remove(filepath.Join(dir, PartTokenizer2, "merges.txt"))
			os.Remove(filepath.Join(dir, PartTokenizer2, "vocab.json"))
			return ""
		}, []string{PartTokenizer2, "has no vocab.json and no merges.txt"}},
		{"image encoder of the wrong size", func(dir string, _ *[2]map[string]*tensor.Tensor) string {
			p := filepath.Join(dir, PartImageEncoder, "config.json")
			raw, _ := os.ReadFile(p)
			os.WriteFile(p, []byte(strings.Replace(string(raw), `"image_size": `, `"image_size": 1`, 1)), 0o644)
			return ""
		}, []string{"model part image_encoder", "position_embedding", "has shape"}},
		{"text encoder config with a million layers", func(dir string, _ *[2]map[string]*tensor.Tensor) string {
			setLayers(t, dir, 1000000)
			return ""
		}, []string{"model part text_encoder", filepath.Join(PartTextEncoder, "config.json"), "num_hidden_layers 1000000", "at most 1000"}},
		{"text encoder config with more layers than its weights", func(dir string, _ *[2]map[string]*tensor.Tensor) string {
			setLayers(t, dir, 900)
			return ""
		}, []string{"model part text_encoder", "no tensor", "more problems", "config.json does not fit these weights"}},
	}
	// A config file that holds null (or anything but an object) names the
	// file, rather than reading as every default.
	for _, f := range []string{filepath.Join(PartTransformer, "config.json"), filepath.Join(PartVAE, "config.json"),
		filepath.Join(PartTextEncoder, "config.json"), filepath.Join(PartTextEncoder2, "config.json"), filepath.Join(PartImageEncoder, "config.json"),
		filepath.Join(PartTokenizer, "tokenizer.json"), filepath.Join(PartTokenizer, "tokenizer_config.json"), filepath.Join(PartTokenizer2, "vocab.json")} {
		rows = append(rows, struct {
			name string
			edit func(dir string, s *[2]map[string]*tensor.Tensor) string
			want []string
		}{strings.ReplaceAll(f, "/", " ") + " of null", func(dir string, _ *[2]map[string]*tensor.Tensor) string {
			if err := os.WriteFile(filepath.Join(dir, f), []byte("null\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			return ""
		}, []string{f, "holds null, not a JSON object"}})
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			dir := shardedTiny(t, r.edit)
			p, err := Load(dir, Options{Device: "no-such-device", Logger: quietLogger(t)})
			if err == nil {
				p.Close()
				t.Fatal("loaded")
			}
			errtest.Mentions(t, err, r.want...)
			if strings.Contains(err.Error(), "no-such-device") {
				t.Errorf("error %q comes from the device, not the check before it", err)
			}
			t.Log(err)
		})
	}
}

// setLayers sets the text encoder's num_hidden_layers in dir.
func setLayers(t *testing.T, dir string, n int) {
	p := filepath.Join(dir, PartTextEncoder, "config.json")
	raw, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`"num_hidden_layers": *[0-9]+`)
	if !re.Match(raw) {
		t.Fatalf("%s has no num_hidden_layers", p)
	}
	if err := os.WriteFile(p, re.ReplaceAll(raw, []byte(fmt.Sprintf(`"num_hidden_layers": %d`, n))), 0o644); err != nil {
		t.Fatal(err)
	}
}
