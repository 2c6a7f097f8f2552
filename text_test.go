package framepack

import (
	"slices"
	"strings"
	"testing"
)

func TestPromptTokens(t *testing.T) {
	p := loadTiny(t)
	prefix, _, _ := strings.Cut(PromptTemplate, "{}")
	want, err := p.llamaTok.Encode(prefix)
	if err != nil {
		t.Fatal(err)
	}
	if p.CropStart() != len(want) {
		t.Fatalf("crop start %d, the template prefix has %d tokens", p.CropStart(), len(want))
	}
	eot, _ := p.llamaTok.ID("<|eot_id|>")
	// The prompt's tokens start right after the prefix's (the crop keeps
	// exactly the prompt and the closing <|eot_id|>).
	for _, prompt := range []string{"", "A cat.", "Ünïcödé dances", "The girl dances gracefully, with clear movements, full of charm."} {
		ids, err := p.llamaIDs(prompt)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(ids[:p.CropStart()], want) || ids[len(ids)-1] != eot {
			t.Errorf("%q: ids %v do not start with the prefix %v and end with <|eot_id|>", prompt, ids, want)
		}
	}
	// Long prompts are cut at crop_start + 256 tokens, as FramePack's
	// tokenizer call truncates.
	ids, err := p.llamaIDs(strings.Repeat("dance ", 1000))
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != p.CropStart()+maxPromptTokens || ids[len(ids)-1] == eot {
		t.Errorf("a long prompt gave %d tokens, want %d", len(ids), p.CropStart()+maxPromptTokens)
	}
}

func TestPadded(t *testing.T) {
	c := textCond{embeds: []float32{1, 2, 3, 4, 5, 6}, tokens: 3, pooled: []float32{7, 8}}
	e, m := c.padded(2)
	if sh := e.Shape(); !slices.Equal(sh, []int{1, 512, 2}) || !slices.Equal(m.Shape(), []int{1, 512}) {
		t.Fatalf("shapes %v %v", e.Shape(), m.Shape())
	}
	ev, mv := e.Float32s(), m.Float32s()
	if !slices.Equal(ev[:6], c.embeds) || slices.ContainsFunc(ev[6:], func(v float32) bool { return v != 0 }) {
		t.Error("embeddings not zero-padded after the tokens")
	}
	if !slices.Equal(mv[:4], []float32{1, 1, 1, 0}) || slices.Contains(mv[3:], 1) {
		t.Errorf("mask %v…", mv[:5])
	}
	z := c.zerosLike()
	if z.tokens != 3 || len(z.embeds) != 6 || slices.ContainsFunc(append(z.embeds, z.pooled...), func(v float32) bool { return v != 0 }) {
		t.Errorf("zerosLike: %+v", z)
	}
}
