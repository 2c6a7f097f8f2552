package framepack

import (
	"slices"
	"strings"
	"testing"

	"github.com/framepack-go/framepack/section"
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
		ids, err := section.LlamaIDs(p.llamaTok, p.CropStart(), prompt)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(ids[:p.CropStart()], want) || ids[len(ids)-1] != eot {
			t.Errorf("%q: ids %v do not start with the prefix %v and end with <|eot_id|>", prompt, ids, want)
		}
	}
	// Long prompts are cut at crop_start + 256 tokens, as FramePack's
	// tokenizer call truncates.
	ids, err := section.LlamaIDs(p.llamaTok, p.CropStart(), strings.Repeat("dance ", 1000))
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != p.CropStart()+section.MaxPromptTokens || ids[len(ids)-1] == eot {
		t.Errorf("a long prompt gave %d tokens, want %d", len(ids), p.CropStart()+section.MaxPromptTokens)
	}
}
