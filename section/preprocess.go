package section

import (
	"fmt"
	"math"

	"github.com/framepack-go/framepack/tensor"
)

// Buckets640 are FramePack's (height, width) buckets for resolution 640, in
// its order (every side divisible by 32).
var Buckets640 = [][2]int{
	{416, 960}, {448, 864}, {480, 832}, {512, 768}, {544, 704}, {576, 672}, {608, 640},
	{640, 608}, {672, 576}, {704, 544}, {768, 512}, {832, 480}, {864, 448}, {960, 416},
}

// Resolution limits of Buckets: FramePack's 640 and smaller sizes for
// quick runs; above 1280 the transformer's sequence grows past what the
// model was trained on.
const (
	MinResolution = 64
	MaxResolution = 1280
)

// Buckets returns the (height, width) buckets of a resolution. 640 is
// FramePack's own list (bucket_tools.py has no other); any other resolution
// scales that list by resolution/640 and rounds each side to a multiple of
// 32 (at least 32), which keeps the property of the original buckets that
// both latent sides are multiples of 4.
func Buckets(resolution int) ([][2]int, error) {
	if resolution < MinResolution || resolution > MaxResolution {
		return nil, fmt.Errorf("resolution %d is outside %d–%d", resolution, MinResolution, MaxResolution)
	}
	if resolution == 640 {
		return Buckets640, nil
	}
	out := make([][2]int, len(Buckets640))
	for i, b := range Buckets640 {
		for j := range b {
			v := int(math.Round(float64(b[j]*resolution)/640/32)) * 32
			out[i][j] = max(v, 32)
		}
	}
	return out, nil
}

// NearestBucket is FramePack's find_nearest_bucket(h, w, resolution) over
// Buckets(resolution): the bucket minimising |h·bw − w·bh|, the later one
// on a tie. It returns (height, width).
func NearestBucket(h, w, resolution int) (bh, bw int, err error) {
	list, err := Buckets(resolution)
	if err != nil {
		return 0, 0, err
	}
	best := int64(math.MaxInt64)
	for _, b := range list {
		m := int64(h)*int64(b[1]) - int64(w)*int64(b[0])
		if m < 0 {
			m = -m
		}
		if m <= best {
			best, bh, bw = m, b[0], b[1]
		}
	}
	return bh, bw, nil
}

// ResizeAndCenterCrop is FramePack's resize_and_center_crop: scale the image
// to cover w×h with Pillow's LANCZOS (sizes rounded half to even, as Python's
// round), then crop the centre (box corners rounded the same way). An image
// already w×h is returned as is.
func ResizeAndCenterCrop(im *RGB, w, h int) (*RGB, error) {
	if w <= 0 || h <= 0 {
		return nil, fmt.Errorf("crop to %d×%d", w, h)
	}
	if im.W == w && im.H == h {
		return im, nil
	}
	if im.W <= 0 || im.H <= 0 {
		return nil, fmt.Errorf("empty image")
	}
	s := math.Max(float64(w)/float64(im.W), float64(h)/float64(im.H))
	rw := int(math.RoundToEven(float64(im.W) * s))
	rh := int(math.RoundToEven(float64(im.H) * s))
	r, err := Resize(im, rw, rh, Lanczos)
	if err != nil {
		return nil, err
	}
	left := math.RoundToEven(float64(rw-w) / 2)
	top := math.RoundToEven(float64(rh-h) / 2)
	right := math.RoundToEven(float64(rw+w) / 2)
	bottom := math.RoundToEven(float64(rh+h) / 2)
	return r.Crop(int(left), int(top), int(right), int(bottom)), nil
}

// CropToBucket is the start image as FramePack prepares it: resized and
// centre-cropped (ResizeAndCenterCrop) to its nearest bucket of resolution
// (NearestBucket).
func CropToBucket(im *RGB, resolution int) (*RGB, error) {
	bh, bw, err := NearestBucket(im.H, im.W, resolution)
	if err != nil {
		return nil, err
	}
	return ResizeAndCenterCrop(im, bw, bh)
}

// VAEPixels is the image as the VAE takes it: x/127.5 − 1, float32,
// shape (1, 3, 1, H, W).
func VAEPixels(im *RGB) *tensor.Tensor {
	n := im.W * im.H
	out := make([]float32, 3*n)
	for i := 0; i < n; i++ {
		for c := 0; c < 3; c++ {
			out[c*n+i] = float32(im.Pix[3*i+c])/127.5 - 1
		}
	}
	return tensor.FromFloat32(out, 1, 3, 1, im.H, im.W)
}

// SigLIPSize is the side of the SigLIP image encoder's input
// (flux_redux_bfl's feature_extractor and vision config).
const SigLIPSize = 384

// SigLIPPixels is SiglipImageProcessor as flux_redux_bfl configures it, at
// the encoder's image size (SigLIPSize for flux_redux_bfl) — bicubic resize
// to size×size (no aspect preservation), rescale by 1/255, normalise with
// mean 0.5 and std 0.5 — as current transformers runs it (the golden
// reference): torch's antialiased uint8 bicubic, then the rescale and
// normalisation fused into (x − 127.5)/127.5 in float32. (transformers 4.x
// resized with Pillow's BICUBIC instead; the two differ by one level on a
// few pixels in ten thousand.) Returns float32 (1, 3, size, size).
func SigLIPPixels(im *RGB, size int) (*tensor.Tensor, error) {
	if size <= 0 {
		return nil, fmt.Errorf("SigLIP image size %d", size)
	}
	r, err := Resize(im, size, size, TorchBicubic)
	if err != nil {
		return nil, err
	}
	n := size * size
	out := make([]float32, 3*n)
	for i := 0; i < n; i++ {
		for c := 0; c < 3; c++ {
			out[c*n+i] = (float32(r.Pix[3*i+c]) - 127.5) / 127.5
		}
	}
	return tensor.FromFloat32(out, 1, 3, size, size), nil
}
