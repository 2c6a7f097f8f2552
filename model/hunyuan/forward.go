package hunyuan

import (
	"fmt"
	"slices"

	"github.com/framepack-go/framepack/tensor"
)

// Inputs are one transformer call (FramePack's §2.5 layout). Tensors may be
// host tensors or live on the model's backend, in any float dtype (they are
// cast to the compute dtype). Frame indices are Go slices: either one row
// shared by every batch element (length N) or one row per element
// (length B·N, row-major); nil LatentIndices means 0..T−1.
type Inputs struct {
	HiddenStates *tensor.Tensor // (B, 16, T, h, w) noisy latents; h, w even
	// Timestep and Guidance have one value per batch element, already
	// rounded as the caller wants (σ·1000 and distilled guidance·1000).
	Timestep, Guidance   []float32
	EncoderHiddenStates  *tensor.Tensor // (B, L, text_embed_dim) LLaMA states
	EncoderAttentionMask *tensor.Tensor // (B, L) 0/1, valid tokens first; nil: all valid
	PooledProjections    *tensor.Tensor // (B, pooled_projection_dim) CLIP pooled
	ImageEmbeddings      *tensor.Tensor // (B, N, image_proj_dim) SigLIP states (has_image_proj)
	LatentIndices        []int64        // T frame indices of the noisy latents

	// The history (has_clean_x_embedder); nil latents: that stream is absent.
	CleanLatents         *tensor.Tensor // (B, 16, T1, h, w)
	CleanLatentIndices   []int64        // T1
	CleanLatents2x       *tensor.Tensor // (B, 16, T2, h, w)
	CleanLatent2xIndices []int64        // T2
	CleanLatents4x       *tensor.Tensor // (B, 16, T4, h, w)
	CleanLatent4xIndices []int64        // T4
}

// Forward runs the transformer and returns the predicted velocity
// (B, 16, T, h, w) in f32, owned by s. Bad inputs fail the op (tensor.Catch
// turns that into an error).
func (m *Model) Forward(s *tensor.Scope, in *Inputs) *tensor.Tensor {
	if err := m.check(in); err != nil {
		tensor.Fail("hunyuan", "%v", err)
	}
	cfg, dt := m.cfg, m.dt
	cs := s.Child()
	defer cs.Close()

	b, t, h, w := in.HiddenStates.Dim(0), in.HiddenStates.Dim(2), in.HiddenStates.Dim(3), in.HiddenStates.Dim(4)
	pt, ph, pw := t/cfg.PatchSizeT, h/cfg.PatchSize, w/cfg.PatchSize
	originalContextLength := pt * ph * pw

	img, rope := m.processInputHiddenStates(cs, in)

	temb := m.timeTextEmbed.forward(cs, in.Timestep, in.Guidance, cs.To(in.PooledProjections), dt)

	// Text: only the valid tokens (batch 1 crops to them as the reference;
	// batch > 1 keeps the longest and masks the rest).
	valid := validTokens(in)
	lt := slices.Max(valid)
	ehs := cs.To(in.EncoderHiddenStates)
	if lt < ehs.Dim(1) {
		ehs = cs.Slice(ehs, 1, 0, lt)
	}
	ehs = cs.Cast(ehs, dt)
	var refinerAttn tensor.AttnParams
	if b > 1 {
		refinerAttn.KeyMask = cs.To(keyMask(valid, 0, lt))
	}
	txt := m.contextEmbedder.forward(cs, ehs, in.Timestep, valid, refinerAttn, cfg.NumAttentionHeads)

	// The image context goes before the text, so the valid tokens stay a
	// prefix of the joint sequence.
	if cfg.HasImageProj {
		extra := m.imageProjection.forward(cs, cs.Cast(cs.To(in.ImageEmbeddings), dt))
		txt = cs.Concat(1, extra, txt)
	}

	j := &joint{heads: cfg.NumAttentionHeads, fp8: m.opts.FP8Attention}
	if b > 1 {
		j.keyMask = cs.To(keyMask(valid, img.Dim(1)+txt.Dim(1)-lt, lt))
	}
	rope.nText = txt.Dim(1)
	j.cos, j.sin = m.ropeTables(rope)
	if m.sp != nil {
		j.sh = newShards(m.sp, img.Dim(1), txt.Dim(1))
		j.cos, j.sin = j.sh.localRope(cs, j.cos), j.sh.localRope(cs, j.sin)
		if j.keyMask != nil {
			j.keyMask = j.sh.rankOrder(cs, j.keyMask)
		}
		wholeImg, wholeTxt := img, txt
		img, txt = j.sh.takeImage(cs, wholeImg), j.sh.takeText(cs, wholeTxt)
		cs.Free(wholeImg, wholeTxt)
	}

	img = m.runBlocks(cs, img, txt, temb, j)

	// norm_out: AdaLayerNormContinuous, chunked [scale, shift].
	mod := adaChunks(cs, &m.normOut, temb, 2)
	img = kernelsFor(cs).lnModulate(cs, img, mod[1], mod[0])
	if j.sh == nil {
		img = cs.Slice(img, 1, img.Dim(1)-originalContextLength, img.Dim(1))
	}

	// high_quality_fp32_output_for_inference: proj_out in f32.
	out := m.projOut.forward(cs, cs.Cast(img, tensor.F32))
	if j.sh != nil {
		all := j.sh.gather(cs, out)
		out = cs.Slice(all, 1, all.Dim(1)-originalContextLength, all.Dim(1))
	}

	// b (t h w) (c pt ph pw) -> b c (t pt) (h ph) (w pw)
	p := cfg.PatchSize
	out = cs.Permute(out.Reshape(b, pt*ph, pw, cfg.OutChannels, p, p), 0, 3, 1, 4, 2, 5)
	out = out.Reshape(b, cfg.OutChannels, t, h, w)
	cs.Keep(out)
	return out
}

