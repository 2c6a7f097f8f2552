package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// llamaPattern is the LLaMA-3 pre-tokenizer regex as its tokenizer.json has it.
const llamaPattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// writeLlama writes a small tokenizer.json: every byte symbol, a few merges,
// two added tokens and a BOS template.
func writeLlama(t *testing.T, ignoreMerges bool) string {
	vocab := map[string]int64{}
	for b := 0; b < 256; b++ {
		vocab[string(byteToRune[b])] = int64(b)
	}
	merges := []string{"h e", "l l", "he ll", "hell o", "Ġ w", "Ġw o", "Ġwo r", "Ġwor l", "Ġworl d", "1 2"}
	for i, m := range merges {
		vocab[strings.ReplaceAll(m, " ", "")] = int64(256 + i)
	}
	vocab["Ġhello"] = 300 // only reachable by whole-word lookup (no merge makes it)
	doc := map[string]any{
		"added_tokens": []map[string]any{
			{"id": 400, "content": "<|begin_of_text|>"},
			{"id": 401, "content": "<|eot_id|>"},
		},
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]string{"Regex": llamaPattern}, "behavior": "Isolated", "invert": false},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": false},
		}},
		"post_processor": map[string]any{"type": "TemplateProcessing", "single": []any{
			map[string]any{"SpecialToken": map[string]any{"id": "<|begin_of_text|>", "type_id": 0}},
			map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}},
		}},
		"model": map[string]any{"type": "BPE", "vocab": vocab, "merges": merges, "ignore_merges": ignoreMerges},
	}
	dir := t.TempDir()
	raw, _ := json.Marshal(doc)
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestLlamaEncode(t *testing.T) {
	tok, err := LoadLlama(writeLlama(t, false))
	if err != nil {
		t.Fatal(err)
	}
	got, err := tok.Encode("hello world<|eot_id|>12")
	if err != nil {
		t.Fatal(err)
	}
	// BOS, "hello" by merges, " world" by merges, the added token, "12".
	want := []int64{400, 259, 264, 401, 265}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	// Bytes outside the merges stay single byte-level symbols: "é" is two bytes.
	got, _ = tok.Encode("é")
	if want := []int64{400, 0xC3, 0xA9}; !reflect.DeepEqual(got, want) {
		t.Errorf("é: got %v, want %v", got, want)
	}
}

func TestLlamaIgnoreMerges(t *testing.T) {
	with, _ := LoadLlama(writeLlama(t, true))
	without, _ := LoadLlama(writeLlama(t, false))
	a, _ := with.Encode("x hello")
	b, _ := without.Encode("x hello")
	if a[len(a)-1] != 300 {
		t.Errorf("ignore_merges should take the whole word Ġhello (300): %v", a)
	}
	if b[len(b)-1] == 300 {
		t.Errorf("without ignore_merges the word is merged: %v", b)
	}
}

func TestLlamaBadFiles(t *testing.T) {
	dir := t.TempDir()
	if _, err := LoadLlama(dir); err == nil || !strings.Contains(err.Error(), "tokenizer.json") {
		t.Errorf("missing file: %v", err)
	}
	os.WriteFile(filepath.Join(dir, "tokenizer.json"), []byte("{"), 0o644)
	if _, err := LoadLlama(dir); err == nil || !strings.Contains(err.Error(), "tokenizer.json") {
		t.Errorf("broken json: %v", err)
	}
	os.WriteFile(filepath.Join(dir, "tokenizer.json"), []byte(`{"model":{"type":"Unigram","vocab":{"a":1}}}`), 0o644)
	if _, err := LoadLlama(dir); err == nil || !strings.Contains(err.Error(), "BPE") {
		t.Errorf("wrong model type: %v", err)
	}
}

func writeCLIP(t *testing.T) string {
	vocab := map[string]int64{}
	n := int64(0)
	add := func(s string) {
		if _, ok := vocab[s]; !ok {
			vocab[s] = n
			n++
		}
	}
	for b := 0; b < 256; b++ {
		add(string(byteToRune[b]))
	}
	for b := 0; b < 256; b++ {
		add(string(byteToRune[b]) + "</w>")
	}
	merges := []string{"a t</w>", "c at</w>", "d o", "do g</w>"}
	for _, m := range merges {
		add(strings.ReplaceAll(m, " ", ""))
	}
	add("<|startoftext|>")
	add("<|endoftext|>")
	dir := t.TempDir()
	raw, _ := json.Marshal(vocab)
	os.WriteFile(filepath.Join(dir, "vocab.json"), raw, 0o644)
	os.WriteFile(filepath.Join(dir, "merges.txt"), []byte("#version: 0.2\n"+strings.Join(merges, "\n")+"\n"), 0o644)
	return dir
}

func TestCLIPEncode(t *testing.T) {
	tok, err := LoadCLIP(writeCLIP(t))
	if err != nil {
		t.Fatal(err)
	}
	ids, err := tok.Encode("  A  Cat,\tDOG! ")
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != 77 {
		t.Fatalf("%d ids, want 77", len(ids))
	}
	v := func(s string) int64 { return tok.vocab[s] }
	want := []int64{tok.BOS, v("a</w>"), v("cat</w>"), v(",</w>"), v("dog</w>"), v("!</w>"), tok.EOS, tok.PadID}
	if !reflect.DeepEqual(ids[:len(want)], want) {
		t.Errorf("got %v, want %v", ids[:len(want)], want)
	}
	long, _ := tok.Encode(strings.Repeat("dog ", 100))
	if len(long) != 77 || long[76] != tok.EOS || long[75] != v("dog</w>") {
		t.Errorf("truncation keeps BOS … EOS in 77 tokens: %v", long[70:])
	}
}
