package section

import (
	"slices"
	"testing"
)

func TestPadded(t *testing.T) {
	c := Prompt{Embeds: []float32{1, 2, 3, 4, 5, 6}, Tokens: 3, Pooled: []float32{7, 8}}
	txt := c.Padded(2)
	e, m := txt.Embeds, txt.Mask
	if sh := e.Shape(); !slices.Equal(sh, []int{1, 512, 2}) || !slices.Equal(m.Shape(), []int{1, 512}) {
		t.Fatalf("shapes %v %v", e.Shape(), m.Shape())
	}
	ev, mv := e.Float32s(), m.Float32s()
	if !slices.Equal(ev[:6], c.Embeds) || slices.ContainsFunc(ev[6:], func(v float32) bool { return v != 0 }) {
		t.Error("embeddings not zero-padded after the tokens")
	}
	if !slices.Equal(mv[:4], []float32{1, 1, 1, 0}) || slices.Contains(mv[3:], 1) {
		t.Errorf("mask %v…", mv[:5])
	}
	if p := txt.Pooled; !slices.Equal(p.Shape(), []int{1, 2}) || !slices.Equal(p.Float32s(), c.Pooled) {
		t.Errorf("pooled %v %v", p.Shape(), p.Float32s())
	}
	z := c.ZerosLike()
	if z.Tokens != 3 || len(z.Embeds) != 6 || slices.ContainsFunc(append(z.Embeds, z.Pooled...), func(v float32) bool { return v != 0 }) {
		t.Errorf("zerosLike: %+v", z)
	}
}
