package convchain

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/framepack-go/framepack/internal/atomicfile"
)

const cacheVersion = 1

// Skip is why a tier was passed over for a key.
type Skip struct {
	Tier string `json:"tier"`
	// Kind is "timeout", "oom", "naive", "error" or "crash".
	Kind   string `json:"kind"`
	Reason string `json:"reason"`
}

// Choice is what the chain remembers for a key: the tier that worked, its
// plan, and why each tier before it was skipped.
type Choice struct {
	Key     Key       `json:"key"`
	Tier    string    `json:"tier"`
	Plan    *Plan     `json:"plan,omitempty"`
	Skips   []Skip    `json:"skips,omitempty"`
	Updated time.Time `json:"updated"`
}

type cacheFile struct {
	Version int                `json:"version"`
	Choices map[string]*Choice `json:"choices"`
}

// DefaultCachePath is where choices are remembered:
// os.UserCacheDir()/framepack/conv3d.json.
func DefaultCachePath() (string, error) {
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no user cache directory for the conv3d choices: %w", err)
	}
	return filepath.Join(dir, "framepack", "conv3d.json"), nil
}

// readCache reads the choices at path. A missing file is no choices; an
// unreadable one is reported (the caller ignores it and rewrites it).
func readCache(path string) (map[string]*Choice, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]*Choice{}, nil
	}
	if err != nil {
		return map[string]*Choice{}, err
	}
	var f cacheFile
	if err := json.Unmarshal(b, &f); err != nil {
		return map[string]*Choice{}, fmt.Errorf("not valid JSON: %w", err)
	}
	if f.Version != cacheVersion {
		return map[string]*Choice{}, fmt.Errorf("version %d, want %d", f.Version, cacheVersion)
	}
	out := map[string]*Choice{}
	for k, c := range f.Choices {
		if c == nil || c.Tier == "" || c.Key.String() != k {
			return map[string]*Choice{}, fmt.Errorf("entry %q is malformed", k)
		}
		out[k] = c
	}
	return out, nil
}

// writeCache merges choices into the file at path (entries of other
// processes and devices stay) and replaces it atomically: a temporary file
// in the same directory, synced, then renamed over it.
func writeCache(path string, choices map[string]*Choice) error {
	merged, _ := readCache(path) // an unreadable file is replaced
	for k, c := range choices {
		merged[k] = c
	}
	b, err := json.MarshalIndent(cacheFile{Version: cacheVersion, Choices: merged}, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return atomicfile.WriteFile(path, append(b, '\n'), 0o600)
}

// Remembered lists the choices remembered at path ("" for
// DefaultCachePath), sorted by device and key, for `framepack doctor`.
func Remembered(path string) ([]Choice, error) {
	if path == "" {
		p, err := DefaultCachePath()
		if err != nil {
			return nil, err
		}
		path = p
	}
	m, err := readCache(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	out := make([]Choice, 0, len(m))
	for _, c := range m {
		out = append(out, *c)
	}
	slices.SortFunc(out, func(a, b Choice) int { return strings.Compare(a.Key.String(), b.Key.String()) })
	return out, nil
}

// String is one line for a choice: the key, the tier and algorithm, and the
// skips.
func (c Choice) String() string {
	s := c.Key.String() + ": " + c.Tier
	if c.Plan != nil && c.Plan.Algorithm != "" {
		s += " (" + c.Plan.Algorithm + ")"
	}
	for _, sk := range c.Skips {
		s += fmt.Sprintf("; %s skipped: %s", sk.Tier, sk.Reason)
	}
	return s
}