// processInputHiddenStates embeds the noisy latents and the history into
// the image stream [4x | 2x | clean | noisy] and describes its RoPE grids in
// the same order, per batch element or once when the indices are shared.
func (m *Model) processInputHiddenStates(s *tensor.Scope, in *Inputs) (*tensor.Tensor, ropeSpec) {
	dt := m.dt
	x := s.Cast(s.To(in.HiddenStates), dt)
	b, t, h, w := x.Dim(0), x.Dim(2), x.Dim(3), x.Dim(4)
	ph, pw := h/m.cfg.PatchSize, w/m.cfg.PatchSize

	type stream struct {
		latents *tensor.Tensor
		indices []int64
		conv    *patchConv
		pad     [3]int // latent padding before the conv
		pool    int    // RoPE pooling
	}
	latentIndices := in.LatentIndices
	if latentIndices == nil {
		for i := 0; i < t; i++ {
			latentIndices = append(latentIndices, int64(i))
		}
	}
	// In the order each is prepended; the noisy latents come first.
	streams := []stream{{x, latentIndices, &m.xEmbedder, [3]int{1, 1, 1}, 1}}
	if in.CleanLatents != nil {
		streams = append(streams, stream{in.CleanLatents, in.CleanLatentIndices, &m.cleanXEmbedder.Proj, [3]int{1, 1, 1}, 1})
	}
	if in.CleanLatents2x != nil {
		streams = append(streams, stream{in.CleanLatents2x, in.CleanLatent2xIndices, &m.cleanXEmbedder.Proj2x, [3]int{2, 4, 4}, 2})
	}
	if in.CleanLatents4x != nil {
		streams = append(streams, stream{in.CleanLatents4x, in.CleanLatent4xIndices, &m.cleanXEmbedder.Proj4x, [3]int{4, 8, 8}, 4})
	}

	tokens := make([]*tensor.Tensor, len(streams))
	shared := true
	for i, st := range streams {
		lat := s.Cast(s.To(st.latents), dt)
		tokens[len(streams)-1-i] = st.conv.tokens(s, padFor3dConv(s, lat, st.pad))
		shared = shared && len(st.indices) == st.latents.Dim(2)
	}
	img := tokens[0]
	if len(tokens) > 1 {
		img = s.Concat(1, tokens...)
	}

	rows := 1
	if !shared {
		rows = b
	}
	spec := ropeSpec{h: ph, w: pw, rows: make([][]ropeStream, rows)}
	for r := range spec.rows {
		spec.rows[r] = make([]ropeStream, len(streams))
		for i, st := range streams {
			n := st.latents.Dim(2)
			idx := st.indices
			if len(idx) != n {
				idx = idx[r*n : (r+1)*n]
			}
			spec.rows[r][len(streams)-1-i] = ropeStream{frames: idx, pool: st.pool}
		}
	}
	return img, spec
}

// ropeTables returns the RoPE tables of the joint sequence on the backend,
// (rows, L, head_dim) f32, reusing the last call's when the grids are the
// same (every step of a section).
func (m *Model) ropeTables(spec ropeSpec) (cos, sin *tensor.Tensor) {
	key := spec.key()
	if m.rope.key != key {
		m.state.Free(m.rope.cos, m.rope.sin)
		m.rope.cos, m.rope.sin = nil, nil
		var cs, sn []float32
		l, d := 0, 0
		for _, row := range spec.rows {
			grids := make([]*ropeGrid, len(row))
			for i, st := range row {
				grids[i] = newRopeGrid(m.cfg, st.frames, spec.h, spec.w)
				if st.pool > 1 {
					grids[i] = grids[i].pooled(st.pool)
				}
			}
			c, s := joinRopeGrids(spec.nText, grids...)
			l, d = c.Dim(0), c.Dim(1)
			cs = append(cs, c.Float32s()...)
			sn = append(sn, s.Float32s()...)
		}
		r := len(spec.rows)
		m.rope.cos = m.state.To(tensor.FromFloat32(cs, r, l, d))
		m.rope.sin = m.state.To(tensor.FromFloat32(sn, r, l, d))
		m.rope.key = key
	}
	return m.rope.cos, m.rope.sin
}

