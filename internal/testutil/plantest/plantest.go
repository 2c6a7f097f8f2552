// Package plantest checks a model's weight plan (its Plan: checkpoint names
// and shapes) in tests: against the released configs (testdata/released)
// and against a checkpoint; and it makes model folders with an edited
// config. It is for tests only.
package plantest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/framepack-go/framepack/internal/testutil/golden"
	"github.com/framepack-go/framepack/weights"
)

// Plan reads the config in dir with read and plans it with plan, failing
// the test on either error.
func Plan[C any](t testing.TB, dir string, read func(dir string) (C, error), plan func(C) ([]weights.Spec, error)) (C, []weights.Spec) {
	t.Helper()
	cfg, err := read(dir)
	require.NoError(t, err, "reading the config in %s", dir)
	specs, err := plan(cfg)
	require.NoError(t, err, "planning the config in %s", dir)
	return cfg, specs
}

// ReleasedDir is the folder of a released model part's files in this
// repository (testdata/released/part), from whichever package's test asks.
func ReleasedDir(part string) string {
	root, err := golden.ModuleRoot()
	if err != nil {
		return filepath.Join("testdata", "released", part) // fails where it is read, naming the path
	}
	return filepath.Join(root, "testdata", "released", part)
}

// Released is Plan of the released config of part (see ReleasedDir).
func Released[C any](t testing.TB, part string, read func(dir string) (C, error), plan func(C) ([]weights.Spec, error)) (C, []weights.Spec) {
	t.Helper()
	return Plan(t, ReleasedDir(part), read, plan)
}

// SameConfig fails the test unless got (a config read from a released
// config.json) equals want (the model's own defaults), showing the fields
// that differ (what their pointers hold included).
func SameConfig[C any](t testing.TB, got, want C) {
	t.Helper()
	assert.Equal(t, want, got, "the released config against the model's defaults")
}

// Shapes fails the test for each name of want that specs do not hold at
// that shape (as fmt.Sprint prints it: "[3072 16 1 2 2]"), and returns the
// number of parameters specs hold.
func Shapes(t testing.TB, specs []weights.Spec, want map[string]string) int64 {
	t.Helper()
	var n int64
	shapes := map[string]string{}
	for _, s := range specs {
		n += s.Numel()
		shapes[s.Name] = fmt.Sprint(s.Shape)
	}
	for name, w := range want {
		if shapes[name] != w {
			t.Errorf("%s: shape %s, want %s", name, shapes[name], w)
		}
	}
	return n
}

// Checkpoint plans the config in dir (read, plan) and checks the plan
// against dir's checkpoint, failing the test unless every planned tensor is
// there at its shape. The checkpoint is returned open and closed when the
// test ends.
func Checkpoint[C any](t testing.TB, dir string, read func(dir string) (C, error), plan func(C) ([]weights.Spec, error)) (C, []weights.Spec, *weights.Checkpoint) {
	t.Helper()
	cfg, specs := Plan(t, dir, read, plan)
	ck, err := weights.Open(dir)
	require.NoError(t, err)
	t.Cleanup(func() { ck.Close() })
	require.NoError(t, ck.Check(specs), "the plan against the checkpoint in %s", dir)
	return cfg, specs, ck
}

// EditedConfig makes a folder holding src's config.json changed by edit
// and links to the files of src named in link (the weights, say).
func EditedConfig(t testing.TB, src string, edit func(cfg map[string]any), link ...string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(src, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	edit(cfg)
	dir := t.TempDir()
	out, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), out, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, name := range link {
		if err := os.Symlink(filepath.Join(src, name), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
