package main

import (
	"bytes"
	"fmt"
	"image"
	"image/png"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/framepack-go/framepack"
	"github.com/framepack-go/framepack/internal/atomicfile"
	"github.com/framepack-go/framepack/section"
)

// previewWriter is --preview: at every sampler step it writes FramePack's
// live preview (Progress.PreviewRGB: the current denoised latents through
// the fixed latent-to-RGB map, the section's frames side by side at latent
// resolution) to a PNG, each time a whole file renamed over the path, so a
// viewer never reads half of one.
type previewWriter struct {
	path   string
	log    *slog.Logger
	writes int
	err    error // the first failed write; later steps write nothing
}

func newPreviewWriter(path string, log *slog.Logger) *previewWriter {
	return &previewWriter{path: path, log: log}
}

// report writes the preview of each sampler step.
func (w *previewWriter) report(pr framepack.Progress) {
	if pr.Stage != framepack.StageSample || pr.Denoised == nil || w.err != nil {
		return
	}
	// Made now: Denoised is valid only during the call.
	im, err := pr.PreviewRGB()
	if err == nil {
		err = atomicfile.WriteFile(w.path, encodePNG(im), 0o644)
	}
	if err != nil {
		w.err = err
		w.log.Warn(fmt.Sprintf("--preview: writing %s at section %d step %d failed (%v); no more previews this job",
			w.path, pr.Section, pr.Step, err))
		return
	}
	w.writes++
}

// encodePNG is im as a PNG, written for speed.
func encodePNG(im *section.RGB) []byte {
	img := image.NewNRGBA(image.Rect(0, 0, im.W, im.H))
	for i := 0; i < im.W*im.H; i++ {
		img.Pix[4*i], img.Pix[4*i+1], img.Pix[4*i+2], img.Pix[4*i+3] = im.Pix[3*i], im.Pix[3*i+1], im.Pix[3*i+2], 255
	}
	var b bytes.Buffer
	enc := png.Encoder{CompressionLevel: png.BestSpeed}
	enc.Encode(&b, img) // writes to memory: cannot fail
	return b.Bytes()
}

// checkPreview checks --preview before any work: a .png path (so never
// the video's or its settings file's) in a folder that exists and takes
// new files, and nothing a rename over it would wrongly replace (a
// symbolic link, a folder, a device).
func checkPreview(path string) error {
	if path == "" {
		return nil
	}
	if !strings.EqualFold(filepath.Ext(path), ".png") {
		return usagef("--preview %s: the preview is a PNG; give a name ending in .png", path)
	}
	clean := filepath.Clean(path)
	if st, err := os.Lstat(clean); err == nil {
		switch m := st.Mode(); {
		case m&os.ModeSymlink != 0:
			return usagef("--preview %s is a symbolic link; the preview replaces the path itself, so give the file's own path", path)
		case m.IsDir():
			return usagef("--preview %s is a folder", path)
		case !m.IsRegular():
			return usagef("--preview %s exists and is not a regular file (%s); refusing to replace it", path, fileType(m))
		}
	}
	dir := filepath.Dir(clean)
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return usagef("--preview %s: the folder %s does not exist", path, dir)
	}
	fh, err := os.CreateTemp(dir, ".framepack-probe-*")
	if err != nil {
		return usagef("--preview %s: cannot create files in %s: %v", path, dir, unwrapPath(err))
	}
	fh.Close()
	return os.Remove(fh.Name())
}
