package gpu

import (
	"testing"

	"github.com/framepack-go/framepack/convchain"
	"github.com/framepack-go/framepack/internal/testutil/golden"
	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/vae"
	"github.com/framepack-go/framepack/vae/wan"
)

// TestGoldenConv2d runs the golden cases of both VAEs on the GPU with the
// conv2d tier alone (every 3-D convolution as the library's 2-D ones), in
// NHWC and NCHW: HunyuanVideo's decodes (frame-wise and tiled) and encodes
// in f32 at the cases' tolerance and its decodes in f16, Wan 2.1's decodes
// in f32 and f16 (Wan's channels-last convolutions in place in NHWC, on
// channels-first copies in NCHW). golden logs "conv3d as conv2d: …" for
// each comparison.
func TestGoldenConv2d(t *testing.T) {
	g := newGPU(t, Options{Log: quiet})
	for _, l := range []Layout{LayoutNDHWC, LayoutNCDHW} {
		t.Run(string(l), func(t *testing.T) {
			be := wrapped(t, g, ConvOptions{Order: []string{convchain.Conv2dTierName}, Layout: l})
			run := func(t *testing.T, f func(s *tensor.Scope)) {
				t.Helper()
				s := tensor.NewScope(be)
				defer s.Close()
				if err := tensor.Catch(func() { f(s) }); err != nil {
					t.Fatal(err)
				}
			}
			decodes := append(golden.Cases(t, "vae.decode"), golden.Cases(t, "vae.decode_tiled")...)
			for _, c := range decodes {
				for _, dt := range []tensor.DType{tensor.F32, tensor.F16} {
					t.Run("hunyuan/"+c.Name+"/"+dt.String(), func(t *testing.T) {
						v, err := vae.Load(c.ModelDir, be, vae.Options{DType: dt})
						if err != nil {
							t.Fatal(err)
						}
						defer v.Close()
						opts := vae.DefaultDecode()
						if c.Component == "vae.decode_tiled" {
							opts = vae.DecodeOptions{Tiling: caseTiling(c)}
						}
						run(t, func(s *tensor.Scope) {
							out := v.Decode(s, c.Tensor("z"), opts)
							if dt == tensor.F32 {
								c.Compare(t, "sample", out)
							} else {
								c.CompareWith(t, "sample", out, golden.Limit{RelL2: 5e-3, HasRelL2: true})
							}
						})
					})
				}
			}
			for _, c := range golden.Cases(t, "vae.encode") {
				t.Run("hunyuan/"+c.Name, func(t *testing.T) {
					v, err := vae.Load(c.ModelDir, be, vae.Options{DType: tensor.F32})
					if err != nil {
						t.Fatal(err)
					}
					defer v.Close()
					run(t, func(s *tensor.Scope) {
						mean, logvar := v.Encode(s, c.Tensor("x"))
						c.Compare(t, "mean", mean)
						c.Compare(t, "logvar", logvar)
					})
				})
			}
			for _, c := range golden.Cases(t, "wan_vae.decode") {
				for _, tc := range []struct {
					dt  tensor.DType
					lim float64
				}{{tensor.F32, 1e-3}, {tensor.F16, 1e-2}} {
					t.Run("wan/"+c.Name+"/"+tc.dt.String(), func(t *testing.T) {
						v, err := wan.Load(c.ModelDir, be, wan.Options{DType: tc.dt})
						if err != nil {
							t.Fatal(err)
						}
						defer v.Close()
						run(t, func(s *tensor.Scope) {
							out := v.Decode(s, c.Tensor("z"), wan.DecodeOptions{})
							c.CompareWith(t, "sample", out, golden.Limit{RelL2: tc.lim, HasRelL2: true})
						})
					})
				}
			}
			s := be.Chain().Summary()
			if len(s) != 1 || s[0].Tier != convchain.Conv2dTierName || s[0].Convs == 0 {
				t.Errorf("the conv2d tier did not run alone: %v", s)
			}
			t.Log(s[0].String())
		})
	}
}
