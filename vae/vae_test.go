package vae

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/framepack-go/framepack/backend/cpu"
	"github.com/framepack-go/framepack/internal/testmode"
	"github.com/framepack-go/framepack/internal/testutil/golden"
	"github.com/framepack-go/framepack/internal/testutil/scopetest"
	"github.com/framepack-go/framepack/internal/testutil/testdevice"
	"github.com/framepack-go/framepack/tensor"
)

// loadCase loads the case's model on be in dt.
func loadCase(t *testing.T, c *golden.Case, be tensor.Backend, dt tensor.DType) *VAE {
	t.Helper()
	return golden.Load(t, c, Load, be, Options{DType: dt})
}

func decode(t *testing.T, v *VAE, z *tensor.Tensor, opts DecodeOptions) *tensor.Tensor {
	t.Helper()
	return scopetest.Run(t, v.Backend(), func(s *tensor.Scope) *tensor.Tensor { return v.Decode(s, z, opts) })
}

// caseTiling is enable_tiling(**tiling) of a case.
func caseTiling(c *golden.Case) Tiling {
	p := c.Tiling()
	return Tiling{Framewise: true, Spatial: true, TileHeight: p.TileHeight, TileWidth: p.TileWidth,
		TileStrideHeight: p.StrideHeight, TileStrideWidth: p.StrideWidth}.normalized()
}

func TestGoldenDecode(t *testing.T) {
	golden.Run(t, "vae.decode", func(t *testing.T, c *golden.Case) {
		v := loadCase(t, c, testdevice.Backend(t), tensor.F32)
		c.Compare(t, "sample", decode(t, v, c.Tensor("z"), DefaultDecode()))
	})
}

func TestGoldenDecodeTiled(t *testing.T) {
	golden.Run(t, "vae.decode_tiled", func(t *testing.T, c *golden.Case) {
		v := loadCase(t, c, testdevice.Backend(t), tensor.F32)
		z := c.Tensor("z")
		var st DecodeStats
		c.Compare(t, "sample", decode(t, v, z, DecodeOptions{Tiling: caseTiling(c), Stats: &st}))
		if st.Tiles < 2 {
			t.Errorf("tiled decode ran %d tiles", st.Tiles)
		}
		c.Compare(t, "sample_untiled", decode(t, v, z, DefaultDecode()))
	})
}

func TestGoldenEncode(t *testing.T) {
	golden.Run(t, "vae.encode", func(t *testing.T, c *golden.Case) {
		v := loadCase(t, c, testdevice.Backend(t), tensor.F32)
		s := tensor.NewScope(v.Backend())
		defer s.Close()
		var mean, logvar *tensor.Tensor
		if err := tensor.Catch(func() { mean, logvar = v.Encode(s, c.Tensor("x")) }); err != nil {
			t.Fatal(err)
		}
		c.Compare(t, "mean", mean)
		c.Compare(t, "logvar", logvar)
	})
}

// TestGoldenDecodeHalf runs the golden decodes in f16 and bf16 (weights
// converted at load) against the f32 reference, within a loose bound.
func TestGoldenDecodeHalf(t *testing.T) {
	for _, c := range golden.Cases(t, "vae.decode") {
		for _, tc := range []struct {
			dt  tensor.DType
			lim float64
		}{{tensor.F16, 5e-3}, {tensor.BF16, 3e-2}} {
			if tc.dt == tensor.BF16 && c.Name == "vae_decode_b" {
				continue // f16 covers the frame-wise path; keep the test short
			}
			t.Run(c.Name+"/"+tc.dt.String(), func(t *testing.T) {
				v := loadCase(t, c, testdevice.Backend(t), tc.dt)
				out := decode(t, v, c.Tensor("z"), DefaultDecode())
				c.CompareWith(t, "sample", out, golden.Limit{RelL2: tc.lim, HasRelL2: true})
			})
		}
	}
}

func TestGoldenEncodeHalf(t *testing.T) {
	for _, c := range golden.Cases(t, "vae.encode") {
		if c.Name != "vae_encode_image" {
			continue
		}
		for _, tc := range []struct {
			dt  tensor.DType
			lim float64
		}{{tensor.F16, 5e-3}, {tensor.BF16, 3e-2}} {
			t.Run(c.Name+"/"+tc.dt.String(), func(t *testing.T) {
				v := loadCase(t, c, testdevice.Backend(t), tc.dt)
				s := tensor.NewScope(v.Backend())
				defer s.Close()
				var mean *tensor.Tensor
				if err := tensor.Catch(func() { mean, _ = v.Encode(s, c.Tensor("x")) }); err != nil {
					t.Fatal(err)
				}
				c.CompareWith(t, "mean", mean, golden.Limit{RelL2: tc.lim, HasRelL2: true})
			})
		}
	}
}

