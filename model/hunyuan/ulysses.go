package hunyuan

import (
	"fmt"

	"github.com/framepack-go/framepack/tensor"
)

// Sequence parallelism in the manner of DeepSpeed-Ulysses (and xDiT's USP
// for HunyuanVideo): each rank holds a contiguous shard of the image
// tokens through every block; attention trades tokens for heads with one
// all-to-all before it (rank p gets heads [p·H/N, (p+1)·H/N) of every
// image token) and one after it. The text stream (the SigLIP image context
// and the prompt, about 1k tokens against 18k image tokens at 544×704)
// stays whole on every rank: sharding it too would save its share of each
// block's GEMMs, ≈ 6%, at the price of a second layout for the refiner and
// the masks.

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

// shards is how the image tokens are divided: rank r holds [start[r],
// start[r+1]).
type shards struct {
	comm  tensor.Comm
	start []int
}

func newShards(c tensor.Comm, tokens int) *shards {
	n := c.Size()
	sh := &shards{comm: c, start: make([]int, n+1)}
	for r := 0; r <= n; r++ {
		sh.start[r] = r * tokens / n
	}
	return sh
}

func (sh *shards) size(r int) int    { return sh.start[r+1] - sh.start[r] }
func (sh *shards) rank() int         { return sh.comm.Rank() }
func (sh *shards) total() int        { return sh.start[len(sh.start)-1] }
func (sh *shards) local() (a, b int) { return sh.start[sh.rank()], sh.start[sh.rank()+1] }

// take keeps this rank's shard of the rows (axis 1) of x, (B, total, …).
func (sh *shards) take(s *tensor.Scope, x *tensor.Tensor) *tensor.Tensor {
	a, b := sh.local()
	return s.Slice(x, 1, a, b)
}

// localRope keeps the RoPE rows of this rank's image shard and of the text
// that follows the image tokens: (R, shard+text, D).
func (sh *shards) localRope(s *tensor.Scope, t *tensor.Tensor) *tensor.Tensor {
	a, b := sh.local()
	n := sh.total()
	return s.Concat(1, s.Slice(t, 1, a, b), s.Slice(t, 1, n, t.Dim(1)))
}

