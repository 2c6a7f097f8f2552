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
	// SearchTimeouts are the tiers whose search overran its deadline on
	// a device, by SearchTimeout.id: those tiers plan without searching
	// there until the record is forgotten (ForgetSearchTimeouts).
	SearchTimeouts map[string]*SearchTimeout `json:"search_timeouts,omitempty"`
}

// SearchTimeout records that a tier's search overran its deadline on a
// device: a driver whose search hangs hangs for every shape, so the tier
// then plans from its heuristics without searching, on that device, in
// this run and later ones, until the record is forgotten.
type SearchTimeout struct {
	Device string `json:"device"`
	Tier   string `json:"tier"`
	// Key is the convolution whose search timed out.
	Key Key `json:"key"`
	// Deadline is the deadline it overran, in seconds.
	Deadline float64 `json:"deadline_s"`
	// Exhaustive: the search was exhaustive; the record then keeps only
	// exhaustive searches from running.
	Exhaustive bool      `json:"exhaustive,omitempty"`
	Updated    time.Time `json:"updated"`
}

func (t *SearchTimeout) id() string {
	id := t.Device + "|" + t.Tier
	if t.Exhaustive {
		id += "|exhaustive"
	}
	return id
}

func (t SearchTimeout) String() string {
	what := "search"
	if t.Exhaustive {
		what = "exhaustive search"
	}
	return fmt.Sprintf("%s: tier %s's %s of %s overran its %.0f s deadline on %s",
		t.Device, t.Tier, what, t.Key, t.Deadline, t.Updated.Format(time.DateOnly))
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
	f, err := readCacheFile(path)
	return f.Choices, err
}

// readCacheFile reads the file at path: a missing file is an empty one; an
// unreadable one is reported, with an empty one.
func readCacheFile(path string) (*cacheFile, error) {
	empty := &cacheFile{Version: cacheVersion, Choices: map[string]*Choice{}, SearchTimeouts: map[string]*SearchTimeout{}}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return empty, nil
	}
	if err != nil {
		return empty, err
	}
	var f cacheFile
	if err := json.Unmarshal(b, &f); err != nil {
		return empty, fmt.Errorf("not valid JSON: %w", err)
	}
	if f.Version != cacheVersion {
		return empty, fmt.Errorf("version %d, want %d", f.Version, cacheVersion)
	}
	out := &cacheFile{Version: cacheVersion, Choices: map[string]*Choice{}, SearchTimeouts: map[string]*SearchTimeout{}}
	for k, c := range f.Choices {
		if c == nil || c.Tier == "" || c.Key.String() != k {
			return empty, fmt.Errorf("entry %q is malformed", k)
		}
		out.Choices[k] = c
	}
	for k, t := range f.SearchTimeouts {
		if t == nil || t.Tier == "" || t.id() != k {
			return empty, fmt.Errorf("search timeout %q is malformed", k)
		}
		out.SearchTimeouts[k] = t
	}
	return out, nil
}

// writeCache merges choices into the file at path (entries of other
// processes and devices stay) and replaces it atomically: a temporary file
// in the same directory, synced, then renamed over it.
func writeCache(path string, choices map[string]*Choice) error {
	return updateCache(path, func(f *cacheFile) {
		for k, c := range choices {
			f.Choices[k] = c
		}
	})
}

// updateCache changes the file at path with change and replaces it
// atomically (an unreadable file is replaced).
func updateCache(path string, change func(f *cacheFile)) error {
	f, _ := readCacheFile(path)
	change(f)
	if len(f.SearchTimeouts) == 0 {
		f.SearchTimeouts = nil
	}
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return atomicfile.WriteFile(path, append(b, '\n'), 0o600)
}

// orDefault is path, or DefaultCachePath for "".
func orDefault(path string) (string, error) {
	if path != "" {
		return path, nil
	}
	return DefaultCachePath()
}

// SearchTimeouts lists the search timeouts remembered at path ("" for
// DefaultCachePath), for `framepack doctor`.
func SearchTimeouts(path string) ([]SearchTimeout, error) {
	path, err := orDefault(path)
	if err != nil {
		return nil, err
	}
	f, err := readCacheFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var out []SearchTimeout
	for _, t := range f.SearchTimeouts {
		out = append(out, *t)
	}
	slices.SortFunc(out, func(a, b SearchTimeout) int { return strings.Compare(a.id(), b.id()) })
	return out, nil
}

// ForgetSearchTimeouts removes the search timeouts remembered at path (""
// for DefaultCachePath), so that the tiers search again, and the shapes
// they planned without a search are searched again too; the choices stay.
// It returns how many were removed.
func ForgetSearchTimeouts(path string) (int, error) {
	path, err := orDefault(path)
	if err != nil {
		return 0, err
	}
	f, err := readCacheFile(path)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	n := len(f.SearchTimeouts)
	if n == 0 {
		return 0, nil
	}
	if err := updateCache(path, func(f *cacheFile) { clear(f.SearchTimeouts) }); err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return n, nil
}

// Remembered lists the choices remembered at path ("" for
// DefaultCachePath), sorted by device and key, for `framepack doctor`.
func Remembered(path string) ([]Choice, error) {
	path, err := orDefault(path)
	if err != nil {
		return nil, err
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
