package video

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
)

// Info describes a video file's first video stream, as ffprobe reads it.
type Info struct {
	W, H  int
	Codec string
	// FPS is the stream's average frame rate (0 when ffprobe gives none).
	FPS float64
}

// ErrNoFFprobe is returned by Probe when ffprobe is not on the PATH.
var ErrNoFFprobe = errors.New("ffprobe not found on the PATH (it comes with ffmpeg: apt-get install ffmpeg)")

// Probe reads the size, codec and frame rate of path's first video stream
// through ffprobe. A file ffprobe cannot read, or one without a video
// stream, is an error that says so with ffprobe's own words.
func Probe(ctx context.Context, path string) (Info, error) {
	bin, err := exec.LookPath("ffprobe")
	if err != nil {
		return Info{}, ErrNoFFprobe
	}
	cmd := exec.CommandContext(ctx, bin, "-v", "error", "-select_streams", "v:0",
		"-show_entries", "stream=width,height,codec_name,avg_frame_rate", "-of", "json", "--", path)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return Info{}, fmt.Errorf("%s: not a video ffmpeg can read: %s", path, lastLine(stderr.String(), err))
	}
	var out struct {
		Streams []struct {
			Width     int    `json:"width"`
			Height    int    `json:"height"`
			Codec     string `json:"codec_name"`
			FrameRate string `json:"avg_frame_rate"`
		} `json:"streams"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		return Info{}, fmt.Errorf("%s: ffprobe's answer: %w", path, err)
	}
	if len(out.Streams) == 0 {
		return Info{}, fmt.Errorf("%s: no video stream", path)
	}
	st := out.Streams[0]
	if st.Width <= 0 || st.Height <= 0 {
		return Info{}, fmt.Errorf("%s: the video stream (%s) has no size", path, st.Codec)
	}
	info := Info{W: st.Width, H: st.Height, Codec: st.Codec}
	if num, den, ok := strings.Cut(st.FrameRate, "/"); ok {
		n, e1 := strconv.ParseFloat(num, 64)
		d, e2 := strconv.ParseFloat(den, 64)
		if e1 == nil && e2 == nil && d > 0 {
			info.FPS = n / d
		}
	}
	return info, nil
}

// ReadFrames decodes path's first video stream through ffmpeg to 8-bit
// RGB, in Probe's size (no rotation applied), and calls each with every
// frame in order; the slice is reused for the next frame. It returns the
// number of frames read. A stream ffmpeg cannot decode (an unsupported
// codec, a damaged file) is an error with ffmpeg's words, and so is an
// error from each, which stops the decode.
func ReadFrames(ctx context.Context, path string, info Info, each func(pix []uint8) error) (int, error) {
	bin, err := exec.LookPath("ffmpeg")
	if err != nil {
		return 0, ErrNoFFmpeg
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-hide_banner", "-nostdin", "-v", "error", "-noautorotate", "-i", path,
		"-map", "0:v:0", "-f", "rawvideo", "-pix_fmt", "rgb24", "-")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("%s: starting ffmpeg: %w", path, err)
	}
	r := bufio.NewReaderSize(pipe, 1<<20)
	frame := make([]uint8, 3*info.W*info.H)
	n := 0
	var readErr error
	for {
		_, err := io.ReadFull(r, frame)
		if err == io.EOF {
			break
		}
		if err != nil {
			if err == io.ErrUnexpectedEOF {
				readErr = fmt.Errorf("%s: frame %d is cut short (ffmpeg's frames are not %d×%d)", path, n, info.W, info.H)
			} else {
				readErr = fmt.Errorf("%s: reading ffmpeg's frames: %w", path, err)
			}
			break
		}
		if err := each(frame); err != nil {
			readErr = err
			break
		}
		n++
	}
	if readErr != nil {
		cancel()
		cmd.Wait()
		return n, readErr
	}
	if err := cmd.Wait(); err != nil {
		return n, fmt.Errorf("%s: ffmpeg could not decode the video: %s", path, lastLine(stderr.String(), err))
	}
	if s := strings.TrimSpace(stderr.String()); s != "" {
		// ffmpeg exits 0 after some decode errors; frames may be missing.
		return n, fmt.Errorf("%s: ffmpeg reported errors decoding the video: %s", path, lastLine(s, nil))
	}
	if n == 0 {
		return 0, fmt.Errorf("%s: the video has no frames", path)
	}
	return n, nil
}

// lastLine is the last non-empty line of a tool's stderr, or err's text.
func lastLine(stderr string, err error) string {
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	if l := strings.TrimSpace(lines[len(lines)-1]); l != "" {
		return l
	}
	if err != nil {
		return err.Error()
	}
	return "no message"
}
