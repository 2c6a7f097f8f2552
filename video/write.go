package video

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image/png"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"github.com/framepack-go/framepack/internal/atomicfile"
)

// Options configure the output.
type Options struct {
	FPS int // 0 means 30, FramePack's rate
	// CRF is x264's constant rate factor, 1–51; 0 means DefaultCRF, and
	// CRFZero asks for CRF 0 (FramePack's "uncompressed").
	CRF int
	// Log receives the one line that says the PNG fallback was taken
	// (nil: slog.Default()).
	Log *slog.Logger
	// Comment, when set, goes into the container's comment tag.
	Comment string
}

// DefaultCRF is FramePack's mp4_crf default.
const DefaultCRF = 16

// CRFZero is Options.CRF for x264's CRF 0.
const CRFZero = -1

func (o Options) fps() int {
	if o.FPS <= 0 {
		return 30
	}
	return o.FPS
}

func (o Options) crf() int {
	switch {
	case o.CRF == CRFZero:
		return 0
	case o.CRF == 0:
		return DefaultCRF
	}
	return o.CRF
}

// ErrNoFFmpeg is returned by WriteMP4 when ffmpeg is not on the PATH.
var ErrNoFFmpeg = errors.New("ffmpeg not found on the PATH (install it, e.g. apt-get install ffmpeg)")

// HaveFFmpeg reports whether ffmpeg is on the PATH (else Write writes PNG
// frames).
func HaveFFmpeg() bool {
	_, err := exec.LookPath("ffmpeg")
	return err == nil
}

// containerFormat is ffmpeg's muxer for path's extension: .mov and .mkv by
// name, anything else MP4.
func containerFormat(path string) string {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".mov":
		return "mov"
	case ".mkv":
		return "matroska"
	}
	return "mp4"
}

// Write writes frames as an MP4 at path when ffmpeg is available; without
// ffmpeg it writes PNG frames into the folder PNGDir(path) instead and logs
// one line saying so. It returns what it wrote.
func Write(ctx context.Context, path string, f Frames, o Options) (string, error) {
	err := WriteMP4(ctx, path, f, o)
	if !errors.Is(err, ErrNoFFmpeg) {
		return path, err
	}
	dir := PNGDir(path)
	log := o.Log
	if log == nil {
		log = slog.Default()
	}
	log.Warn(fmt.Sprintf("video: ffmpeg is not installed; writing %d PNG frames to %s instead of %s", f.T, dir, path), "frames", f.T, "dir", dir)
	return dir, WritePNGs(ctx, dir, f)
}

// PNGDir is the folder Write uses for path when ffmpeg is missing: the path
// without its extension, plus "_frames".
func PNGDir(path string) string {
	return strings.TrimSuffix(path, filepath.Ext(path)) + "_frames"
}

// WriteMP4 encodes frames as H.264 in an MP4 at path through ffmpeg (raw
// rgb24 frames on its stdin; libx264 at o.CRF, yuv420p, o.FPS), as
// torchvision's write_video does for FramePack; a path ending in .mov or
// .mkv gets that container instead. The file is written under a temporary
// name beside path and renamed only once it checks out: ffmpeg exited 0
// and printed no error (it exits 0 when writing the trailer fails on a
// full disk), the file is flushed to disk, its container structure is
// whole (VerifyMP4) and it holds every frame (MP4Frames; for Matroska,
// ffprobe's count where installed).
func WriteMP4(ctx context.Context, path string, f Frames, o Options) error {
	if err := f.check(); err != nil {
		return err
	}
	if f.H%2 != 0 || f.W%2 != 0 {
		return fmt.Errorf("video: %d×%d frames: yuv420p H.264 needs even width and height", f.W, f.H)
	}
	if c := o.crf(); c < 0 || c > 51 {
		return fmt.Errorf("video: CRF %d is outside x264's 0–51", c)
	}
	bin, err := exec.LookPath("ffmpeg")
	if err != nil {
		return ErrNoFFmpeg
	}
	// ffmpeg writes the temporary by its name; it is checked before the
	// rename.
	var werr error
	err = atomicfile.Write(path, 0o644, func(tmp *os.File) error {
		werr = runFFmpeg(ctx, bin, path, tmp.Name(), f, o)
		return werr
	})
	if err != nil && err != werr {
		err = fmt.Errorf("video: %w", err)
	}
	return err
}

