// Package video turns decoded pixels into files: H.264 MP4 through ffmpeg,
// as FramePack writes them (libx264, CRF, yuv420p, 30 fps), or PNG frames
// in a folder when ffmpeg is not installed (.mov and .mkv paths get those
// containers). Outputs are written under a temporary name in the target
// folder and renamed when complete and checked — ffmpeg's error output,
// the container's structure, the frame count in its index — so a failed,
// interrupted or disk-full write never leaves a partial file.
package video

import (
	"fmt"
	"image"
	"runtime"
	"sync"

	"github.com/framepack-go/framepack/tensor"
)

// Frames are T RGB frames of H×W pixels, row-major, 3 bytes a pixel
// (layout (T, H, W, 3)).
type Frames struct {
	T, H, W int
	Pix     []uint8
}

// Frame returns frame t as an image sharing no memory with f.
func (f Frames) Frame(t int) *image.NRGBA {
	img := image.NewNRGBA(image.Rect(0, 0, f.W, f.H))
	src := f.Pix[t*f.H*f.W*3:]
	for i := 0; i < f.H*f.W; i++ {
		img.Pix[4*i], img.Pix[4*i+1], img.Pix[4*i+2], img.Pix[4*i+3] = src[3*i], src[3*i+1], src[3*i+2], 255
	}
	return img
}

func (f Frames) check() error {
	if f.T <= 0 || f.H <= 0 || f.W <= 0 {
		return fmt.Errorf("video: no frames to write (%d frames of %d×%d)", f.T, f.W, f.H)
	}
	if len(f.Pix) != f.T*f.H*f.W*3 {
		return fmt.Errorf("video: %d bytes for %d frames of %d×%d RGB", len(f.Pix), f.T, f.W, f.H)
	}
	return nil
}

// FromPixels converts decoded pixels (1, 3, T, H, W) in [−1, 1], any float
// dtype, to frames as FramePack's save_bcthw_as_mp4 does: clamp to
// [−1, 1] in f32, ·127.5 + 127.5, then truncation to uint8.
func FromPixels(px *tensor.Tensor) (Frames, error) {
	if px == nil || px.Rank() != 5 || px.Dim(0) != 1 || px.Dim(1) != 3 {
		var shape []int
		if px != nil {
			shape = px.Shape()
		}
		return Frames{}, fmt.Errorf("video: pixels %v: want (1, 3, T, H, W)", shape)
	}
	if !px.DType().IsFloat() {
		return Frames{}, fmt.Errorf("video: pixels are %s, want a float dtype", px.DType())
	}
	t, h, w := px.Dim(2), px.Dim(3), px.Dim(4)
	v := tensor.Float32s(px)
	f := Frames{T: t, H: h, W: w, Pix: make([]uint8, t*h*w*3)}
	plane, frame := t*h*w, h*w
	// Frames in parallel: a 5 s video is 166 million values.
	var wg sync.WaitGroup
	workers := min(runtime.GOMAXPROCS(0), max(t, 1))
	for wk := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lo, hi := wk*t/workers*frame, (wk+1)*t/workers*frame
			for c := 0; c < 3; c++ {
				src := v[c*plane : (c+1)*plane]
				for i := lo; i < hi; i++ { // i = (ti·h + y)·w + x
					f.Pix[3*i+c] = toUint8(src[i])
				}
			}
		}()
	}
	wg.Wait()
	return f, nil
}

// toUint8 is torch's clamp(x, −1, 1)·127.5 + 127.5 then .to(uint8): two
// f32 roundings (no fused multiply-add) and truncation toward zero.
func toUint8(x float32) uint8 {
	if x != x { // NaN: clamp keeps it and the cast is undefined; call it 0
		return 0
	}
	x = min(max(x, -1), 1)
	y := float32(x*127.5) + 127.5
	return uint8(y)
}
