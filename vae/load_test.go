package vae

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/framepack-go/framepack/backend/cpu"
	"github.com/framepack-go/framepack/internal/testutil/errtest"
	"github.com/framepack-go/framepack/internal/testutil/golden"
	"github.com/framepack-go/framepack/internal/testutil/plantest"
	"github.com/framepack-go/framepack/tensor"
)

// modelWithConfig makes a folder holding the golden model's weights and its
// config changed by edit.
func modelWithConfig(t *testing.T, edit func(map[string]any)) string {
	t.Helper()
	return plantest.EditedConfig(t, golden.Cases(t, "vae.decode")[0].ModelDir, edit, "diffusion_pytorch_model.safetensors")
}

func TestLoadErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(map[string]any)
		want []string
	}{
		{"wrong width", func(c map[string]any) { c["block_out_channels"] = []int{16, 32, 32, 64} },
			[]string{"encoder.down_blocks.3.resnets.0.conv1.conv.weight", "[32 32 3 3 3]", "[64 32 3 3 3]"}},
		{"temporal 8", func(c map[string]any) { c["temporal_compression_ratio"] = 8 },
			[]string{"config.json", "temporal_compression_ratio 8"}},
		{"groups", func(c map[string]any) { c["norm_num_groups"] = 5 },
			[]string{"config.json", "norm_num_groups 5"}},
		{"block type", func(c map[string]any) { c["up_block_types"] = []string{"A", "B", "C", "D"} },
			[]string{"up_block_types[0]", `"A"`}},
		{"scaling factor 0", func(c map[string]any) { c["scaling_factor"] = 0 },
			[]string{"config.json", "scaling_factor 0 must be positive"}},
		{"negative scaling factor", func(c map[string]any) { c["scaling_factor"] = -0.5 },
			[]string{"config.json", "scaling_factor -0.5"}},
		{"bad json", func(c map[string]any) { c["layers_per_block"] = "two" },
			[]string{"config.json", "layers_per_block"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(modelWithConfig(t, tc.edit), cpu.New(), Options{})
			if err == nil {
				t.Fatal("loaded")
			}
			errtest.Mentions(t, err, tc.want...)
		})
	}
	if _, err := Load(t.TempDir(), cpu.New(), Options{}); err == nil {
		t.Error("an empty folder loaded")
	}
	if _, err := Load(modelWithConfig(t, func(map[string]any) {}), cpu.New(), Options{DType: tensor.I64}); err == nil {
		t.Error("an i64 compute dtype was accepted")
	}
}

// TestParamNames checks that the model reads every tensor of the golden
// checkpoint and nothing else, with the checkpoint's names.
func TestParamNames(t *testing.T) {
	c := golden.Cases(t, "vae.decode")[0]
	var cfg Config
	raw, _ := os.ReadFile(filepath.Join(c.ModelDir, "config.json"))
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	names := paramNames(cfg)
	stored := storedNames(t, filepath.Join(c.ModelDir, "diffusion_pytorch_model.safetensors"))
	if strings.Join(names, "\n") != strings.Join(stored, "\n") {
		t.Errorf("model reads %d names, checkpoint has %d", len(names), len(stored))
	}
	for _, want := range []string{"decoder.up_blocks.3.resnets.0.conv_shortcut.conv.weight", "quant_conv.weight",
		"decoder.mid_block.attentions.0.to_out.0.bias", "encoder.down_blocks.2.downsamplers.0.conv.conv.weight"} {
		found := false
		for _, n := range names {
			found = found || n == want
		}
		if !found {
			t.Errorf("no %s", want)
		}
	}
}

func storedNames(t *testing.T, path string) []string {
	f, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := int(f[0]) | int(f[1])<<8 | int(f[2])<<16 | int(f[3])<<24
	var hdr map[string]json.RawMessage
	if err := json.Unmarshal(f[8:8+n], &hdr); err != nil {
		t.Fatal(err)
	}
	var names []string
	for k := range hdr {
		if k != "__metadata__" {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	return names
}
