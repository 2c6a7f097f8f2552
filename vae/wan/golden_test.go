package wan

import (
	"testing"

	"github.com/framepack-go/framepack/backend/cpu"
	"github.com/framepack-go/framepack/internal/testutil/golden"
	"github.com/framepack-go/framepack/internal/testutil/scopetest"
	"github.com/framepack-go/framepack/internal/testutil/testdevice"
	"github.com/framepack-go/framepack/tensor"
)

// The golden cases come from bench/reference/make_golden_wan_vae.py
// (diffusers' AutoencoderKLWan, float32 on the CPU). golden.Cases skips a
// test only when no case of its component is in testdata/golden.

func loadCase(t *testing.T, c *golden.Case, be tensor.Backend, dt tensor.DType) *VAE {
	t.Helper()
	return golden.Load(t, c, Load, be, Options{DType: dt})
}

func decode(t *testing.T, v *VAE, z *tensor.Tensor, opts DecodeOptions) *tensor.Tensor {
	t.Helper()
	return scopetest.Run(t, v.m.Be, func(s *tensor.Scope) *tensor.Tensor { return v.Decode(s, z, opts) })
}

func encode(t *testing.T, v *VAE, x *tensor.Tensor, til Tiling) (mean, logvar *tensor.Tensor) {
	t.Helper()
	out := scopetest.Run(t, v.m.Be, func(s *tensor.Scope) [2]*tensor.Tensor {
		m, lv := v.EncodeWith(s, x, til)
		return [2]*tensor.Tensor{m, lv}
	})
	return out[0], out[1]
}

// caseTiling is enable_tiling(**tiling) of a case.
func caseTiling(c *golden.Case) Tiling {
	p := c.Tiling()
	return Tiling{Spatial: true, TileHeight: p.TileHeight, TileWidth: p.TileWidth, TileStrideHeight: p.StrideHeight, TileStrideWidth: p.StrideWidth}
}

// tapModes are the ways a causal conv of a one-frame chunk runs: each
// decode and encode must match the reference whichever runs.
var tapModes = []struct {
	name string
	use  tapUse
}{{"taps_when_larger", tapsWhenLarger}, {"taps_always", tapsAlways}, {"taps_never", tapsNever}}

func TestGoldenWanDecode(t *testing.T) {
	golden.Run(t, "wan_vae.decode", func(t *testing.T, c *golden.Case) {
		v := loadCase(t, c, cpu.New(), tensor.F32)
		for _, m := range tapModes {
			t.Run(m.name, func(t *testing.T) {
				v.m.Dec.taps = m.use
				c.Compare(t, "sample", decode(t, v, c.Tensor("z"), DecodeOptions{}))
			})
		}
	})
}

func TestGoldenWanDecodeTiled(t *testing.T) {
	golden.Run(t, "wan_vae.decode_tiled", func(t *testing.T, c *golden.Case) {
		v := loadCase(t, c, cpu.New(), tensor.F32)
		z := c.Tensor("z")
		var st DecodeStats
		c.Compare(t, "sample", decode(t, v, z, DecodeOptions{Tiling: caseTiling(c), Stats: &st}))
		if st.Tiles < 2 {
			t.Errorf("%d tiles: the case should tile", st.Tiles)
		}
		c.CompareWith(t, "sample_untiled", decode(t, v, z, DecodeOptions{}), c.Tol.For("sample"))
	})
}

func TestGoldenWanEncode(t *testing.T) {
	golden.Run(t, "wan_vae.encode", func(t *testing.T, c *golden.Case) {
		v := loadCase(t, c, cpu.New(), tensor.F32)
		for _, m := range tapModes {
			t.Run(m.name, func(t *testing.T) {
				v.m.Enc.taps = m.use
				mean, logvar := encode(t, v, c.Tensor("x"), Tiling{})
				c.Compare(t, "mean", mean)
				c.Compare(t, "logvar", logvar)
			})
		}
	})
}

func TestGoldenWanEncodeTiled(t *testing.T) {
	golden.Run(t, "wan_vae.encode_tiled", func(t *testing.T, c *golden.Case) {
		v := loadCase(t, c, cpu.New(), tensor.F32)
		mean, logvar := encode(t, v, c.Tensor("x"), caseTiling(c))
		c.Compare(t, "mean", mean)
		c.Compare(t, "logvar", logvar)
	})
}

// TestGoldenWanDecodeDevice runs the golden decodes on FRAMEPACK_TEST_DEVICE
// (the GPU on the device machine): the same ops, f32 and f16.
func TestGoldenWanDecodeDevice(t *testing.T) {
	golden.Run(t, "wan_vae.decode", func(t *testing.T, c *golden.Case) {
		be := testdevice.Backend(t)
		for _, tc := range []struct {
			dt  tensor.DType
			lim float64
		}{{tensor.F32, 1e-3}, {tensor.F16, 1e-2}} {
			v := loadCase(t, c, be, tc.dt)
			for _, m := range tapModes {
				v.m.Dec.taps = m.use
				c.CompareWith(t, "sample", decode(t, v, c.Tensor("z"), DecodeOptions{}), golden.Limit{RelL2: tc.lim, HasRelL2: true})
			}
		}
	})
}

// TestGoldenWanDecodeThroughChain decodes behind the conv3d chain and a
// budget, so every channels-last convolution goes through the chain's
// Conv3dLast as on a GPU (here on channels-first copies: the CPU tier is
// not channels-last); the result is the same.
func TestGoldenWanDecodeThroughChain(t *testing.T) {
	golden.Run(t, "wan_vae.decode", func(t *testing.T, c *golden.Case) {
		be, ch := testdevice.Chained(t)
		v := loadCase(t, c, be, tensor.F32)
		if _, ok := tensor.As[tensor.ChannelsLastConv](be); !ok {
			t.Fatal("no Conv3dLast under the budget")
		}
		if !v.m.Dec.convIn.packed || !v.m.Dec.blocks[0].resnets[0].conv1.packed {
			t.Fatal("the weights are not packed channels-last on a backend that convolves channels-last tensors")
		}
		if d := v.m.Dec; d.convOut.kept == nil || d.convOut.w != nil || d.blocks[d.tailFrom].resnets[0].conv2.kept == nil {
			t.Fatal("the tail's convolutions do not keep their taps in place of their weights")
		}
		// Each tap mode: by the kept taps, and by weights made from them.
		for _, m := range tapModes {
			t.Run(m.name, func(t *testing.T) {
				v.m.Dec.taps = m.use
				c.Compare(t, "sample", decode(t, v, c.Tensor("z"), DecodeOptions{}))
			})
		}
		if n := ch.Summary()[0].Convs; n == 0 {
			t.Error("no convolution went through the chain")
		}
	})
}