// runBlocks runs the double and single blocks on the image stream, or, when
// TeaCache (§3.8) or MagCache decides so, reuses the residual of the last
// call that ran them.
func (m *Model) runBlocks(s *tensor.Scope, img, txt, temb *tensor.Tensor, j *joint) *tensor.Tensor {
	call := m.calls
	m.calls++
	if m.mc.enabled {
		if !m.mc.step() {
			m.skips = append(m.skips, call)
			return s.Add(img, m.mc.prevResidual)
		}
		out := m.blocksForward(s, img, txt, temb, j)
		m.tc.keep(m.state, &m.mc.prevResidual, s.Sub(out, img))
		return out
	}
	if !m.tc.enabled {
		return m.blocksForward(s, img, txt, temb, j)
	}
	if len(m.blocks) == 0 {
		tensor.Fail("teacache", "TeaCache reads the first double block, and the model has none")
	}
	// The modulated input of the first block over the whole image stream.
	ms := s.Child()
	u := m.acquire(0, false)
	defer u.release()
	c := adaChunks(ms, &u.block().(*doubleBlock).Norm1, temb, 6)
	mod := kernelsFor(ms).lnModulate(ms, img, c[0], c[1])
	ms.Keep(mod)
	ms.Close()
	u.release()

	calc := m.tc.step(func() float64 { return relL1(s, mod, m.tc.prevMod, m.dt, j.sh) })
	m.tc.keep(m.state, &m.tc.prevMod, mod)
	s.Free(mod)
	if !calc {
		m.tc.skipped++
		m.skips = append(m.skips, call)
		return s.Add(img, m.tc.prevResidual)
	}
	m.tc.computed++
	out := m.blocksForward(s, img, txt, temb, j)
	m.tc.keep(m.state, &m.tc.prevResidual, s.Sub(out, img))
	return out
}

// blocksForward runs every block, each in its own scope so its
// intermediates (and the copies of streamed weights) are freed as soon as
// it is done; the next streamed block's weights are copied while the
// current block computes. The double blocks run on the two streams, the
// single blocks on the joined [image | text] stream. img itself is left
// to the caller.
func (m *Model) blocksForward(s *tensor.Scope, img, txt, temb *tensor.Tensor, j *joint) *tensor.Tensor {
	ops := kernelsFor(s)
	var cur, next *use
	defer func() { cur.release(); next.release() }()
	x, c, h := img, txt, (*tensor.Tensor)(nil)
	for i := 0; i < m.numBlocks(); i++ {
		cur, next = next, nil
		if cur == nil {
			cur = m.acquire(i, false)
		}
		if i+1 < m.numBlocks() {
			next = m.acquire(i+1, true)
		}
		bs := s.Child()
		switch b := cur.block().(type) {
		case *doubleBlock:
			nx, nc := b.forward(bs, ops, x, c, temb, j)
			bs.Keep(nx, nc)
			bs.Close()
			if x != img {
				s.Free(x)
			}
			if c != txt {
				s.Free(c)
			}
			x, c = nx, nc
		case *singleBlock:
			if h == nil {
				h = s.Concat(1, x, c)
				if x != img {
					s.Free(x)
				}
				if c != txt {
					s.Free(c)
				}
			}
			nh := b.forward(bs, ops, h, temb, j)
			bs.Keep(nh)
			bs.Close()
			s.Free(h)
			h = nh
		}
		cur.release()
		cur = nil
	}
	if len(m.arenas) > 0 && m.arenas[0].mapped {
		m.readAhead(0) // the next pass starts with it
	}
	if h == nil {
		if c != txt {
			s.Free(c)
		}
		return x
	}
	out := s.Slice(h, 1, 0, img.Dim(1))
	s.Free(h)
	return out
}

// validTokens is the number of valid text tokens of each batch element.
func validTokens(in *Inputs) []int {
	b, l := in.EncoderHiddenStates.Dim(0), in.EncoderHiddenStates.Dim(1)
	n := make([]int, b)
	if in.EncoderAttentionMask == nil {
		for i := range n {
			n[i] = l
		}
		return n
	}
	mask := tensor.Float32s(in.EncoderAttentionMask)
	for i := range n {
		for _, v := range mask[i*l : (i+1)*l] {
			if v != 0 {
				n[i]++
			}
		}
	}
	return n
}

