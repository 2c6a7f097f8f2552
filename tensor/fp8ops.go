package tensor

// LinearFP8 is Linear with an F8E4M3 weight w (out, in) dequantized per
// output channel: x·(w·scale)ᵀ + bias, scale (out) F32. A backend without
// FP8Weights dequantizes w into x's dtype first with ops every backend has
// (dequantFP8), a whole weight at a time.
func (s *Scope) LinearFP8(x, w, scale, bias *Tensor) *Tensor {
	m, k := s.checkLinearFP8("linear_fp8", x, w, scale, bias)
	f, ok := As[FP8Weights](s.be)
	if !ok {
		return s.Linear(x, s.dequantFP8(w, scale, x.dtype), bias)
	}
	out := s.Empty(x.dtype, linearShape(x, w)...)
	if out.Numel() > 0 {
		describe := func() Op { return Op{Class: "linear fp8", Flops: 2 * float64(out.Numel()) * float64(k)} }
		s.run("linear_fp8", describe, func() error { return f.LinearFP8(out.Reshape(m, w.shape[0]), x.Reshape(m, k), w, scale, bias) })
	}
	return out
}

// LinearFP8Compute is LinearFP8 with the input quantized too: each row of
// x (a token) to E4M3 with its own scale amax/448, the products of codes
// summed in f32 and scaled by the token's and the output channel's scales
// (FP8Compute). A backend without FP8Compute runs LinearFP8 instead, the
// input unquantized.
func (s *Scope) LinearFP8Compute(x, w, scale, bias *Tensor) *Tensor {
	f, ok := As[FP8Compute](s.be)
	if !ok {
		return s.LinearFP8(x, w, scale, bias)
	}
	m, k := s.checkLinearFP8("linear_fp8_compute", x, w, scale, bias)
	out := s.Empty(x.dtype, linearShape(x, w)...)
	if out.Numel() == 0 {
		return out
	}
	c := s.Child()
	defer c.Close()
	xq, xs := c.QuantizeRowsFP8(x.Reshape(m, k))
	describe := func() Op { return Op{Class: "linear fp8 compute", Flops: 2 * float64(out.Numel()) * float64(k)} }
	s.run("linear_fp8_compute", describe, func() error {
		return f.LinearScaledFP8(out.Reshape(m, w.shape[0]), xq, xs, w, scale, bias)
	})
	return out
}

// checkLinearFP8 checks an FP8 Linear's operands: x (…, in) in a compute
// dtype, w (out, in) F8E4M3, scale (out) F32, bias (out) or nil. m and k
// are x's rows and in.
func (s *Scope) checkLinearFP8(op string, x, w, scale, bias *Tensor) (m, k int) {
	s.check(op, x.dtype, x, bias)
	s.check(op, F8E4M3, w)
	s.check(op, F32, scale)
	if len(w.shape) != 2 || scale.Numel() != w.shape[0] {
		s.failf(op, "weight %v with scale %v: want (out, in) and (out)", w.shape, scale.shape)
	}
	k = x.shape[len(x.shape)-1]
	if w.shape[1] != k {
		s.failf(op, "input %v does not fit weight %v", x.shape, w.shape)
	}
	if bias != nil && (len(bias.shape) != 1 || bias.shape[0] != w.shape[0]) {
		s.failf(op, "bias %v does not fit weight %v", bias.shape, w.shape)
	}
	return x.Numel() / max(k, 1), k
}

// linearShape is the shape of a Linear's output: x's with its last axis
// w's rows.
func linearShape(x, w *Tensor) []int {
	shape := cloneInts(x.shape)
	shape[len(shape)-1] = w.shape[0]
	return shape
}

// QuantizeRowsFP8 quantizes each row of x (…, K) to E4M3 with its own scale
// amax/448 (1 for a row of zeros): codes (…, K) F8E4M3 and scales (…) F32,
// so that code·scale ≈ x. Needs a backend with FP8Compute.
func (s *Scope) QuantizeRowsFP8(x *Tensor) (q, scale *Tensor) {
	s.check("quantize_rows_fp8", x.dtype, x)
	f, ok := As[FP8Compute](s.be)
	if !ok {
		s.failf("quantize_rows_fp8", "backend %s has no FP8 compute", s.be.Name())
	}
	if len(x.shape) == 0 {
		s.failf("quantize_rows_fp8", "scalar input")
	}
	k := x.shape[len(x.shape)-1]
	q = s.Empty(F8E4M3, x.shape...)
	scale = s.Empty(F32, x.shape[:len(x.shape)-1]...)
	if q.Numel() > 0 {
		m := x.Numel() / max(k, 1)
		describe := func() Op { return Op{Class: "quantize fp8"} }
		s.run("quantize_rows_fp8", describe, func() error {
			return f.QuantizeRowsFP8(q.Reshape(m, k), scale.Reshape(m), x.Reshape(m, k))
		})
	}
	return q, scale
}

// dequantFP8 is w·scale (w F8E4M3 (N, K), scale (N) F32) in dtype dt, made
// with ops every backend has: the codes, read as bytes and widened to i32,
// index a 256-entry f32 table of E4M3 values (Embedding); the product with
// the scale is f32, rounded once to dt. Its temporaries (i32 and f32 copies
// of the weight) live only for the call.
func (s *Scope) dequantFP8(w, scale *Tensor, dt DType) *Tensor {
	c := s.Child()
	defer c.Close()
	codes := &Tensor{shape: []int{w.Numel()}, dtype: U8, buf: w.buf, be: w.be}
	lut := FromFloat32(append([]float32(nil), f8e4m3Table[:]...), 256, 1)
	vals := c.Embedding(c.To(lut), c.Cast(codes, I32)).Reshape(w.shape...)
	wd := c.Cast(c.Mul(vals, scale.Reshape(w.shape[0], 1)), dt)
	c.Keep(wd)
	return wd
}
