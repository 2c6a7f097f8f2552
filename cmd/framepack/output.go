package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/framepack-go/framepack/video"
)

// Outputs are written under a temporary name and renamed over the path
// when complete. A rename replaces whatever the path names — a device node
// such as /dev/null, a FIFO, a symbolic link — so the path is checked
// before any work starts: it must be absent or a regular file (a frames
// folder for PNG output), in a folder we can create files in.

// videoKind is what -o asks for, chosen by its extension.
type videoKind int

const (
	kindContainer videoKind = iota // .mp4, .mov, .mkv through ffmpeg
	kindFrames                     // no extension: PNG frames in a folder
)

// videoExts are the containers -o accepts; listed in errors.
var videoExts = []string{".mp4", ".mov", ".mkv"}

// outputKind reads -o's extension: a container, or (none) PNG frames.
func outputKind(path string) (videoKind, error) {
	ext := strings.ToLower(filepath.Ext(path))
	if ext == "" {
		return kindFrames, nil
	}
	for _, e := range videoExts {
		if ext == e {
			return kindContainer, nil
		}
	}
	return 0, usagef("-o %s: %q is not a video extension; want %s, or a name without extension for a folder of PNG frames",
		path, ext, strings.Join(videoExts, ", "))
}

// videoOutput is where a video goes: path (what -o said, or the PNG
// folder beside it when ffmpeg is missing) as kind.
type videoOutput struct {
	requested, path string
	kind            videoKind
}

// checkVideoOutput checks -o for a video before any work: its kind, and
// that it (or the PNG folder it falls back to without ffmpeg) and, with
// settings, the settings file beside it can be replaced.
func checkVideoOutput(path string, settings bool) (videoOutput, error) {
	if path == "" {
		return videoOutput{}, usagef("-o: no output path")
	}
	// "frames/" is the folder frames; a trailing slash would also make
	// Lstat follow a link.
	path = filepath.Clean(path)
	kind, err := outputKind(path)
	if err != nil {
		return videoOutput{}, err
	}
	out := videoOutput{requested: path, path: path, kind: kind}
	if kind == kindContainer && !video.HaveFFmpeg() {
		out.path, out.kind = video.PNGDir(path), kindFrames
	}
	if err := checkReplaceable(out.path, out.kind == kindFrames); err != nil {
		if out.path != path {
			err = fmt.Errorf("%w (ffmpeg is not installed, so PNG frames would go there)", err)
		}
		return videoOutput{}, err
	}
	if settings {
		sp := settingsPath(out.path)
		if err := checkReplaceable(sp, false); err != nil {
			return videoOutput{}, err
		}
		if err := checkOurSettings(sp); err != nil {
			return videoOutput{}, err
		}
	}
	return out, checkWritable(out.path)
}

// maxSettingsBytes bounds the file checkOurSettings reads: ours are a few
// kilobytes.
const maxSettingsBytes = 1 << 20

// checkOurSettings refuses to let the settings file written beside a video
// replace a file at path that is not plainly a settings file framepack
// wrote before (-o M/vae/config would otherwise replace the model's
// config.json, -o clip a user's clip.json): a JSON object with the
// framepack build, the image, the models and the output.
func checkOurSettings(path string) error {
	fh, err := os.Open(path)
	if os.IsNotExist(err) || errors.Is(err, syscall.ENOTDIR) {
		return nil
	}
	if err != nil {
		return usagef("-o: the settings file %s: %v", path, unwrapPath(err))
	}
	defer fh.Close()
	raw, err := io.ReadAll(io.LimitReader(fh, maxSettingsBytes+1))
	if err != nil {
		return usagef("-o: the settings file %s: %v", path, unwrapPath(err))
	}
	var set struct {
		Framepack *struct {
			Module string `json:"module"`
		} `json:"framepack"`
		Image  *fileRef            `json:"image"`
		Models map[string]modelRef `json:"models"`
		Output *string             `json:"output"`
	}
	ours := len(raw) <= maxSettingsBytes && json.Unmarshal(raw, &set) == nil &&
		set.Framepack != nil && set.Framepack.Module != "" && set.Image != nil && set.Models != nil && set.Output != nil
	if !ours {
		return usagef("-o: the settings file would replace %s, which is not a framepack settings file; give another -o, or move the file", path)
	}
	return nil
}

// input is a file or folder a job reads, named by its flag.
type input struct{ flag, path string }

