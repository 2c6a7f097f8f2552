package section

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDecodePNG(t *testing.T) {
	src := image.NewNRGBA(image.Rect(0, 0, 5, 3))
	for y := 0; y < 3; y++ {
		for x := 0; x < 5; x++ {
			src.SetNRGBA(x, y, color.NRGBA{uint8(10 * x), uint8(50 * y), uint8(x + y), uint8(40 * x)})
		}
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, src); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "a.png")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	im, err := LoadImage(path)
	if err != nil {
		t.Fatal(err)
	}
	if im.W != 5 || im.H != 3 {
		t.Fatalf("%d×%d", im.W, im.H)
	}
	for y := 0; y < 3; y++ {
		for x := 0; x < 5; x++ {
			p := im.Pix[3*(y*5+x):]
			if p[0] != uint8(10*x) || p[1] != uint8(50*y) || p[2] != uint8(x+y) {
				t.Fatalf("pixel (%d,%d) = %v (alpha must be dropped, colour kept)", x, y, p[:3])
			}
		}
	}
}

// pngHeader is a PNG signature and IHDR chunk claiming w×h pixels.
func pngHeader(w, h uint32) []byte {
	var b bytes.Buffer
	b.WriteString("\x89PNG\r\n\x1a\n")
	ihdr := make([]byte, 13)
	binary.BigEndian.PutUint32(ihdr[0:], w)
	binary.BigEndian.PutUint32(ihdr[4:], h)
	ihdr[8], ihdr[9] = 8, 2 // 8-bit RGB
	binary.Write(&b, binary.BigEndian, uint32(13))
	chunk := append([]byte("IHDR"), ihdr...)
	b.Write(chunk)
	binary.Write(&b, binary.BigEndian, crc32.ChecksumIEEE(chunk))
	return b.Bytes()
}

func TestDecodeImageErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		data []byte
		want string
	}{
		{"garbage", []byte("this is not an image at all"), "not a PNG, JPEG or WebP"},
		{"empty", nil, "not a PNG, JPEG or WebP"},
		{"huge", pngHeader(100000, 100000), "too large"},
		{"truncated", pngHeader(64, 64), "decoding the png image"},
	} {
		_, err := DecodeImage(bytes.NewReader(c.data))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one mentioning %q", c.name, err, c.want)
		}
	}
	if _, err := LoadImage(filepath.Join(t.TempDir(), "missing.png")); err == nil || !strings.Contains(err.Error(), "missing.png") {
		t.Errorf("missing file: %v", err)
	}
}

// TestImageSize: the size from the header alone, with LoadImage's checks
// of it.
func TestImageSize(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// The header of a 640×360 PNG without its pixels: the size is read, the
	// pixels are not.
	if w, h, err := ImageSize(write("header.png", pngHeader(640, 360))); err != nil || w != 640 || h != 360 {
		t.Errorf("ImageSize = %d×%d, %v; want 640×360", w, h, err)
	}
	for name, c := range map[string]struct {
		data []byte
		want string
	}{
		"garbage.png": {[]byte("this is not an image at all"), "not a PNG, JPEG or WebP"},
		"huge.png":    {pngHeader(100000, 100000), "too large"},
	} {
		if _, _, err := ImageSize(write(name, c.data)); err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v, want an error naming the file and %q", name, err, c.want)
		}
	}
	if _, _, err := ImageSize(filepath.Join(dir, "missing.png")); err == nil || !strings.Contains(err.Error(), "missing.png") {
		t.Errorf("missing file: %v", err)
	}
}

func gradient(w, h int) *RGB {
	im := NewRGB(w, h)
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			p := im.Pix[3*(y*w+x):]
			p[0] = uint8((x * 255) / max(w-1, 1))
			p[1] = uint8((y * 255) / max(h-1, 1))
			p[2] = uint8((x*7 + y*13) % 256)
		}
	}
	return im
}

