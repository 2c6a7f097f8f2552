package tensor

// LinearFP8 is Linear with an F8E4M3 weight w (out, in) dequantized per
// output channel: x·(w·scale)ᵀ + bias, scale (out) F32. A backend without
// FP8Weights dequantizes w into x's dtype first (Cast, then the scale), a
// whole weight at a time.
func (s *Scope) LinearFP8(x, w, scale, bias *Tensor) *Tensor {
	s.check("linear_fp8", x.dtype, x, bias)
	s.check("linear_fp8", F8E4M3, w)
	s.check("linear_fp8", F32, scale)
	if len(w.shape) != 2 || scale.Numel() != w.shape[0] {
		s.failf("linear_fp8", "weight %v with scale %v: want (out, in) and (out)", w.shape, scale.shape)
	}
	k := x.shape[len(x.shape)-1]
	if w.shape[1] != k {
		s.failf("linear_fp8", "input %v does not fit weight %v", x.shape, w.shape)
	}
	if bias != nil && (len(bias.shape) != 1 || bias.shape[0] != w.shape[0]) {
		s.failf("linear_fp8", "bias %v does not fit weight %v", bias.shape, w.shape)
	}
	f, ok := As[FP8Weights](s.be)
	if !ok {
		c := s.Child()
		defer c.Close()
		wd := c.Mul(c.Cast(w, x.dtype), c.Cast(scale, x.dtype).Reshape(w.shape[0], 1))
		return s.Linear(x, wd, bias)
	}
	shape := cloneInts(x.shape)
	shape[len(shape)-1] = w.shape[0]
	out := s.Empty(x.dtype, shape...)
	if out.Numel() > 0 {
		m := x.Numel() / max(k, 1)
		describe := func() Op { return Op{Class: "linear fp8", Flops: 2 * float64(out.Numel()) * float64(k)} }
		s.run("linear_fp8", describe, func() error { return f.LinearFP8(out.Reshape(m, w.shape[0]), x.Reshape(m, k), w, scale, bias) })
	}
	return out
}
