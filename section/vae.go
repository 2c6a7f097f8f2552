package section

import (
	"slices"

	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/vae"
)

// VAEEncode is FramePack's vae_encode of a cropped image: the posterior
// sampled with rng (its mode when rng is nil), times the scaling factor.
// torch computes both steps in the VAE's dtype, so each is rounded to it.
// The latents (1, C, 1, h, w) are f32 on the host, owned by no scope.
// Errors panic inside s as *tensor.OpError (tensor.Catch).
func VAEEncode(s *tensor.Scope, v *vae.VAE, image *RGB, til vae.Tiling, rng vae.Randn) *tensor.Tensor {
	mean, logvar := v.EncodeWith(s, VAEPixels(image), til)
	var z []float32
	if rng == nil {
		z = slices.Clone(tensor.Float32s(vae.Mode(mean, logvar)))
	} else {
		z = vae.Sample(mean, logvar, rng).Float32s()
	}
	round, sf := tensor.Rounder(v.DType()), v.ScalingFactor()
	for i, x := range z {
		z[i] = round(round(x) * sf)
	}
	return tensor.FromFloat32(z, mean.Shape()...)
}

// VAEDecode is FramePack's vae_decode: the latents as FramePack keeps them
// (times the scaling factor) divided by the scaling factor in f32, then
// DecodeUnscaled.
func VAEDecode(s *tensor.Scope, v *vae.VAE, latents *tensor.Tensor, opts vae.DecodeOptions) *tensor.Tensor {
	z := slices.Clone(tensor.Float32s(latents))
	sf := v.ScalingFactor()
	for i := range z {
		z[i] /= sf
	}
	return DecodeUnscaled(s, v, tensor.FromFloat32(z, latents.Shape()...), opts)
}

// DecodeUnscaled decodes latents already divided by the scaling factor
// with opts' tiling on the VAE's backend, and returns the pixels (B, 3,
// 4T−3, 8h, 8w), unclamped, in the VAE's dtype as torch returns them,
// allocated in s. The decode's own memory is freed before it returns.
func DecodeUnscaled(s *tensor.Scope, v *vae.VAE, z *tensor.Tensor, opts vae.DecodeOptions) *tensor.Tensor {
	ds := tensor.NewScope(v.Backend())
	defer ds.Close()
	px := v.Decode(ds, z, opts) // f32, host, owned by no scope
	return s.Cast(s.To(px), v.DType())
}