// keyMask is a (B, prefix+L) f32 key mask: the prefix and the first
// valid[b] of the L text tokens visible.
func keyMask(valid []int, prefix, l int) *tensor.Tensor {
	n := prefix + l
	m := make([]float32, len(valid)*n)
	for b, v := range valid {
		for i := 0; i < prefix+v; i++ {
			m[b*n+i] = 1
		}
	}
	return tensor.FromFloat32(m, len(valid), n)
}

// check validates the inputs' shapes against the config.
func (m *Model) check(in *Inputs) error {
	cfg := m.cfg
	if in == nil || in.HiddenStates == nil || in.EncoderHiddenStates == nil || in.PooledProjections == nil {
		return fmt.Errorf("inputs need hidden_states, encoder_hidden_states and pooled_projections")
	}
	x := in.HiddenStates.Shape()
	if len(x) != 5 || x[1] != cfg.InChannels || x[3]%cfg.PatchSize != 0 || x[4]%cfg.PatchSize != 0 || x[0] == 0 || x[2] == 0 {
		return fmt.Errorf("hidden_states %v: want (B, %d, T, h, w) with h and w even", x, cfg.InChannels)
	}
	b, t, h, w := x[0], x[2], x[3], x[4]
	if len(in.Timestep) != b || len(in.Guidance) != b {
		return fmt.Errorf("%d timesteps and %d guidance values for batch %d", len(in.Timestep), len(in.Guidance), b)
	}
	e := in.EncoderHiddenStates.Shape()
	if len(e) != 3 || e[0] != b || e[2] != cfg.TextEmbedDim || e[1] == 0 {
		return fmt.Errorf("encoder_hidden_states %v: want (%d, L, %d)", e, b, cfg.TextEmbedDim)
	}
	if mk := in.EncoderAttentionMask; mk != nil {
		if !slices.Equal(mk.Shape(), []int{b, e[1]}) {
			return fmt.Errorf("encoder_attention_mask %v: want (%d, %d)", mk.Shape(), b, e[1])
		}
		v := tensor.Float32s(mk)
		for i := 0; i < b; i++ {
			row := v[i*e[1] : (i+1)*e[1]]
			if row[0] == 0 {
				return fmt.Errorf("encoder_attention_mask row %d has no valid token first", i)
			}
			for k := 1; k < len(row); k++ {
				if (row[k] != 0 && row[k] != 1) || (row[k] == 1 && row[k-1] == 0) {
					return fmt.Errorf("encoder_attention_mask row %d: want 0/1 with the valid tokens first", i)
				}
			}
		}
	}
	if p := in.PooledProjections.Shape(); !slices.Equal(p, []int{b, cfg.PooledProjectionDim}) {
		return fmt.Errorf("pooled_projections %v: want (%d, %d)", p, b, cfg.PooledProjectionDim)
	}
	if cfg.HasImageProj {
		if in.ImageEmbeddings == nil {
			return fmt.Errorf("the model has an image projection: image_embeddings are required")
		}
		if ie := in.ImageEmbeddings.Shape(); len(ie) != 3 || ie[0] != b || ie[2] != cfg.ImageProjDim {
			return fmt.Errorf("image_embeddings %v: want (%d, N, %d)", ie, b, cfg.ImageProjDim)
		}
	}
	if err := checkIndices("latent_indices", in.LatentIndices, b, t, true); err != nil {
		return err
	}
	for _, c := range []struct {
		name, idxName string
		lat           *tensor.Tensor
		idx           []int64
	}{
		{"clean_latents", "clean_latent_indices", in.CleanLatents, in.CleanLatentIndices},
		{"clean_latents_2x", "clean_latent_2x_indices", in.CleanLatents2x, in.CleanLatent2xIndices},
		{"clean_latents_4x", "clean_latent_4x_indices", in.CleanLatents4x, in.CleanLatent4xIndices},
	} {
		if c.lat == nil {
			continue
		}
		if !cfg.HasCleanXEmbedder {
			return fmt.Errorf("%s given, but the model has no clean_x_embedder", c.name)
		}
		s := c.lat.Shape()
		if len(s) != 5 || s[0] != b || s[1] != 16 || s[3] != h || s[4] != w || s[2] == 0 {
			return fmt.Errorf("%s %v: want (%d, 16, T, %d, %d)", c.name, s, b, h, w)
		}
		if err := checkIndices(c.idxName, c.idx, b, s[2], false); err != nil {
			return err
		}
	}
	return nil
}

func checkIndices(name string, idx []int64, b, n int, optional bool) error {
	if idx == nil && optional {
		return nil
	}
	if len(idx) != n && len(idx) != b*n {
		return fmt.Errorf("%s has %d values: want %d (shared) or %d (per batch element)", name, len(idx), n, b*n)
	}
	return nil
}
