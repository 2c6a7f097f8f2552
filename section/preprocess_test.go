package section

import (
	"reflect"
	"testing"

	"github.com/framepack-go/framepack/internal/testutil/golden"
	"github.com/framepack-go/framepack/internal/testutil/testdevice"
	"github.com/framepack-go/framepack/tensor"
)

// rgbOf reads an H×W×3 uint8 golden tensor as an image.
func rgbOf(t *tensor.Tensor) *RGB {
	return &RGB{W: t.Dim(1), H: t.Dim(0), Pix: append([]uint8(nil), t.Uint8s()...)}
}

func rgbTensor(im *RGB) *tensor.Tensor {
	out := tensor.New(tensor.U8, im.H, im.W, 3)
	copy(out.Uint8s(), im.Pix)
	return out
}

func TestGoldenPreprocess(t *testing.T) {
	for _, c := range golden.Cases(t, "preprocess") {
		var buckets [][4]int
		c.Param("buckets", &buckets)
		for _, b := range buckets {
			if h, w, err := NearestBucket(b[0], b[1], 640); err != nil || h != b[2] || w != b[3] {
				t.Errorf("bucket for %d×%d: %d×%d (%v), want %d×%d", b[0], b[1], h, w, err, b[2], b[3])
			}
		}

		img := rgbOf(c.Tensor("image"))
		bh, bw, err := NearestBucket(img.H, img.W, 640)
		if err != nil {
			t.Fatal(err)
		}
		crop, err := ResizeAndCenterCrop(img, bw, bh)
		if err != nil {
			t.Fatal(err)
		}
		c.Compare(t, "crop", rgbTensor(crop))

		px, err := SigLIPPixels(rgbOf(c.Tensor("crop")), SigLIPSize)
		if err != nil {
			t.Fatal(err)
		}
		c.Compare(t, "pixel_values", px)

		s := tensor.NewScope(testdevice.Backend(t))
		var prev, app *tensor.Tensor
		if err := tensor.Catch(func() {
			prev = tensor.ToHost(PreviewLatents(s, s.To(c.Tensor("latents"))))
			app = tensor.ToHost(SoftAppend(s, s.To(c.Tensor("append_a")), s.To(c.Tensor("append_b")), 3))
		}); err != nil {
			t.Fatal(err)
		}
		c.Compare(t, "preview", prev)
		c.Compare(t, "appended", app)
		s.Close()
	}
}

func TestBuckets(t *testing.T) {
	if b, err := Buckets(640); err != nil || !reflect.DeepEqual(b, Buckets640) {
		t.Fatalf("Buckets(640) = %v, %v", b, err)
	}
	for _, res := range []int{64, 128, 256, 320, 960, 1280} {
		list, err := Buckets(res)
		if err != nil {
			t.Fatal(err)
		}
		for i, b := range list {
			if b[0]%32 != 0 || b[1]%32 != 0 || b[0] < 32 || b[1] < 32 {
				t.Errorf("resolution %d bucket %d: %v", res, i, b)
			}
			// Within rounding of the scaled 640 bucket.
			for k := range b {
				if d := float64(b[k]) - float64(Buckets640[i][k]*res)/640; d > 16 || d < -16 && b[k] > 32 {
					t.Errorf("resolution %d bucket %v is far from the scaled %v", res, b, Buckets640[i])
				}
			}
		}
	}
	// Portrait and landscape images land on portrait and landscape buckets.
	if h, w, _ := NearestBucket(192, 256, 128); h >= w {
		t.Errorf("a 256×192 image at 128: bucket %d×%d", w, h)
	}
	if h, w, _ := NearestBucket(256, 192, 128); h <= w {
		t.Errorf("a 192×256 image at 128: bucket %d×%d", w, h)
	}
	for _, res := range []int{0, 63, 1281, -640} {
		if _, err := Buckets(res); err == nil {
			t.Errorf("resolution %d accepted", res)
		}
		if _, _, err := NearestBucket(480, 640, res); err == nil {
			t.Errorf("NearestBucket at resolution %d accepted", res)
		}
	}
}

// SigLIPPixels at another size resizes to it and normalises the same way,
// channels first.
func TestSigLIPPixelsSize(t *testing.T) {
	rgb := [3]uint8{10, 128, 250}
	im := &RGB{W: 5, H: 3, Pix: make([]uint8, 5*3*3)}
	for i := range im.Pix {
		im.Pix[i] = rgb[i%3]
	}
	px, err := SigLIPPixels(im, 28)
	if err != nil {
		t.Fatal(err)
	}
	if s := px.Shape(); !reflect.DeepEqual(s, []int{1, 3, 28, 28}) {
		t.Fatalf("shape %v", s)
	}
	for i, v := range px.Float32s() {
		c := i / (28 * 28)
		if want := (float32(rgb[c]) - 127.5) / 127.5; v != want {
			t.Fatalf("value %d (channel %d) of a flat image is %v, want %v", i, c, v, want)
		}
	}
	if _, err := SigLIPPixels(im, 0); err == nil {
		t.Error("size 0 accepted")
	}
}
