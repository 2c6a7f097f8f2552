package bench

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/framepack-go/framepack"
	"github.com/framepack-go/framepack/tensor"
)

// TestBenchGenerateRuns: every mode × model × cache, the uncached run of
// each mode and model first.
func TestBenchGenerateRuns(t *testing.T) {
	o := &GenerateOptions{Modes: "nocap,20G", Caches: "magcache,none,teacache", Variants: "framepack,f1", MagCacheK: 3}
	runs, err := o.runs()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range runs {
		got = append(got, r.mode+" "+r.model+" "+r.cache)
	}
	want := []string{"nocap framepack none", "nocap framepack magcache", "nocap framepack teacache",
		"nocap f1 none", "nocap f1 magcache", "nocap f1 teacache",
		"20G framepack none", "20G framepack magcache", "20G framepack teacache",
		"20G f1 none", "20G f1 magcache", "20G f1 teacache"}
	if !slices.Equal(got, want) {
		t.Errorf("runs %q, want %q", got, want)
	}
}

// TestCompareDumps checks the distances against values worked by hand.
func TestCompareDumps(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, lat []float32, pix []uint8) string {
		path := filepath.Join(dir, name)
		res := &framepack.Result{Latents: tensor.FromFloat32(lat, len(lat))}
		res.Pix = pix
		if err := writeDump(path, res); err != nil {
			t.Fatal(err)
		}
		return path
	}
	ref := write("ref", []float32{3, 4}, []uint8{10, 20, 30, 40})
	run := write("run", []float32{3, 5}, []uint8{10, 20, 30, 50})
	rel, psnr, same, err := compareDumps(ref, run)
	// ‖(0, 1)‖/‖(3, 4)‖ = 0.2; MSE 100/4 = 25: 10·log10(65025/25) = 34.15 dB.
	if err != nil || math.Abs(rel-0.2) > 1e-12 || math.Abs(psnr-10*math.Log10(65025.0/25)) > 1e-9 || same {
		t.Errorf("rel %v, psnr %v, identical %v, err %v", rel, psnr, same, err)
	}
	if rel, _, same, err := compareDumps(ref, ref); err != nil || rel != 0 || !same {
		t.Errorf("against itself: rel %v, identical %v, err %v", rel, same, err)
	}
	short := write("short", []float32{3}, []uint8{10, 20, 30, 40})
	if _, _, _, err := compareDumps(ref, short); err == nil {
		t.Error("runs of different sizes compared")
	}
	removeDump(run)
	if _, err := os.Stat(run + ".frames"); !os.IsNotExist(err) {
		t.Errorf("removeDump left the frames: %v", err)
	}
}

// A load beside other stages counts in load_s only for the time the job
// waited for it; its rate is over its whole time.
func TestBenchGenResultOverlappedLoad(t *testing.T) {
	res := &framepack.Result{
		TextEncode: 3 * time.Second, Total: 20 * time.Second,
		Loads: []framepack.ModelLoad{
			{Part: framepack.PartTextEncoder, Stage: framepack.StageTextEncode, Time: 2 * time.Second, Bytes: 16e9},
			{Part: framepack.PartTransformer, Time: 5 * time.Second, Bytes: 25e9, Overlapped: true, Wait: time.Second},
		},
	}
	r := genResult(res, 25, 1, time.Second, 0)
	if got := r["load_s"].(float64); got != 1+2+1 {
		t.Errorf("load_s %v, want 4 (the pipeline, the text encoder, the wait for the transformer)", got)
	}
	if got := r["text_s"].(float64); got != 1 {
		t.Errorf("text_s %v, want 1", got)
	}
	gb := r["load_gbps"].(map[string]float64)
	if gb[framepack.PartTransformer] != 5 || gb[framepack.PartTextEncoder] != 8 {
		t.Errorf("load_gbps %v, want transformer 5, text encoder 8", gb)
	}
	m := r["load_models"].(map[string]map[string]any)[framepack.PartTransformer]
	if m["overlapped_s"] != 4.0 || m["bytes"] != int64(25e9) || m["s"] != 5.0 || m["loads"] != 1 {
		t.Errorf("transformer: %v", m)
	}
}