// TestRealConfig builds the released configuration with random weights and
// runs a tiny decode and encode: shapes and finiteness only. It runs in the
// full suite (testmode): TestReleasedConfigVAE counts the released
// parameters from their plan, and TestDecodePeakModel checks the peak model
// on smallConfig, which has every code path of the released one.
func TestRealConfig(t *testing.T) {
	if testing.Short() {
		t.Skip("builds 246M random parameters")
	}
	if !testmode.Full() {
		t.Skipf("%s=1 runs it: TestReleasedConfigVAE and TestDecodePeakModel cover its paths", testmode.Env)
	}
	cfg := DefaultConfig()
	m := meter()
	v := randomVAE(t, cfg, m, tensor.BF16, 1)
	var n int64
	for _, w := range v.m.Weights.Held() {
		n += int64(w.Numel())
	}
	if n != 246478803 || v.WeightBytes() != 2*n || m.Stats().InUse != 2*n {
		t.Errorf("%d parameters in %d B (%d B allocated), want 246,478,803 in bf16", n, v.WeightBytes(), m.Stats().InUse)
	}
	shape := []int{1, 16, 2, 4, 4}
	m.ResetPeak()
	out := decode(t, v, randLatents(1, shape...), DefaultDecode())
	checkFinite(t, out, 1, 3, 5, 32, 32)
	measured, planned := m.Stats().Peak-2*n, DecodePeak(cfg, shape, DefaultTiling(), tensor.BF16)
	t.Logf("released config, bf16 %v: planned %d B, measured %d B", shape, planned, measured)
	if measured > planned || planned-measured > int64(6*tensor.Numel(shape)) {
		t.Errorf("peak model: planned %d, measured %d", planned, measured)
	}

	s := tensor.NewScope(v.Backend())
	defer s.Close()
	var mean, logvar *tensor.Tensor
	x := randLatents(2, 1, 3, 1, 16, 16)
	if err := tensor.Catch(func() { mean, logvar = v.Encode(s, x) }); err != nil {
		t.Fatal(err)
	}
	checkFinite(t, mean, 1, 16, 1, 2, 2)
	checkFinite(t, logvar, 1, 16, 1, 2, 2)
}

func checkFinite(t *testing.T, x *tensor.Tensor, shape ...int) {
	t.Helper()
	if !slices.Equal(x.Shape(), shape) {
		t.Fatalf("shape %v, want %v", x.Shape(), shape)
	}
	for i, f := range tensor.Float32s(x) {
		if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
			t.Fatalf("element %d is %v", i, f)
		}
	}
}

func TestDecodeBadInput(t *testing.T) {
	v := randomVAE(t, smallConfig(), cpu.New(), tensor.F32, 1)
	s := tensor.NewScope(v.Backend())
	defer s.Close()
	for _, tc := range []struct {
		z    *tensor.Tensor
		opts DecodeOptions
		want string
	}{
		{randLatents(1, 1, 8, 2, 4, 4), DefaultDecode(), "want (B, 16, T, h, w)"},
		{randLatents(1, 16, 2, 4, 4), DefaultDecode(), "want (B, 16, T, h, w)"},
		{randLatents(1, 1, 16, 2, 4, 4), DecodeOptions{Tiling: SpatialTiling(32, 20)}, "multiples of 8"},
		{randLatents(1, 1, 16, 2, 4, 4), DecodeOptions{Tiling: SpatialTiling(32, 32)}, "stride < tile"},
		{randLatents(1, 1, 16, 2, 4, 4), DecodeOptions{Tiling: Tiling{Framewise: true, TileFrames: 10}}, "multiples of 4"},
	} {
		err := tensor.Catch(func() { v.Decode(s, tc.z, tc.opts) })
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v %s: error %v, want one saying %q", tc.z.Shape(), tc.opts.Tiling, err, tc.want)
		}
	}
	// Non-finite latents are refused before anything runs; finite latents
	// so large that the convolutions overflow give non-finite pixels, also
	// an error rather than a black video.
	nan := randLatents(1, 1, 16, 2, 4, 4)
	nan.Float32s()[77] = float32(math.NaN())
	inf := randLatents(1, 1, 16, 2, 4, 4)
	inf.Float32s()[5] = float32(math.Inf(-1))
	huge := randLatents(1, 1, 16, 2, 4, 4)
	for i := range huge.Float32s() {
		huge.Float32s()[i] = 3e38
	}
	for _, tc := range []struct {
		z    *tensor.Tensor
		want string
	}{
		{nan, "the latents to decode hold non-finite values: 1 NaN and 0 Inf"},
		{inf, "the latents to decode hold non-finite values: 0 NaN and 1 Inf"},
		{huge, "the decoder produced non-finite pixels"},
	} {
		err := tensor.Catch(func() { v.Decode(s, tc.z, DefaultDecode()) })
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("decode: error %v, want one saying %q", err, tc.want)
		}
	}
	err := tensor.Catch(func() { v.Encode(s, randLatents(1, 1, 4, 1, 8, 8)) })
	if err == nil || !strings.Contains(err.Error(), "want (B, 3, T, H, W)") {
		t.Errorf("encode of 4 channels: %v", err)
	}
}

// TestGoldenDecodeThroughChain decodes the golden cases on a CPU backend
// behind the conv3d chain and a memory budget: the causal convolutions then
// go through Conv3dPadded (a padded copy made by the chain for the CPU tier),
// with the same result, and the peak model without padded copies still
// bounds the measured peak of the activations.
func TestGoldenDecodeThroughChain(t *testing.T) {
	golden.Run(t, "vae.decode", func(t *testing.T, c *golden.Case) {
		be, ch := testdevice.Chained(t)
		v := loadCase(t, c, be, tensor.F32)
		if !readsPadded(be) {
			t.Fatal("no Conv3dPadded under the budget")
		}
		z := c.Tensor("z")
		be.ResetPeak()
		c.Compare(t, "sample", decode(t, v, z, DefaultDecode()))
		if n := ch.Summary()[0].Convs; n == 0 {
			t.Error("no convolution went through the chain")
		}
		measured := be.Stats().Peak - v.WeightBytes()
		planned := v.DecodePeak(z.Shape(), DefaultTiling())
		t.Logf("planned %d B, measured %d B (a padded copy per convolution beyond the model)", planned, measured)
		if padded := DecodePeak(v.Config(), z.Shape(), DefaultTiling(), tensor.F32); planned >= padded {
			t.Errorf("the fused model (%d B) is not below the padded one (%d B)", planned, padded)
		}
	})
}
