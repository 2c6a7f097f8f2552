package main

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/framepack-go/framepack/section"
	"github.com/framepack-go/framepack/video"
)

// maxVideoInputFrames bounds the input video kept whole (the output starts
// with it): 4 minutes at 30 fps. --new-only keeps only the frames the
// extension encodes, from a video of any length.
const maxVideoInputFrames = 7200

// frameExts are the image files a folder of frames may hold.
var frameExts = []string{".png", ".jpg", ".jpeg", ".webp"}

// readVideoInput reads --video: a video file through ffmpeg, or a folder of
// frames (PNG, JPEG or WebP, in name order), each frame cropped to its
// bucket at resolution as it is read, so that the whole video is held at
// the bucket's size. With newOnly only the last section.VideoEncodeFrames
// frames are kept (all the extension reads).
func readVideoInput(ctx context.Context, path string, resolution int, newOnly bool, log *slog.Logger) ([]*section.RGB, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("--video: %w", err)
	}
	var frames []*section.RGB
	var bw, bh int
	keep := func(f *section.RGB, i int) error {
		if len(frames) == 0 && bw == 0 {
			if bh, bw, err = videoBucket(path, f.W, f.H, resolution); err != nil {
				return err
			}
		}
		c, err := section.ResizeAndCenterCrop(f, bw, bh)
		if err != nil {
			return fmt.Errorf("--video %s: cropping frame %d: %w", path, i, err)
		}
		if c == f {
			c = f.Clone() // the reader reuses its buffer
		}
		frames = append(frames, c)
		switch {
		case newOnly && len(frames) > section.VideoEncodeFrames:
			frames = slices.Delete(frames, 0, 1)
		case !newOnly && len(frames) > maxVideoInputFrames:
			return fmt.Errorf("--video %s has more than %d frames; trim it, or give --new-only (which keeps only its last %d)",
				path, maxVideoInputFrames, section.VideoEncodeFrames)
		}
		return nil
	}
	if st.IsDir() {
		return frames, readFrameFolder(path, keep)
	}
	info, err := video.Probe(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("--video: %w", err)
	}
	if info.FPS > 0 && math.Abs(info.FPS-30) > 0.01 {
		log.Warn(fmt.Sprintf("--video %s is at %.3g fps; FramePack makes 30 fps, so the input plays at 30 fps in the output and the new part follows its motion per frame", path, info.FPS))
	}
	n := 0
	_, err = video.ReadFrames(ctx, path, info, func(pix []uint8) error {
		n++
		return keep(&section.RGB{W: info.W, H: info.H, Pix: pix}, n-1)
	})
	if err != nil {
		return nil, fmt.Errorf("--video: %w", err)
	}
	return frames, nil
}

// readFrameFolder calls keep with every frame of dir in name order.
func readFrameFolder(dir string, keep func(*section.RGB, int) error) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("--video: %w", err)
	}
	var names []string
	for _, e := range ents {
		if e.Type().IsRegular() && slices.Contains(frameExts, strings.ToLower(filepath.Ext(e.Name()))) {
			names = append(names, e.Name())
		}
	}
	if len(names) == 0 {
		return fmt.Errorf("--video %s: a folder of frames, but it holds no PNG, JPEG or WebP file", dir)
	}
	slices.Sort(names)
	var w, h int
	for i, name := range names {
		f, err := section.LoadImage(filepath.Join(dir, name))
		if err != nil {
			return fmt.Errorf("--video: %w", err)
		}
		if i == 0 {
			w, h = f.W, f.H
		} else if f.W != w || f.H != h {
			return fmt.Errorf("--video %s: %s is %d×%d, %s %d×%d: the frames must all be one size", dir, name, f.W, f.H, names[0], w, h)
		}
		if err := keep(f, i); err != nil {
			return err
		}
	}
	return nil
}

// videoBucket is the bucket a w×h video is cropped to, refused where an
// image of that size would be (Request.Validate: a crop that would blow a
// very thin frame up to many times the bucket).
func videoBucket(path string, w, h, resolution int) (bh, bw int, err error) {
	bh, bw, err = section.NearestBucket(h, w, resolution)
	if err != nil {
		return 0, 0, fmt.Errorf("--video %s: %w", path, err)
	}
	if s := max(float64(bw)/float64(w), float64(bh)/float64(h)); float64(w)*s*float64(h)*s > 64*float64(bw*bh) {
		return 0, 0, fmt.Errorf("--video %s: %d×%d frames are too far from the %d×%d bucket's aspect ratio to crop", path, w, h, bw, bh)
	}
	return bh, bw, nil
}