// checkNotInput refuses an output that would replace an input: the video
// (or other output file) or, with settings, the settings file beside it
// being one, or a frames folder holding one. Paths are compared resolved
// (absolute, links followed), and existing ones also by device and inode.
func checkNotInput(out videoOutput, settings bool, inputs []input) error {
	type output struct {
		path   string
		holder bool // a folder whose contents are replaced
	}
	outs := []output{{out.path, out.kind == kindFrames}}
	if settings {
		outs = append(outs, output{settingsPath(out.path), false})
	}
	for _, in := range inputs {
		if in.path == "" {
			continue
		}
		ip := resolvePath(in.path)
		ist, ierr := os.Stat(in.path)
		for _, o := range outs {
			op := resolvePath(o.path)
			same := ip == op
			if ost, err := os.Stat(o.path); err == nil && ierr == nil && os.SameFile(ist, ost) {
				same = true
			}
			switch {
			case same:
				return usagef("-o %s: %s is the %s input; the output would replace it", out.requested, o.path, in.flag)
			case o.holder && strings.HasPrefix(ip, op+string(filepath.Separator)):
				return usagef("-o %s: the %s input %s is in the folder the frames would replace", out.requested, in.flag, in.path)
			}
		}
	}
	return nil
}

// resolvePath is path absolute, with its links followed as far as it
// exists (an output that does not exist yet is its folder's, resolved,
// joined with its name).
func resolvePath(path string) string {
	p, err := filepath.Abs(path)
	if err != nil {
		return filepath.Clean(path)
	}
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	if dir, err := filepath.EvalSymlinks(filepath.Dir(p)); err == nil {
		return filepath.Join(dir, filepath.Base(p))
	}
	return p
}

// write writes frames to o: PNG frames, or a container through ffmpeg.
func (o videoOutput) write(ctx context.Context, f video.Frames, vo video.Options, log *slog.Logger) error {
	if o.kind == kindContainer {
		return video.WriteMP4(ctx, o.path, f, vo)
	}
	if o.path != o.requested {
		log.Warn(fmt.Sprintf("ffmpeg is not installed; writing %d PNG frames to %s instead of %s", f.T, o.path, o.requested))
	}
	return video.WritePNGs(ctx, o.path, f)
}

// checkReplaceable refuses a path that renaming a new output over would
// wrongly replace: a symbolic link (the link would go, not its target
// change), a device, FIFO or socket, a folder where a file goes, or a
// folder of other things where PNG frames go.
func checkReplaceable(path string, frames bool) error {
	st, err := os.Lstat(path)
	if os.IsNotExist(err) || errors.Is(err, syscall.ENOTDIR) {
		return nil // checkWritable reports a missing folder
	}
	if err != nil {
		return usagef("-o %s: %v", path, err)
	}
	switch m := st.Mode(); {
	case m&os.ModeSymlink != 0:
		return usagef("-o %s is a symbolic link; outputs replace the path itself, so give the file's own path", path)
	case m.IsDir() && frames:
		if !isFramesDir(path) {
			return usagef("-o %s is a folder with other things in it; PNG frames go into a new folder or replace one holding only frame_*.png", path)
		}
		return nil
	case m.IsDir():
		return usagef("-o %s is a folder", path)
	case !m.IsRegular():
		return usagef("-o %s exists and is not a regular file (%s); refusing to replace it", path, fileType(m))
	case frames:
		return usagef("-o %s is a file; PNG frames go into a folder", path)
	}
	return nil
}

// isFramesDir reports whether dir holds nothing but frame_*.png files:
// PNG frames written before, which a new run may replace.
func isFramesDir(dir string) bool {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range ents {
		if !e.Type().IsRegular() || !strings.HasPrefix(e.Name(), "frame_") || filepath.Ext(e.Name()) != ".png" {
			return false
		}
	}
	return true
}

func fileType(m os.FileMode) string {
	switch {
	case m&os.ModeCharDevice != 0:
		return "a character device"
	case m&os.ModeDevice != 0:
		return "a block device"
	case m&os.ModeNamedPipe != 0:
		return "a named pipe"
	case m&os.ModeSocket != 0:
		return "a socket"
	}
	return "mode " + m.String()
}

// checkWritable probes path's folder by creating and removing a file in
// it, so an unwritable output fails now, not after the generation.
func checkWritable(path string) error {
	dir := filepath.Dir(path)
	st, err := os.Stat(dir)
	if err != nil || !st.IsDir() {
		return usagef("-o %s: the folder %s does not exist", path, dir)
	}
	fh, err := os.CreateTemp(dir, ".framepack-probe-*")
	if err != nil {
		return usagef("-o %s: cannot create files in %s: %v", path, dir, unwrapPath(err))
	}
	name := fh.Name()
	fh.Close()
	if err := os.Remove(name); err != nil {
		return fmt.Errorf("-o %s: removing the probe file %s: %w", path, name, err)
	}
	return nil
}

// unwrapPath drops the *PathError's path (the probe's random name).
func unwrapPath(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}

// checkFileOutput checks -o for a plain file output (latents).
func checkFileOutput(path string) error {
	if path == "" {
		return usagef("-o is required")
	}
	path = filepath.Clean(path)
	if err := checkReplaceable(path, false); err != nil {
		return err
	}
	return checkWritable(path)
}

// settingsPath is the settings file written beside a video: the output's
// name plus ".json" (out.mp4 → out.mp4.json), which no video output takes.
func settingsPath(out string) string {
	return filepath.Clean(out) + ".json"
}
