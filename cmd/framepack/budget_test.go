package main

import (
	"os"
	"strings"
	"testing"
)

// TestCLIBudgetRefused: a --ram-limit below the least the smallest plan of
// the models needs is refused at load, before any model runs, with exit
// status 2 and one line naming the least.
func TestCLIBudgetRefused(t *testing.T) {
	dir := t.TempDir()
	r := runBinary(t, dir, "generate", "--image", abs(t, sceneImage), "--ram-limit", "2M", "-o", "out.mp4")
	last := lastLine(r.stderr)
	if r.code != exitUsage || !strings.HasPrefix(last, "framepack: --ram-limit 2M (2.0 MiB) is below the ") || !strings.Contains(last, "; give --ram-limit ") {
		t.Fatalf("exit %d, want %d and the least named:\n%s", r.code, exitUsage, r.stderr)
	}
	if strings.Contains(r.stderr, "msg=\"weights: ") {
		t.Errorf("a model was loaded before the refusal:\n%s", r.stderr)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("left %s", ents[0].Name())
	}
	t.Log(last)
}
