package randmodel

import (
	"testing"

	"github.com/framepack-go/framepack/weights"
)

// TestReleasedSizes checks the released-size tables against the released
// checkpoints' known sizes (parameters and shard counts) without writing.
func TestReleasedSizes(t *testing.T) {
	cs, err := components(Released)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		lo, hi int64 // parameters
		shards int
	}{
		"transformer":    {12_800_000_000, 13_000_000_000, 3}, // ≈ 25.7 GB of bf16
		"text_encoder":   {7_505_186_816, 7_505_186_816, 4},   // LLaMA-3-8B's layers with 128 320 embedding rows
		"text_encoder_2": {123_060_480, 123_060_480, 1},       // CLIP ViT-L/14's text model
		"vae":            {240_000_000, 260_000_000, 1},
		"image_encoder":  {420_000_000, 440_000_000, 1}, // SigLIP so400m patch14-384
	}
	var total int64
	for _, c := range cs {
		var n int64
		names := map[string]bool{}
		for _, s := range c.tensors {
			n += s.Numel()
			if names[s.Name] {
				t.Errorf("%s: %s listed twice", c.folder, s.Name)
			}
			names[s.Name] = true
		}
		files, err := plan(t.TempDir(), c)
		if err != nil {
			t.Fatal(err)
		}
		w := want[c.folder]
		t.Logf("%s: %d tensors, %d parameters, %d files", c.folder, len(c.tensors), n, len(files))
		if n < w.lo || n > w.hi || len(files) != w.shards {
			t.Errorf("%s: %d parameters in %d files, want %d–%d in %d", c.folder, n, len(files), w.lo, w.hi, w.shards)
		}
		total += 2 * n
	}
	t.Logf("total %.1f GB", float64(total)/1e9)
}

// BenchmarkFill is one worker's generation speed (the writer needs about
// 350 MB/s in all to write the released folder in 2 minutes).
func BenchmarkFill(b *testing.B) {
	buf := make([]byte, 2*chunkElems)
	for _, dt := range []string{"BF16", "F16"} {
		b.Run(dt, func(b *testing.B) {
			b.SetBytes(int64(len(buf)))
			for i := 0; i < b.N; i++ {
				fill(buf, dt, weights.Spec{Name: "w", Shape: []int{1 << 20, 1}}, 1, int64(i))
			}
		})
	}
}
