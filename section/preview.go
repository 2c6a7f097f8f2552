package section

import (
	"fmt"

	"github.com/framepack-go/framepack/tensor"
)

// previewFactors map the 16 latent channels to RGB (FramePack's
// vae_decode_fake, factors from ComfyUI): row c is channel c's (R, G, B).
var previewFactors = [16][3]float32{
	{-0.0395, -0.0331, 0.0445},
	{0.0696, 0.0795, 0.0518},
	{0.0135, -0.0945, -0.0282},
	{0.0108, -0.0250, -0.0765},
	{-0.0209, 0.0032, 0.0224},
	{-0.0804, -0.0254, -0.0639},
	{-0.0991, 0.0271, -0.0669},
	{-0.0646, -0.0422, -0.0400},
	{-0.0696, -0.0595, -0.0894},
	{-0.0799, -0.0208, -0.0375},
	{0.1166, 0.1627, 0.0962},
	{0.1165, 0.0432, 0.0407},
	{-0.2315, -0.1920, -0.1355},
	{-0.0270, 0.0401, -0.0821},
	{-0.0616, -0.0997, -0.0727},
	{0.0249, -0.0469, -0.1703},
}

var previewBias = [3]float32{0.0259, -0.0192, -0.0761}

// PreviewLatents is FramePack's vae_decode_fake: a 1×1×1 convolution of the
// latents (B, 16, T, h, w) to RGB in [0, 1], (B, 3, T, h, w), in the
// latents' dtype on the scope's backend.
func PreviewLatents(s *tensor.Scope, x *tensor.Tensor) *tensor.Tensor {
	if x.Rank() != 5 || x.Dim(1) != 16 {
		tensor.Fail("preview", "latents %v: want (B, 16, T, h, w)", x.Shape())
	}
	w := make([]float32, 3*16)
	for c := range previewFactors {
		for o := 0; o < 3; o++ {
			w[o*16+c] = previewFactors[c][o]
		}
	}
	wt := s.Cast(s.To(tensor.FromFloat32(w, 3, 16, 1, 1, 1)), x.DType())
	bt := s.Cast(s.To(tensor.FromFloat32(previewBias[:], 3)), x.DType())
	return s.Clamp(s.Conv3d(x, wt, bt, [3]int{1, 1, 1}, [3]int{}), 0, 1)
}

// PreviewImage lays a preview (B, 3, T, h, w) in [0, 1] out as one RGB
// image: batch down, frames across ((b h) (t w) c), each value ×255 and
// truncated to a byte as FramePack's callback does.
func PreviewImage(p *tensor.Tensor) (*RGB, error) {
	if p.Rank() != 5 || p.Dim(1) != 3 {
		return nil, fmt.Errorf("preview %v: want (B, 3, T, h, w)", p.Shape())
	}
	b, t, h, w := p.Dim(0), p.Dim(2), p.Dim(3), p.Dim(4)
	v := tensor.Float32s(p)
	out := NewRGB(t*w, b*h)
	for bi := 0; bi < b; bi++ {
		for c := 0; c < 3; c++ {
			for ti := 0; ti < t; ti++ {
				for y := 0; y < h; y++ {
					src := v[(((bi*3+c)*t+ti)*h+y)*w:]
					for x := 0; x < w; x++ {
						f := src[x] * 255
						f = min(max(f, 0), 255)
						out.Pix[3*((bi*h+y)*out.W+ti*w+x)+c] = uint8(f)
					}
				}
			}
		}
	}
	return out, nil
}
