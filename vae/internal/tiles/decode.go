package tiles

import (
	"fmt"
	"time"

	"github.com/framepack-go/framepack/tensor"
)

// Stats describe a finished decode.
type Stats[T any] struct {
	Tiling  T   // the tiling that produced the result
	Tiles   int // decoder runs of that attempt
	Retries int // attempts that ran out of memory and were shrunk
	Elapsed time.Duration
}

// Decode is the frame of a VAE's decode of latents z. A NaN or Inf in the
// latents spreads through every convolution into a video of undefined
// (black) pixels, so it refuses such latents, and also pixels that come out
// non-finite (before any clamp, which would hide an Inf): neither is
// written as if it were a video. bad is the tiling's own check of til (nil
// when valid). In between it runs once at til under Shrinking (op, what,
// noRetry, logf and smaller are Shrinking's). Failures panic as
// *tensor.OpError of op.
func Decode[T fmt.Stringer](op, what string, z *tensor.Tensor, til T, bad error, noRetry bool, logf func(string, ...any),
	once func(T) (*Video, int), smaller func(T) (T, bool)) (*Video, Stats[T]) {
	if err := tensor.NonFiniteError("the latents to decode hold non-finite values", z); err != nil {
		tensor.Fail(op, "%v", err)
	}
	if bad != nil {
		tensor.Fail(op, "%v", bad)
	}
	start := time.Now()
	var out *Video
	var n int
	til, retries := Shrinking(op, what, til, noRetry, logf, func(t T) { out, n = once(t) }, smaller)
	if err := tensor.NonFiniteError("the decoder produced non-finite pixels", out.Tensor()); err != nil {
		tensor.Fail(op, "%v", err)
	}
	return out, Stats[T]{Tiling: til, Tiles: n, Retries: retries, Elapsed: time.Since(start)}
}

// Encode is the frame of a VAE's encode of pixels x: it fails as op when
// bad (the tiling's own check) is set, else runs encode on x in the
// compute dtype dt, in a child scope of s that closes when it returns;
// encode gives the moments, whose posterior Encode returns (host tensors).
func Encode(op string, s *tensor.Scope, x *tensor.Tensor, dt tensor.DType, bad error,
	encode func(es *tensor.Scope, xc *tensor.Tensor) *Video) (mean, logvar *tensor.Tensor) {
	if bad != nil {
		tensor.Fail(op, "%v", bad)
	}
	es := s.Child()
	defer es.Close()
	return Posterior(encode(es, ToCompute(es, x, dt)))
}
