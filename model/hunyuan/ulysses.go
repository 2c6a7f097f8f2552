package hunyuan

import (
	"fmt"

	"github.com/framepack-go/framepack/tensor"
)

// Sequence parallelism in the manner of DeepSpeed-Ulysses (and xDiT's USP
// for HunyuanVideo): each rank holds a contiguous shard of the image
// tokens and one of the text tokens (the SigLIP image context and the
// prompt, about 1k tokens against 18k image tokens at 544×704) through
// every block; attention trades tokens for heads with one all-to-all
// before it and one after it. The token refiner before the blocks runs
// whole on every rank: it is small.
//
// Attention sees the joint sequence in rank order, [image₀ | text₀ |
// image₁ | text₁ | …], so that a rank's rows travel as one message each
// way. With batch 1 attention has no mask and does not depend on the order
// of its rows: RoPE is applied before the exchange, each query's output
// lands in its own row, and the keys are summed over in any order. Batch
// elements with a key mask get the mask in the same order.

// SetSequenceParallel makes Forward share its work with the other ranks of
// c: every rank calls Forward with the same inputs and gets the whole
// output. nil or a group of one turns it off.
func (m *Model) SetSequenceParallel(c tensor.Comm) error {
	if c != nil && c.Size() > 1 && m.cfg.NumAttentionHeads%c.Size() != 0 {
		return fmt.Errorf("hunyuan: %d attention heads do not divide over %d ranks", m.cfg.NumAttentionHeads, c.Size())
	}
	if c != nil && c.Size() == 1 {
		c = nil
	}
	m.sp = c
	return nil
}

// shards is how the tokens are divided: rank r holds image tokens
// [img[r], img[r+1]) and text tokens [txt[r], txt[r+1]).
type shards struct {
	comm     tensor.Comm
	img, txt []int
}

func newShards(c tensor.Comm, imgTokens, txtTokens int) *shards {
	n := c.Size()
	if imgTokens < n || txtTokens < n {
		tensor.Fail("hunyuan", "sequence parallel: %d image and %d text tokens for %d ranks: each rank needs at least one of each", imgTokens, txtTokens, n)
	}
	sh := &shards{comm: c, img: make([]int, n+1), txt: make([]int, n+1)}
	for r := 0; r <= n; r++ {
		sh.img[r] = r * imgTokens / n
		sh.txt[r] = r * txtTokens / n
	}
	return sh
}

func (sh *shards) rank() int         { return sh.comm.Rank() }
func (sh *shards) imgTotal() int     { return sh.img[len(sh.img)-1] }
func (sh *shards) imgSize(r int) int { return sh.img[r+1] - sh.img[r] }

// rows is how many rows rank r holds, image and text; offset is where they
// start in attention's rank-ordered sequence.
func (sh *shards) rows(r int) int { return sh.imgSize(r) + sh.txt[r+1] - sh.txt[r] }
func (sh *shards) offset(r int) int {
	return sh.img[r] + sh.txt[r]
}

// takeImage and takeText keep this rank's shard of the rows (axis 1) of
// the image stream (B, image tokens, …) and of the text stream.
func (sh *shards) takeImage(s *tensor.Scope, x *tensor.Tensor) *tensor.Tensor {
	r := sh.rank()
	return s.Slice(x, 1, sh.img[r], sh.img[r+1])
}

func (sh *shards) takeText(s *tensor.Scope, x *tensor.Tensor) *tensor.Tensor {
	r := sh.rank()
	return s.Slice(x, 1, sh.txt[r], sh.txt[r+1])
}

// localRope keeps the RoPE rows of this rank's image and text shards, in
// the blocks' order [image shard | text shard]: (R, rows, D).
func (sh *shards) localRope(s *tensor.Scope, t *tensor.Tensor) *tensor.Tensor {
	r, n := sh.rank(), sh.imgTotal()
	return s.Concat(1, s.Slice(t, 1, sh.img[r], sh.img[r+1]), s.Slice(t, 1, n+sh.txt[r], n+sh.txt[r+1]))
}

// rankOrder reorders the columns of a key mask (B, [image | text]) into
// attention's rank order.
func (sh *shards) rankOrder(s *tensor.Scope, mask *tensor.Tensor) *tensor.Tensor {
	n := sh.imgTotal()
	var parts []*tensor.Tensor
	for p := 0; p < sh.comm.Size(); p++ {
		parts = append(parts, s.Slice(mask, 1, sh.img[p], sh.img[p+1]), s.Slice(mask, 1, n+sh.txt[p], n+sh.txt[p+1]))
	}
	return s.Concat(1, parts...)
}

// gather returns the whole (B, image tokens, …) from every rank's image
// shard x (B, shard, …), identical on every rank.
func (sh *shards) gather(s *tensor.Scope, x *tensor.Tensor) *tensor.Tensor {
	n := sh.comm.Size()
	send, recv := make([]*tensor.Tensor, n), make([]*tensor.Tensor, n)
	for p := range recv {
		send[p] = x
		shape := x.Shape()
		shape[1] = sh.imgSize(p)
		recv[p] = s.Empty(x.DType(), shape...)
	}
	sh.exchange(s, "gather", func() error { return sh.comm.AllToAll(send, recv) })
	out := s.Concat(1, recv...)
	s.Free(recv...)
	return out
}

func (sh *shards) exchange(s *tensor.Scope, what string, fn func() error) {
	if err := fn(); err != nil {
		tensor.Fail("hunyuan", "sequence parallel %s: %v", what, err)
	}
}

