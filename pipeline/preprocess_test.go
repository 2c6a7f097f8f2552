package pipeline

import (
	"testing"

	"github.com/framepack-go/framepack/backend/cpu"
	"github.com/framepack-go/framepack/internal/golden"
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
			if h, w := NearestBucket(b[0], b[1]); h != b[2] || w != b[3] {
				t.Errorf("bucket for %d×%d: %d×%d, want %d×%d", b[0], b[1], h, w, b[2], b[3])
			}
		}

		img := rgbOf(c.Tensor("image"))
		bh, bw := NearestBucket(img.H, img.W)
		crop, err := ResizeAndCenterCrop(img, bw, bh)
		if err != nil {
			t.Fatal(err)
		}
		c.Compare(t, "crop", rgbTensor(crop))

		px, err := SigLIPPixels(rgbOf(c.Tensor("crop")))
		if err != nil {
			t.Fatal(err)
		}
		c.Compare(t, "pixel_values", px)

		s := tensor.NewScope(cpu.New())
		var prev, app *tensor.Tensor
		if err := tensor.Catch(func() {
			prev = tensor.ToHost(PreviewLatents(s, c.Tensor("latents")))
			app = tensor.ToHost(SoftAppend(s, c.Tensor("append_a"), c.Tensor("append_b"), 3))
		}); err != nil {
			t.Fatal(err)
		}
		c.Compare(t, "preview", prev)
		c.Compare(t, "appended", app)
		s.Close()
	}
}