// The fixed-point resampler stays within one level of the same filter
// evaluated in float64 (separably, with a rounding to bytes between the
// passes, as Pillow does), and a flat image stays flat.
func TestResizeAgainstFloat(t *testing.T) {
	im := gradient(37, 23)
	for _, f := range []Filter{Lanczos, Bicubic, TorchBicubic} {
		for _, size := range [][2]int{{19, 11}, {80, 50}, {37, 9}, {5, 23}} {
			got, err := Resize(im, size[0], size[1], f)
			if err != nil {
				t.Fatal(err)
			}
			want := floatResize(im, size[0], size[1], f)
			for i := range want {
				if d := math.Abs(float64(got.Pix[i]) - want[i]); d > 1 {
					t.Fatalf("filter %d to %v: byte %d = %d, float %v", f, size, i, got.Pix[i], want[i])
				}
			}
		}
	}
	flat := NewRGB(31, 17)
	for i := range flat.Pix {
		flat.Pix[i] = 77
	}
	for _, f := range []Filter{Lanczos, Bicubic, TorchBicubic} {
		r, _ := Resize(flat, 12, 40, f)
		for _, v := range r.Pix {
			if v != 77 {
				t.Fatalf("filter %d: flat image became %d", f, v)
			}
		}
	}
	same, _ := Resize(im, im.W, im.H, Lanczos)
	if !bytes.Equal(same.Pix, im.Pix) || &same.Pix[0] == &im.Pix[0] {
		t.Error("same-size resize must be a copy")
	}
	if _, err := Resize(im, 0, 4, Lanczos); err == nil {
		t.Error("zero width accepted")
	}
}

// floatResize is the separable filter in float64 (weights normalised per
// output, like Pillow), rounding to bytes after each pass.
func floatResize(im *RGB, w, h int, f Filter) []float64 {
	axis := func(in, out int) [][]float64 {
		scale := float64(in) / float64(out)
		fs := math.Max(scale, 1)
		sup := f.support() * fs
		ws := make([][]float64, out)
		for o := 0; o < out; o++ {
			c := (float64(o) + 0.5) * scale
			row := make([]float64, in)
			sum := 0.0
			for x := 0; x < in; x++ {
				if d := float64(x) + 0.5 - c; math.Abs(d) < sup+0.5 {
					row[x] = f.eval(d / fs)
					sum += row[x]
				}
			}
			for x := range row {
				row[x] /= sum
			}
			ws[o] = row
		}
		return ws
	}
	round8 := func(v float64) float64 { return math.Min(math.Max(math.Floor(v+0.5), 0), 255) }
	tmp := make([]float64, 3*w*im.H)
	if w != im.W {
		wx := axis(im.W, w)
		for y := 0; y < im.H; y++ {
			for o := 0; o < w; o++ {
				for c := 0; c < 3; c++ {
					s := 0.0
					for x, k := range wx[o] {
						s += k * float64(im.Pix[3*(y*im.W+x)+c])
					}
					tmp[3*(y*w+o)+c] = round8(s)
				}
			}
		}
	} else {
		for i, v := range im.Pix {
			tmp[i] = float64(v)
		}
	}
	if h == im.H {
		return tmp
	}
	out := make([]float64, 3*w*h)
	wy := axis(im.H, h)
	for o := 0; o < h; o++ {
		for x := 0; x < w*3; x++ {
			s := 0.0
			for y, k := range wy[o] {
				s += k * tmp[y*w*3+x]
			}
			out[o*w*3+x] = round8(s)
		}
	}
	return out
}

func TestResizeAndCenterCrop(t *testing.T) {
	im := gradient(517, 300)
	out, err := ResizeAndCenterCrop(im, 832, 480)
	if err != nil {
		t.Fatal(err)
	}
	if out.W != 832 || out.H != 480 {
		t.Fatalf("%d×%d", out.W, out.H)
	}
	if same, _ := ResizeAndCenterCrop(out, 832, 480); same != out {
		t.Error("an image of the target size must be returned as is")
	}
	if _, err := ResizeAndCenterCrop(&RGB{}, 832, 480); err == nil {
		t.Error("empty image accepted")
	}
}
