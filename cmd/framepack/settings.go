package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/framepack-go/framepack"
	"github.com/framepack-go/framepack/internal/atomicfile"
)

// The settings file beside the video and the comment tag inside it are
// framepack.Settings, so that programs write the same.
type (
	settings       = framepack.Settings
	fileRef        = framepack.FileRef
	modelRef       = framepack.ModelRef
	timings        = framepack.Timings
	sectionTimings = framepack.SectionTimings
)

func newTimings(total, load time.Duration, res *framepack.Result) *timings {
	t := &timings{Total: secs(total), Load: secs(load), TextEncode: secs(res.TextEncode), VAEEncode: secs(res.VAEEncode),
		ImageEncode: secs(res.ImageEncode), Generate: secs(res.Total), Sections: []sectionTimings{}}
	for _, s := range res.Sections {
		t.Sampling += secs(s.Sample)
		t.Decoding += secs(s.Decode)
		t.Sections = append(t.Sections, sectionTimings{Section: s.Index, Sampling: secs(s.Sample), Decoding: secs(s.Decode), Frames: s.Frames})
	}
	return t
}

func secs(d time.Duration) float64 { return float64(d.Microseconds()) / 1e6 }

// modelRefs are the folders Load reads for each part: the override, or
// <dir>/<part>.
func modelRefs(dir string, parts map[string]*string) (map[string]modelRef, error) {
	names := make([]string, 0, len(parts))
	for part := range parts {
		names = append(names, part)
	}
	sort.Strings(names)
	refs := map[string]modelRef{}
	for _, part := range names {
		folder := *parts[part]
		if folder == "" {
			folder = filepath.Join(dir, part)
		}
		ref := modelRef{Folder: folder}
		for _, name := range []string{"config.json", "tokenizer_config.json"} {
			sum, err := fileSHA256(filepath.Join(folder, name))
			if os.IsNotExist(err) {
				continue
			}
			if err != nil {
				return nil, err
			}
			ref.ConfigSHA256 = sum
			break
		}
		refs[part] = ref
	}
	return refs, nil
}

func fileSHA256(path string) (string, error) {
	fh, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer fh.Close()
	h := sha256.New()
	if _, err := io.Copy(h, fh); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// settingsFile is the settings written to a temporary file beside the
// video before the video is, and renamed into place after it: a run that
// fails leaves neither, one that succeeds both.
type settingsFile struct {
	path, tmp string
	untrack   func() // atomicfile.Track's, until committed or discarded
}

func createSettings(path string, s *settings) (*settingsFile, error) {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("settings %s: %w", path, err)
	}
	fh, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return nil, fmt.Errorf("settings %s: %w", path, err)
	}
	sf := &settingsFile{path: path, tmp: fh.Name(), untrack: atomicfile.Track(fh.Name())}
	_, err = fh.Write(append(b, '\n'))
	if err == nil {
		err = fh.Sync()
	}
	if cerr := fh.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(sf.tmp, 0o644)
	}
	if err != nil {
		sf.discard()
		return nil, fmt.Errorf("settings %s: %w", path, err)
	}
	return sf, nil
}

func (sf *settingsFile) discard() {
	os.Remove(sf.tmp)
	sf.untrack()
}

func (sf *settingsFile) commit() error {
	if err := os.Rename(sf.tmp, sf.path); err != nil {
		sf.discard()
		return fmt.Errorf("settings %s: %w", sf.path, err)
	}
	sf.untrack()
	return nil
}