// runFFmpeg encodes f into tmpName, the temporary of path, and checks what
// it wrote.
func runFFmpeg(ctx context.Context, bin, path, tmpName string, f Frames, o Options) error {
	args := []string{"-hide_banner", "-nostdin", "-loglevel", "error", "-y",
		"-f", "rawvideo", "-pix_fmt", "rgb24", "-s", fmt.Sprintf("%dx%d", f.W, f.H), "-r", strconv.Itoa(o.fps()), "-i", "pipe:0",
		"-c:v", "libx264", "-crf", strconv.Itoa(o.crf()), "-pix_fmt", "yuv420p", "-an"}
	if o.Comment != "" {
		args = append(args, "-metadata", "comment="+o.Comment)
	}
	format := containerFormat(path)
	args = append(args, "-f", format, tmpName)
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdin = bytes.NewReader(f.Pix)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	// ffmpeg exits 0 when the trailer cannot be written (a full disk), so
	// any line it prints at -loglevel error is a failure too.
	if msg := ffmpegErrors(stderr.String(), tmpName, path); err != nil || msg != "" {
		if err == nil {
			err = errors.New("ffmpeg exited 0 but reported errors")
		}
		return fmt.Errorf("video: writing %s: %v: %s", path, err, msg)
	}
	if err := syncFile(tmpName); err != nil {
		return fmt.Errorf("video: writing %s: %w", path, err)
	}
	if err := verifyFile(ctx, tmpName, format, f.T); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("video: ffmpeg wrote a broken %s (%v); nothing was kept", path, err)
	}
	return nil
}

// WritePNGs writes frame_00000.png … into the folder dir: into a temporary
// folder beside it first, which then replaces dir (an existing dir is
// removed only once the new one is complete).
func WritePNGs(ctx context.Context, dir string, f Frames) error {
	if err := f.check(); err != nil {
		return err
	}
	dir = filepath.Clean(dir)
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "."+filepath.Base(dir)+".tmp-*")
	if err != nil {
		return fmt.Errorf("video: %w", err)
	}
	defer atomicfile.Track(tmp)()
	ok := false
	defer func() {
		if !ok {
			os.RemoveAll(tmp)
		}
	}()
	if err := writeFrames(ctx, tmp, f); err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return fmt.Errorf("video: %w", err)
	}
	var old string
	// The two renames are one step for a process removing its temporaries
	// on the way out (atomicfile.RemoveTracked).
	err = atomicfile.Commit(func() error {
		if _, err := os.Stat(tmp); err != nil {
			return fmt.Errorf("video: %w", err)
		}
		if _, err := os.Lstat(dir); err == nil {
			old = tmp + ".old"
			if err := os.Rename(dir, old); err != nil {
				return fmt.Errorf("video: replacing %s: %w", dir, err)
			}
		}
		if err := os.Rename(tmp, dir); err != nil {
			if old != "" {
				os.Rename(old, dir)
			}
			return fmt.Errorf("video: %w", err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	ok = true
	if old != "" {
		os.RemoveAll(old)
	}
	return nil
}

// writeFrames encodes the frames into dir on every core: PNG encoding is
// tens of milliseconds a frame, seconds for a video on one core.
func writeFrames(ctx context.Context, dir string, f Frames) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := make(chan int)
	errs := make(chan error, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for range cap(errs) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			enc := png.Encoder{CompressionLevel: png.BestSpeed}
			var buf bytes.Buffer
			for t := range next {
				buf.Reset()
				if err := enc.Encode(&buf, f.Frame(t)); err != nil {
					errs <- fmt.Errorf("video: frame %d: %w", t, err)
					cancel()
					return
				}
				if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("frame_%05d.png", t)), buf.Bytes(), 0o644); err != nil {
					errs <- fmt.Errorf("video: %w", err)
					cancel()
					return
				}
			}
		}()
	}
	for t := 0; t < f.T && ctx.Err() == nil; t++ {
		select {
		case next <- t:
		case <-ctx.Done():
		}
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return ctx.Err()
	}
}

// ffmpegErrors is ffmpeg's error output on one line, with the temporary
// file's name replaced by the output's.
func ffmpegErrors(stderr, tmp, path string) string {
	var lines []string
	for _, l := range strings.Split(stderr, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "Last message repeated") {
			continue
		}
		lines = append(lines, strings.ReplaceAll(l, tmp, path))
	}
	return strings.Join(lines, "; ")
}