// gather returns the whole (B, total, …) from every rank's shard x (B,
// shard, …), identical on every rank.
func (sh *shards) gather(s *tensor.Scope, x *tensor.Tensor) *tensor.Tensor {
	n := sh.comm.Size()
	send, recv := make([]*tensor.Tensor, n), make([]*tensor.Tensor, n)
	for p := range recv {
		send[p] = x
		shape := x.Shape()
		shape[1] = sh.size(p)
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

// attend is the joint attention of a rank's rows [image shard | text], q,
// k, v (B, shard+text, H, Dh), returning (B, shard+text, H·Dh).
func (sh *shards) attend(s *tensor.Scope, q, k, v *tensor.Tensor, p tensor.AttnParams) *tensor.Tensor {
	if _, ok := rowView(s, q, 0, 1); ok {
		return sh.attendInPlace(s, q, k, v, p)
	}
	n, r := sh.comm.Size(), sh.rank()
	b, rows, heads, dh := q.Dim(0), q.Dim(1), q.Dim(2), q.Dim(3)
	hp := heads / n
	mine := sh.size(r)
	text := rows - mine

	// Tokens → heads: the image rows of every rank for this rank's heads,
	// then this rank's heads of the (replicated) text.
	toHeads := func(x *tensor.Tensor) *tensor.Tensor {
		img, txt := s.Slice(x, 1, 0, mine), s.Slice(x, 1, mine, rows)
		send, recv := make([]*tensor.Tensor, n+1), make([]*tensor.Tensor, n+1)
		for p := 0; p < n; p++ {
			send[p] = s.Slice(img, 2, p*hp, (p+1)*hp) // a fused pack kernel would save this copy
			recv[p] = s.Empty(x.DType(), b, sh.size(p), hp, dh)
		}
		sh.exchange(s, "all-to-all", func() error { return sh.comm.AllToAll(send[:n], recv[:n]) })
		recv[n] = s.Slice(txt, 2, r*hp, (r+1)*hp)
		full := s.Concat(1, recv...)
		s.Free(img, txt)
		s.Free(send[:n]...)
		s.Free(recv...)
		return full
	}
	qf, kf, vf := toHeads(q), toHeads(k), toHeads(v)
	o := s.Attention(qf, kf, vf, p) // (B, total+text, H/N, Dh)
	s.Free(qf, kf, vf)

	// Heads → tokens: this rank's image rows of every head, and the text
	// of every head from every rank.
	total := sh.total()
	send, recv := make([]*tensor.Tensor, n), make([]*tensor.Tensor, n)
	for p := 0; p < n; p++ {
		send[p] = s.Slice(o, 1, sh.start[p], sh.start[p+1])
		recv[p] = s.Empty(o.DType(), b, mine, hp, dh)
	}
	sh.exchange(s, "all-to-all", func() error { return sh.comm.AllToAll(send, recv) })
	img := s.Concat(2, recv...)
	s.Free(send...)
	s.Free(recv...)

	txt := s.Slice(o, 1, total, total+text)
	s.Free(o)
	gathered := make([]*tensor.Tensor, n)
	for p := range gathered {
		gathered[p] = s.Empty(txt.DType(), b, text, hp, dh)
	}
	sh.exchange(s, "all-gather", func() error { return sh.comm.AllGather(txt, gathered) })
	txtAll := s.Concat(2, gathered...)
	s.Free(txt)
	s.Free(gathered...)

	out := s.Concat(1, img, txtAll)
	s.Free(img, txtAll)
	return out.Reshape(b, rows, heads*dh)
}

// attendInPlace is attend for batch 1 on a backend that makes views: the
// exchanges read from and write into rows of the tensors attention uses,
// so each of q, k, v is copied once (its heads split for the peers) and
// the output once (its heads placed back), where attend copies each three
// or four times.
func (sh *shards) attendInPlace(s *tensor.Scope, q, k, v *tensor.Tensor, p tensor.AttnParams) *tensor.Tensor {
	n, r := sh.comm.Size(), sh.rank()
	rows, heads, dh := q.Dim(1), q.Dim(2), q.Dim(3)
	hp := heads / n
	mine, total := sh.size(r), sh.total()
	text := rows - mine
	view := func(t *tensor.Tensor, a, b int) *tensor.Tensor {
		t, ok := rowView(s, t, a, b)
		if !ok {
			tensor.Fail("hunyuan", "sequence parallel: no view of rows %d..%d", a, b)
		}
		return t
	}

	// Tokens → heads, straight into [all image tokens | text] of this
	// rank's heads.
	toHeads := func(x *tensor.Tensor) *tensor.Tensor {
		full := s.Empty(x.DType(), 1, total+text, hp, dh)
		split := make([]*tensor.Tensor, n)
		send, recv := make([]*tensor.Tensor, n), make([]*tensor.Tensor, n)
		for p := 0; p < n; p++ {
			split[p] = s.Slice(x, 2, p*hp, (p+1)*hp) // (1, rows, hp, dh)
			send[p] = view(split[p], 0, mine)
			recv[p] = view(full, sh.start[p], sh.start[p+1])
		}
		s.PlaceRows(full, total, view(split[r], mine, rows))
		sh.exchange(s, "all-to-all", func() error { return sh.comm.AllToAll(send, recv) })
		s.Free(split...)
		return full
	}
	qf, kf, vf := toHeads(q), toHeads(k), toHeads(v)
	o := s.Attention(qf, kf, vf, p) // (1, total+text, H/N, Dh)
	s.Free(qf, kf, vf)

	// Heads → tokens: every peer's heads of this rank's image rows, and
	// every rank's heads of the text, placed as columns of the output.
	out := s.Empty(o.DType(), 1, rows, heads*dh)
	send, recv := make([]*tensor.Tensor, n), make([]*tensor.Tensor, n)
	for p := 0; p < n; p++ {
		send[p] = view(o, sh.start[p], sh.start[p+1])
		recv[p] = s.Empty(o.DType(), 1, mine, hp, dh)
	}
	sh.exchange(s, "all-to-all", func() error { return sh.comm.AllToAll(send, recv) })
	gathered := make([]*tensor.Tensor, n)
	for p := range gathered {
		gathered[p] = s.Empty(o.DType(), 1, text, hp, dh)
	}
	sh.exchange(s, "all-gather", func() error { return sh.comm.AllGather(view(o, total, total+text), gathered) })
	img, txt := view(out, 0, mine), view(out, mine, rows)
	for p := 0; p < n; p++ {
		s.PlaceColumns(img, p*hp*dh, recv[p].Reshape(1, mine, hp*dh))
		s.PlaceColumns(txt, p*hp*dh, gathered[p].Reshape(1, text, hp*dh))
	}
	s.Free(recv...)
	s.Free(gathered...)
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
		recv[p] = s.Empty(tensor.F32, b*sh.size(p))
	}
	sh.exchange(s, "all-to-all", func() error { return sh.comm.AllToAll(send, recv) })
	parts := make([][]float32, n)
	for p, r := range recv {
		parts[p] = tensor.Float32s(r)
	}
	s.Free(recv...)
	all := make([]float32, 0, b*sh.total())
	for i := 0; i < b; i++ {
		for p, part := range parts {
			all = append(all, part[i*sh.size(p):(i+1)*sh.size(p)]...)
		}
	}
	return all
}
