package hunyuan

import (
	"path/filepath"
	"testing"

	"github.com/framepack-go/framepack/internal/golden"
	"github.com/framepack-go/framepack/lora"
)

// TestGoldenLoRA loads the golden model with the case's LoRA, in each file
// format (diffusers/PEFT, musubi-tuner, kohya with the original
// HunyuanVideo names), resident and with streamed blocks, and compares the
// forward with diffusers' (PEFT's) LoRA forward.
func TestGoldenLoRA(t *testing.T) {
	for _, c := range golden.Cases(t, "transformer_lora") {
		var files []string
		var scale float64
		c.Param("lora_files", &files)
		c.Param("lora_scale", &scale)
		cfg, err := ReadConfig(c.ModelDir)
		if err != nil {
			t.Fatal(err)
		}
		plan, err := Plan(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			set, err := lora.Resolve([]lora.File{{Path: filepath.Join(c.Dir, f), Scale: scale}}, plan)
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
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
