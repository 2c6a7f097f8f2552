package worker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/framepack-go/framepack"
	"github.com/framepack-go/framepack/farm"
	"github.com/framepack-go/framepack/section"
	"github.com/framepack-go/framepack/video"
)

// MaxVideoFrames bounds a video a job keeps whole (the result starts with
// it), as `generate --video` does: 4 minutes at 30 fps. A new_only job
// keeps only its last section.VideoEncodeFrames frames, of any length.
const MaxVideoFrames = 7200

// ErrNotVideo is in ReadVideo's error for a file that ffprobe finds no
// video in.
var ErrNotVideo = errors.New("not a video")

// notVideo is an ErrNotVideo with its own message (ffprobe's words).
type notVideo string

func (e notVideo) Error() string        { return string(e) }
func (e notVideo) Is(target error) bool { return target == ErrNotVideo }

// Video is a video read for a job.
type Video struct {
	Info video.Info
	// Count is the frames read; Frames those kept, each cropped to its
	// bucket, in order: all of them, or the last
	// section.VideoEncodeFrames. Last is the last frame, cropped.
	Count  int
	Frames []*section.RGB
	Last   *section.RGB
}

// ReadVideo reads the video file at path through ffmpeg, for a job at
// resolution, as `generate --video` does: each frame cropped to its
// bucket as it is read. check is called with the frames' size before any
// is decoded (Request.ValidateSize: the size is refused where an image's
// would be). With all every frame is kept (more than MaxVideoFrames is an
// error), else only the last section.VideoEncodeFrames, all an extension
// reads. A file ffprobe finds no video in is ErrNotVideo. Errors name the
// video as name ("the video \"clip.mp4\""), never by its path.
func ReadVideo(ctx context.Context, path, name string, resolution int, all bool, check func(w, h int) error) (*Video, error) {
	// ffmpeg's errors name the file, and so does its own line in them.
	rename := func(err error) string {
		return name + ": " + strings.ReplaceAll(strings.ReplaceAll(err.Error(), path+": ", ""), path, name)
	}
	info, err := video.Probe(ctx, path)
	if err != nil {
		if errors.Is(err, video.ErrNoFFprobe) {
			return nil, err
		}
		return nil, notVideo(rename(err))
	}
	if err := check(info.W, info.H); err != nil {
		return nil, err
	}
	bh, bw, err := section.NearestBucket(info.H, info.W, resolution)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	v := &Video{Info: info}
	var stop error // the frames' own error, which names the video already
	_, err = video.ReadFrames(ctx, path, info, func(pix []uint8) error {
		f := &section.RGB{W: info.W, H: info.H, Pix: pix}
		c, err := section.ResizeAndCenterCrop(f, bw, bh)
		if err != nil {
			stop = fmt.Errorf("%s: cropping frame %d: %w", name, v.Count, err)
			return stop
		}
		if c == f {
			c = f.Clone() // the reader reuses its buffer
		}
		v.Count++
		v.Frames, v.Last = append(v.Frames, c), c
		switch {
		case !all && len(v.Frames) > section.VideoEncodeFrames:
			v.Frames = slices.Delete(v.Frames, 0, 1)
		case all && len(v.Frames) > MaxVideoFrames:
			stop = fmt.Errorf("%s has more than %d frames; trim it, or extend it with new_only (which keeps only its last %d)",
				name, MaxVideoFrames, section.VideoEncodeFrames)
			return stop
		}
		return nil
	})
	if err != nil {
		if stop != nil || errors.Is(err, video.ErrNoFFmpeg) {
			return nil, err
		}
		return nil, errors.New(rename(err))
	}
	return v, nil
}

// video reads the job's input video for req, as ReadVideo does: every
// frame, or with req.VideoNewOnly the last the extension reads.
func (w *Worker) video(ctx context.Context, id string, req *framepack.Request) ([]*section.RGB, error) {
	b, err := w.f.GetBytes(ctx, id, farm.FileInputVideo)
	if err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(w.cfg.TempDir, "framepack-input-")
	if err != nil {
		return nil, err
	}
	defer os.Remove(f.Name())
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("the input video: %w", err)
	}
	v, err := ReadVideo(ctx, f.Name(), "the input video", req.Resolution, !req.VideoNewOnly, func(w, h int) error {
		return req.ValidateSize(w, h, req.EndRGB != nil)
	})
	if err != nil {
		return nil, err
	}
	return v.Frames, nil
}

// VideoThumbnail is a video job's thumbnail before it is done: the
// input's last frame, cropped, at most 320 pixels wide, as PNG.
func VideoThumbnail(last *section.RGB) ([]byte, error) {
	return thumbnail(video.Frames{T: 1, W: last.W, H: last.H, Pix: last.Pix})
}
