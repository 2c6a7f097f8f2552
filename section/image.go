package section

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"image"
	"image/color"
	_ "image/jpeg" // registered decoders
	_ "image/png"
	"io"
	"os"

	_ "golang.org/x/image/webp"
)

// RGB is an 8-bit RGB image, rows top to bottom, pixels interleaved: the
// H×W×3 uint8 array FramePack works on.
type RGB struct {
	W, H int
	Pix  []uint8 // len 3·W·H
}

// NewRGB allocates a black w×h image.
func NewRGB(w, h int) *RGB { return &RGB{W: w, H: h, Pix: make([]uint8, 3*w*h)} }

// Clone copies the image.
func (im *RGB) Clone() *RGB {
	return &RGB{W: im.W, H: im.H, Pix: append([]uint8(nil), im.Pix...)}
}

// Crop copies the rectangle [x0, x1) × [y0, y1); parts outside the image
// are black, as in Pillow.
func (im *RGB) Crop(x0, y0, x1, y1 int) *RGB {
	out := NewRGB(max(x1-x0, 0), max(y1-y0, 0))
	for y := 0; y < out.H; y++ {
		sy := y0 + y
		if sy < 0 || sy >= im.H {
			continue
		}
		for x := 0; x < out.W; x++ {
			sx := x0 + x
			if sx < 0 || sx >= im.W {
				continue
			}
			copy(out.Pix[3*(y*out.W+x):3*(y*out.W+x)+3], im.Pix[3*(sy*im.W+sx):])
		}
	}
	return out
}

// Limits of LoadImage and DecodeImage: Pillow warns at about 89 megapixels,
// and anything larger than these is a mistake or an attack on memory.
const (
	MaxImagePixels = 1 << 27 // 134 megapixels
	MaxImageBytes  = 1 << 30
)

// LoadImage reads a PNG, JPEG or WebP file as RGB.
func LoadImage(path string) (*RGB, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", path, err)
	}
	defer f.Close()
	im, err := DecodeImage(f)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", path, err)
	}
	return im, nil
}

// DecodeImage decodes a PNG, JPEG or WebP stream as RGB, checking its
// dimensions before decoding the pixels. Alpha is dropped (the colour as
// stored, as Pillow's convert("RGB") does); grayscale and paletted images are
// expanded. PNG gives the same bytes as Pillow; JPEG decoders may differ by
// a level here and there.
func DecodeImage(r io.Reader) (*RGB, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxImageBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxImageBytes {
		return nil, fmt.Errorf("file larger than %d MB", MaxImageBytes>>20)
	}
	_, _, format, err := decodeHeader(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	src, _, err := image.Decode(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("decoding the %s image: %w", format, err)
	}
	return FromImage(src), nil
}

// decodeHeader reads an image's header and checks its size against
// MaxImagePixels.
func decodeHeader(r io.Reader) (w, h int, format string, err error) {
	cfg, format, err := image.DecodeConfig(r)
	if err != nil {
		if errors.Is(err, image.ErrFormat) {
			return 0, 0, "", fmt.Errorf("not a PNG, JPEG or WebP image")
		}
		return 0, 0, "", fmt.Errorf("reading the image header: %w", err)
	}
	if cfg.Width <= 0 || cfg.Height <= 0 {
		return 0, 0, "", fmt.Errorf("%s image has no pixels (%d×%d)", format, cfg.Width, cfg.Height)
	}
	if int64(cfg.Width)*int64(cfg.Height) > MaxImagePixels {
		return 0, 0, "", fmt.Errorf("%s image of %d×%d pixels is too large (limit %d megapixels)", format, cfg.Width, cfg.Height, MaxImagePixels/1000000)
	}
	return cfg.Width, cfg.Height, format, nil
}

// ImageSize reads an image file's header only, with LoadImage's checks of
// it, and returns the image's size: a batch checks its images so and
// decodes each when it is needed.
func ImageSize(path string) (w, h int, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, fmt.Errorf("image %s: %w", path, err)
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > MaxImageBytes {
		return 0, 0, fmt.Errorf("image %s: file larger than %d MB", path, MaxImageBytes>>20)
	}
	w, h, _, err = decodeHeader(bufio.NewReader(f))
	if err != nil {
		return 0, 0, fmt.Errorf("image %s: %w", path, err)
	}
	return w, h, nil
}

// FromImage converts any image.Image to RGB (alpha dropped).
func FromImage(src image.Image) *RGB {
	b := src.Bounds()
	out := NewRGB(b.Dx(), b.Dy())
	i := 0
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			c := color.NRGBAModel.Convert(src.At(x, y)).(color.NRGBA)
			out.Pix[i], out.Pix[i+1], out.Pix[i+2] = c.R, c.G, c.B
			i += 3
		}
	}
	return out
}
