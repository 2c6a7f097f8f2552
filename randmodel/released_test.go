package randmodel

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/framepack-go/framepack"
)

// TestReleasedLayoutLoads writes the released-size folder with its weight
// data left as holes (sparse files: headers, configs, tokenizers and
// indexes are real) and opens it with framepack.Load, which reads every
// config, both tokenizers and every weight header and checks that the
// parts fit together.
func TestReleasedLayoutLoads(t *testing.T) {
	dir := t.TempDir()
	sum, err := Write(context.Background(), dir, Options{Size: Released, HeadersOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Files != 10 || sum.WeightBytes < 42e9 || sum.WeightBytes > 43e9 {
		t.Errorf("%d files of %d bytes, want 10 files of about 42.4 GB", sum.Files, sum.WeightBytes)
	}
	for _, f := range []string{"transformer/diffusion_pytorch_model-00003-of-00003.safetensors",
		"transformer/diffusion_pytorch_model.safetensors.index.json", "text_encoder/model-00004-of-00004.safetensors",
		"text_encoder/model.safetensors.index.json", "text_encoder_2/model.safetensors",
		"vae/diffusion_pytorch_model.safetensors", "image_encoder/model.safetensors"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
	p, err := framepack.Load(dir, framepack.Options{Device: framepack.DeviceCPU, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	var be *framepack.BudgetError
	if errors.As(err, &be) {
		// Load's last check: every config, tokenizer and header passed, and
		// this machine's memory cannot run the f32 transformer on the CPU.
		t.Logf("loaded, then refused on this machine's memory: %v", err)
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.CropStart() != 95 {
		t.Errorf("crop start %d, want FramePack's 95", p.CropStart())
	}
}
