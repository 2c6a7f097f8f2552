package main

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/framepack-go/framepack/randmodel"
)

// benchChildEnv makes this test binary act as the framepack command, so
// that bench generate, which runs each job in a fresh copy of its own
// executable, can be tested in-process.
const benchChildEnv = "FRAMEPACK_TEST_RUN_CLI"

// TestBenchGenerateTiny runs bench generate on a tiny folder that
// make-models wrote: one line per run, each a fresh process, with every
// field present, the stages positive and within the total; the uncached
// run first, the TeaCache run compared with it.
func TestBenchGenerateTiny(t *testing.T) {
	if testing.Short() {
		t.Skip("two whole jobs")
	}
	t.Setenv(benchChildEnv, "1")
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	dir := t.TempDir()
	if _, err := randmodel.Write(context.Background(), dir, randmodel.Options{Size: randmodel.Tiny, Seed: 3}); err != nil {
		t.Fatal(err)
	}
	out, err := runCLI(t, context.Background(), "bench", "generate", "--models", dir, "--image", stripImage(t), "--device", "cpu",
		"--resolution", "64", "--seconds", "0.2", "--window", "3", "--steps", "3", "--modes", "nocap", "--teacache", "on,off",
		"--cold-files")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2:\n%s", len(lines), out)
	}
	pids := map[float64]bool{}
	for i, l := range lines {
		var r map[string]any
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("line %d: %v: %s", i, err, l)
		}
		for _, k := range []string{"bench", "impl", "mode", "teacache", "seconds", "width", "height", "frames", "sections", "steps",
			"total_s", "load_s", "text_s", "image_s", "sample_s", "sample_s_per_step", "decode_s", "write_s", "compile_s",
			"device_peak_gib", "rss_peak_gib", "device", "load_gbps", "pid", "latents_nonfinite"} {
			if _, ok := r[k]; !ok {
				t.Errorf("line %d has no %q: %s", i, k, l)
			}
		}
		if r["bench"] != "generate" || r["impl"] != "framepack" || r["mode"] != "nocap" || r["teacache"] != (i == 1) ||
			r["cache"] != []string{"none", "teacache"}[i] || r["model"] != "framepack" {
			t.Errorf("line %d: bench %v, impl %v, mode %v, teacache %v, cache %v, model %v", i, r["bench"], r["impl"], r["mode"],
				r["teacache"], r["cache"], r["model"])
		}
		num := func(k string) float64 { v, _ := r[k].(float64); return v }
		if num("transformer_calls") != 3 || num("transformer_computed")+num("cache_skipped_calls") != 3 ||
			(i == 0 && num("cache_skipped_calls") != 0) {
			t.Errorf("line %d: %v transformer calls, %v computed, %v skipped", i, r["transformer_calls"], r["transformer_computed"],
				r["cache_skipped_calls"])
		}
		_, compared := r["vs_none_latents_rel_l2"]
		if compared != (i == 1) || (i == 1 && (num("vs_none_latents_rel_l2") < 0 || (num("vs_none_psnr_db") <= 0) == (r["vs_none_identical_frames"] != true))) {
			t.Errorf("line %d: vs_none_latents_rel_l2 %v, vs_none_psnr_db %v, vs_none_identical_frames %v", i,
				r["vs_none_latents_rel_l2"], r["vs_none_psnr_db"], r["vs_none_identical_frames"])
		}
		if num("width") != 96 || num("height") != 32 || num("sections") != 1 || num("steps") != 3 || num("frames") <= 0 {
			t.Errorf("line %d: %v×%v, %v sections of %v steps, %v frames", i, r["width"], r["height"], r["sections"], r["steps"], r["frames"])
		}
		sum := 0.0
		for _, k := range []string{"load_s", "text_s", "image_s", "sample_s", "decode_s", "write_s"} {
			if num(k) <= 0 {
				t.Errorf("line %d: %s = %v, want > 0", i, k, r[k])
			}
			sum += num(k)
		}
		if total := num("total_s"); total < sum || total > sum+30 {
			t.Errorf("line %d: total_s %g against stages summing to %g", i, total, sum)
		}
		// other_s placed: before Load, Load and Generate lie within the run.
		if b, l, g := num("before_load_s"), num("pipeline_load_s"), num("generate_s"); b <= 0 || l <= 0 || g <= 0 || b+l+g > num("total_s") {
			t.Errorf("line %d: before_load_s %v, pipeline_load_s %v, generate_s %v, total_s %v", i, b, l, g, r["total_s"])
		}
		// Every model's load, the text encoders' included, with its bytes,
		// seconds and rate.
		gb, _ := r["load_gbps"].(map[string]any)
		models, _ := r["load_models"].(map[string]any)
		for _, part := range []string{"text_encoder", "text_encoder_2", "image_encoder", "vae", "transformer"} {
			m, _ := models[part].(map[string]any)
			if v, _ := gb[part].(float64); v <= 0 || m == nil || m["bytes"].(float64) <= 0 || m["s"].(float64) <= 0 || m["gbps"] != gb[part] {
				t.Errorf("line %d: %s: load_gbps %v, load_models %v", i, part, gb[part], m)
			}
		}
		if r["cold_files"] != true || num("disk_seq_gbps") <= 0 {
			t.Errorf("line %d: cold_files %v, disk_seq_gbps %v", i, r["cold_files"], r["disk_seq_gbps"])
		}
		if r["latents_nonfinite"] != 0.0 {
			t.Errorf("line %d: %v non-finite latents", i, r["latents_nonfinite"])
		}
		if num("rss_peak_gib") <= 0 || num("device_peak_gib") <= 0 || num("sample_s_per_step") <= 0 {
			t.Errorf("line %d: rss %v GiB, device %v GiB, %v s/step", i, r["rss_peak_gib"], r["device_peak_gib"], r["sample_s_per_step"])
		}
		if num("pid") == float64(os.Getpid()) || pids[num("pid")] {
			t.Errorf("line %d: pid %v is not a fresh process", i, r["pid"])
		}
		pids[num("pid")] = true
	}
}

// TestBenchGenerateBadFlags fails before running anything.
func TestBenchGenerateBadFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "generate"}, "--models"},
		{[]string{"bench", "generate", "--models", t.TempDir(), "--image", sceneImage, "--modes", "lots"}, `--modes "lots"`},
		{[]string{"bench", "generate", "--models", t.TempDir(), "--image", sceneImage, "--teacache", "maybe"}, `--teacache "maybe"`},
		{[]string{"bench", "generate", "--models", t.TempDir(), "--image", sceneImage, "--cache", "none,fast"}, `--cache "fast"`},
		{[]string{"bench", "generate", "--models", t.TempDir(), "--image", sceneImage, "--model", "f2"}, `--model "f2"`},
		{[]string{"bench", "generate", "--models", t.TempDir(), "--image", sceneImage, "--magcache-k", "9"}, `--magcache-k 9`},
		{[]string{"bench", "generate", "--models", t.TempDir(), "--image", sceneImage, "--cache-threshold", "2"}, `--cache-threshold 2`},
	} {
		if _, err := runCLI(t, context.Background(), c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err = %v, want one naming %s", c.args, err, c.want)
		}
	}
}