// attend is the joint attention of a rank's rows [image shard | text
// shard], q, k, v (B, rows, H, Dh), returning (B, rows, H·Dh).
func (sh *shards) attend(s *tensor.Scope, q, k, v *tensor.Tensor, p tensor.AttnParams) *tensor.Tensor {
	if _, ok := rowView(s, q, 0, 1); ok {
		return sh.attendInPlace(s, q, k, v, p)
	}
	n := sh.comm.Size()
	b, rows, heads, dh := q.Dim(0), q.Dim(1), q.Dim(2), q.Dim(3)
	hp := heads / n

	// Tokens → heads: every rank's rows of this rank's heads.
	toHeads := func(x *tensor.Tensor) *tensor.Tensor {
		send, recv := make([]*tensor.Tensor, n), make([]*tensor.Tensor, n)
		for p := 0; p < n; p++ {
			send[p] = s.Slice(x, 2, p*hp, (p+1)*hp)
			recv[p] = s.Empty(x.DType(), b, sh.rows(p), hp, dh)
		}
		sh.exchange(s, "all-to-all", func() error { return sh.comm.AllToAll(send, recv) })
		full := s.Concat(1, recv...)
		s.Free(send...)
		s.Free(recv...)
		return full
	}
	qf, kf, vf := toHeads(q), toHeads(k), toHeads(v)
	o := s.Attention(qf, kf, vf, p) // (B, all rows, H/N, Dh)
	s.Free(qf, kf, vf)

	// Heads → tokens: this rank's rows of every head.
	send, recv := make([]*tensor.Tensor, n), make([]*tensor.Tensor, n)
	for p := 0; p < n; p++ {
		send[p] = s.Slice(o, 1, sh.offset(p), sh.offset(p)+sh.rows(p))
		recv[p] = s.Empty(o.DType(), b, rows, hp, dh)
	}
	sh.exchange(s, "all-to-all", func() error { return sh.comm.AllToAll(send, recv) })
	s.Free(o)
	s.Free(send...)
	out := s.Concat(2, recv...)
	s.Free(recv...)
	return out.Reshape(b, rows, heads*dh)
}

// attendInPlace is attend for batch 1 on a backend that makes views: the
// exchanges read from and write into rows of the tensors attention uses,
// so each of q, k, v is copied once (its heads split for the peers) and
// the output once (its heads placed back).
func (sh *shards) attendInPlace(s *tensor.Scope, q, k, v *tensor.Tensor, p tensor.AttnParams) *tensor.Tensor {
	n := sh.comm.Size()
	rows, heads, dh := q.Dim(1), q.Dim(2), q.Dim(3)
	hp := heads / n
	all := sh.offset(n-1) + sh.rows(n-1)
	view := func(t *tensor.Tensor, a, b int) *tensor.Tensor {
		t, ok := rowView(s, t, a, b)
		if !ok {
			tensor.Fail("hunyuan", "sequence parallel: no view of rows %d..%d", a, b)
		}
		return t
	}

	// Tokens → heads, straight into the rank-ordered sequence of this
	// rank's heads.
	toHeads := func(x *tensor.Tensor) *tensor.Tensor {
		full := s.Empty(x.DType(), 1, all, hp, dh)
		send, recv := make([]*tensor.Tensor, n), make([]*tensor.Tensor, n)
		for p := 0; p < n; p++ {
			send[p] = s.Slice(x, 2, p*hp, (p+1)*hp) // (1, rows, hp, dh)
			recv[p] = view(full, sh.offset(p), sh.offset(p)+sh.rows(p))
		}
		sh.exchange(s, "all-to-all", func() error { return sh.comm.AllToAll(send, recv) })
		s.Free(send...)
		return full
	}
	qf, kf, vf := toHeads(q), toHeads(k), toHeads(v)
	o := s.Attention(qf, kf, vf, p) // (1, all rows, H/N, Dh)
	s.Free(qf, kf, vf)

	// Heads → tokens: every peer's heads of this rank's rows, placed as
	// columns of the output.
	out := s.Empty(o.DType(), 1, rows, heads*dh)
	send, recv := make([]*tensor.Tensor, n), make([]*tensor.Tensor, n)
	for p := 0; p < n; p++ {
		send[p] = view(o, sh.offset(p), sh.offset(p)+sh.rows(p))
		recv[p] = s.Empty(o.DType(), 1, rows, hp, dh)
	}
	sh.exchange(s, "all-to-all", func() error { return sh.comm.AllToAll(send, recv) })
	for p := 0; p < n; p++ {
		s.PlaceColumns(out, p*hp*dh, recv[p].Reshape(1, rows, hp*dh))
	}
	s.Free(recv...)
	s.Free(o)
	return out
}

// rowMeans gathers every rank's per-token values, means (B, shard) row-major,
// into (B, total) in token order, so each rank sums the whole in the order
// one rank would.
func (sh *shards) rowMeans(s *tensor.Scope, means []float32, b int) []float32 {
	t := s.To(tensor.FromFloat32(append([]float32(nil), means...), len(means)))
	n := sh.comm.Size()
	send, recv := make([]*tensor.Tensor, n), make([]*tensor.Tensor, n)
	for p := range recv {
		send[p] = t
		recv[p] = s.Empty(tensor.F32, b*sh.imgSize(p))
	}
	sh.exchange(s, "all-to-all", func() error { return sh.comm.AllToAll(send, recv) })
	parts := make([][]float32, n)
	for p, r := range recv {
		parts[p] = tensor.Float32s(r)
	}
	s.Free(recv...)
	all := make([]float32, 0, b*sh.imgTotal())
	for i := 0; i < b; i++ {
		for p, part := range parts {
			all = append(all, part[i*sh.imgSize(p):(i+1)*sh.imgSize(p)]...)
		}
	}
	return all
}
