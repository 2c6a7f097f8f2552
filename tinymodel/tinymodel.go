// Package tinymodel embeds a tiny but complete FramePack model, so that
// `framepack generate` runs end to end on a machine without the real
// weights. It is for smoke runs and tests: the weights are random (the
// golden test models of testdata/golden/models), so the video is noise.
// Every stage runs as with the real weights, but none of them means
// anything: not even the first frame, the start image through the random
// VAE, resembles the input image.
//
// The folder has the Hugging Face layout framepack.Load reads:
//
//	transformer/     packed HunyuanVideo transformer, 2+2 blocks, inner 64, text 64, pooled 32, image 48
//	vae/             HunyuanVideo VAE, channels (16, 32, 32, 32), 16 latent channels
//	text_encoder/    LLaMA, hidden 64, 4 layers, vocab 300
//	text_encoder_2/  CLIP text, hidden 32, 2 layers, vocab 200, legacy eos id (argmax pooling)
//	image_encoder/   SigLIP vision, hidden 48, image 32, patch 8
//	tokenizer/       byte-level BPE tokenizer.json for the 300 ids (any UTF-8 text)
//	tokenizer_2/     CLIP vocab.json + merges.txt for the 200 ids (printable ASCII only)
//
// Any bucket resolution framepack accepts works with it; Resolution (128)
// is the one it was made for, and its transformer's config says so
// (framepack.ResolutionKey), so that Pipeline.DefaultRequest and the
// command line use it: a one-second video takes seconds on a CPU there,
// and minutes at FramePack's 640. Its CLIP tokenizer knows printable ASCII
// only, so prompts must be ASCII.
//
// Outside this module:
//
//	dir, temporary, err := tinymodel.Dir()
//	if temporary {
//		defer os.RemoveAll(dir)
//	}
//	p, err := framepack.Load(dir, framepack.Options{})
//	req := p.DefaultRequest() // at Resolution, not FramePack's 640
//
// The tokenizer files are generated (gen_test.go; go test -run
// TestTokenizerFiles -update rewrites them).
package tinymodel

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/framepack-go/framepack/internal/atomicfile"
	"github.com/framepack-go/framepack/section"
)

//go:embed model
var files embed.FS

// Resolution is the bucket resolution to run the tiny model at (see the
// package comment); the command line's default without --models.
const Resolution = 128

// Corpus is the text the tiny tokenizers keep in few tokens (their
// generator's training text): the prompt template's part before the user
// prompt, as FramePack uses it, and a few prompts.
func Corpus() []string {
	prefix, _, _ := strings.Cut(section.PromptTemplate, "{}")
	return []string{
		prefix,
		"The girl dances gracefully, with clear movements, full of charm.",
		"A character doing some simple body movements.",
		"The man dances energetically, leaping mid-air with fluid arm swings and quick footwork.",
	}
}

// FS is the model folder as a file system.
func FS() fs.FS {
	sub, err := fs.Sub(files, "model")
	if err != nil {
		panic(err) // the embedded folder is always there
	}
	return sub
}

// Extract writes the model folder into dir (created if needed). Every file
// is written to a temporary name and renamed, so an interrupted extraction
// never leaves a truncated weight file behind.
func Extract(dir string) error {
	src := FS()
	return fs.WalkDir(src, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		dst := filepath.Join(dir, filepath.FromSlash(p))
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		return writeFile(src, p, dst)
	})
}

func writeFile(src fs.FS, p, dst string) error {
	in, err := src.Open(p)
	if err != nil {
		return err
	}
	defer in.Close()
	err = atomicfile.Write(dst, 0o644, func(f *os.File) error {
		_, err := io.Copy(f, in)
		return err
	})
	if err != nil {
		return fmt.Errorf("tinymodel: writing %s: %w", dst, err)
	}
	return nil
}

// Hash identifies the embedded files (hex SHA-256 over paths and contents).
func Hash() string {
	hashOnce.Do(func() {
		h := sha256.New()
		var paths []string
		fs.WalkDir(FS(), ".", func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				paths = append(paths, p)
			}
			return err
		})
		sort.Strings(paths)
		for _, p := range paths {
			// Streamed: every process that runs the tiny model hashes it,
			// and a copy of the files would be most of its memory.
			f, err := FS().Open(p)
			if err != nil {
				panic(err) // a listed embedded file is always there
			}
			st, _ := f.Stat()
			fmt.Fprintf(h, "%s\x00%d\x00", p, st.Size())
			io.Copy(h, f)
			f.Close()
		}
		hash = hex.EncodeToString(h.Sum(nil))
	})
	return hash
}

var (
	hashOnce sync.Once
	hash     string
)

// Dir returns a folder holding the model: under the user cache directory
// (framepack/tinymodel-<hash>), extracted there on first use and reused
// afterwards, or a new temporary folder when there is no cache directory
// (then temporary is true and the caller removes it).
func Dir() (dir string, temporary bool, err error) {
	if cache, err := os.UserCacheDir(); err == nil {
		dir := filepath.Join(cache, "framepack", "tinymodel-"+Hash()[:16])
		if complete(dir) {
			return dir, false, nil
		}
		if err := extractAtomically(dir); err == nil {
			return dir, false, nil
		}
	}
	tmp, err := os.MkdirTemp("", "framepack-tinymodel-")
	if err != nil {
		return "", false, fmt.Errorf("tinymodel: %w", err)
	}
	if err := Extract(tmp); err != nil {
		os.RemoveAll(tmp)
		return "", false, err
	}
	return tmp, true, nil
}

// complete reports whether dir holds every embedded file at its size.
func complete(dir string) bool {
	ok := true
	fs.WalkDir(FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !ok {
			return err
		}
		info, ierr := d.Info()
		st, serr := os.Stat(filepath.Join(dir, filepath.FromSlash(p)))
		if ierr != nil || serr != nil || st.Size() != info.Size() {
			ok = false
		}
		return nil
	})
	return ok
}

// extractAtomically extracts into a sibling temporary folder and renames
// it to dir.
func extractAtomically(dir string) error {
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(parent, ".tinymodel-*")
	if err != nil {
		return err
	}
	defer atomicfile.Track(tmp)()
	if err := Extract(tmp); err != nil {
		os.RemoveAll(tmp)
		return err
	}
	if err := os.Rename(tmp, dir); err != nil {
		// dir exists (a concurrent extraction, or a damaged copy):
		// rewrite its files in place, each one atomically.
		os.RemoveAll(tmp)
		if err := Extract(dir); err != nil {
			return err
		}
	}
	return nil
}
