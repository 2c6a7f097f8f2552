package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// writeLlama writes a small tokenizer.json: every byte symbol, a few merges,
// two added tokens and a BOS template.
func writeLlama(t *testing.T, ignoreMerges bool) string {
	return writeLlamaMerges(t, ignoreMerges, []string{"h e", "l l", "he ll", "hell o", "Ġ w", "Ġw o", "Ġwo r", "Ġwor l", "Ġworl d", "1 2"})
}

// writeLlamaMerges is writeLlama with other merges; merge i makes id 256+i.
func writeLlamaMerges(t *testing.T, ignoreMerges bool, merges []string) string {
	vocab := map[string]int64{}
	for b := 0; b < 256; b++ {
		vocab[string(byteToRune[b])] = int64(b)
	}
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
			map[string]any{"type": "Split", "pattern": map[string]string{"Regex": LlamaPattern}, "behavior": "Isolated", "invert": false},
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

// Hugging Face merges the leftmost lowest-ranked pair one at a time: in
// "abab" with merges [ab+a, a+b] the first a+b makes "ab", whose merge with
// the next "a" ranks lower than the second a+b. Python's CLIP merges every
// occurrence of a pair at once.
func TestBPEMergeOrder(t *testing.T) {
	ranks := map[string]int{"ab a": 0, "a b": 1}
	sym := func() []string { return []string{"a", "b", "a", "b"} }
	if got := bpe(sym(), ranks, false); !reflect.DeepEqual(got, []string{"aba", "b"}) {
		t.Errorf("leftmost: %q, want [aba b]", got)
	}
	if got := bpe(sym(), ranks, true); !reflect.DeepEqual(got, []string{"ab", "ab"}) {
		t.Errorf("every occurrence: %q, want [ab ab]", got)
	}
	tok, err := LoadLlama(writeLlamaMerges(t, false, []string{"ab a", "a b"}))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := tok.Encode("abab")
	if want := []int64{400, 256, 'b'}; !reflect.DeepEqual(got, want) {
		t.Errorf("Llama \"abab\": %v, want %v", got, want)
	}
}

// tokenizer_config.json decides the special tokens, as LlamaTokenizerFast
// rebuilds the post-processor from it.
func TestLlamaConfigSpecials(t *testing.T) {
	dir := writeLlama(t, false)
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	encode := func() ([]int64, error) {
		tok, err := LoadLlama(dir)
		if err != nil {
			return nil, err
		}
		return tok.Encode("12")
	}
	if got, _ := encode(); !reflect.DeepEqual(got, []int64{400, 265}) {
		t.Errorf("template of tokenizer.json: %v", got)
	}
	write("tokenizer_config.json", `{"bos_token": {"content": "<|begin_of_text|>"}, "eos_token": "<|eot_id|>", "add_eos_token": true}`)
	if got, _ := encode(); !reflect.DeepEqual(got, []int64{400, 265, 401}) {
		t.Errorf("add_eos_token: %v, want BOS 12 EOS", got)
	}
	write("tokenizer_config.json", `{"bos_token": "<|begin_of_text|>", "add_bos_token": false}`)
	if got, _ := encode(); !reflect.DeepEqual(got, []int64{265}) {
		t.Errorf("add_bos_token false: %v", got)
	}
	write("tokenizer_config.json", `{"bos_token": "<s>"}`)
	if _, err := encode(); err == nil || !strings.Contains(err.Error(), "<s>") {
		t.Errorf("unknown BOS: %v", err)
	}
	write("special_tokens_map.json", `{"bos_token": "<|eot_id|>"}`)
	if got, _ := encode(); !reflect.DeepEqual(got, []int64{401, 265}) {
		t.Errorf("special_tokens_map.json names the BOS: %v", got)
	}
	write("tokenizer_config.json", `{`)
	if _, err := encode(); err == nil || !strings.Contains(err.Error(), "tokenizer_config.json") {
		t.Errorf("broken config: %v", err)
	}
}

// The slow CLIPTokenizer's cleaning: BERT's control characters (all of
// category C) dropped before NFC, Python's lower-casing, the special tokens'
// text, and U+0345, which its regex matches with no class.
func TestCLIPCleaning(t *testing.T) {
	tok, err := LoadCLIP(writeCLIP(t))
	if err != nil {
		t.Fatal(err)
	}
	word := func(s string) []int64 {
		var ids []int64
		sym := ByteLevel(s)
		sym[len(sym)-1] += "</w>"
		for _, x := range sym {
			ids = append(ids, tok.vocab[x])
		}
		return ids
	}
	cat := func(parts ...[]int64) []int64 {
		out := []int64{tok.BOS}
		for _, p := range parts {
			out = append(out, p...)
		}
		return append(out, tok.EOS)
	}
	for _, c := range []struct {
		in   string
		want []int64
	}{
		{"ΣΑΣ", cat(word("σας"))},
		{"İ", cat(word("i"), word("\u0307"))},
		{"x\vy\fz\u0085w\u00adv\u200bu\ufefft\ue000s", cat(word("xyzwvuts"))},
		{"e\u200b\u0301", cat(word("é"))},
		{"ε\u0345", cat(word("ε"))},
		{"x<|startoftext|>y", cat(word("x"), []int64{tok.BOS}, word("y"))},
		{"'<|endoftext|>", cat(word("'"), []int64{tok.EOS})},
		{"<|EndOfText|>", cat([]int64{tok.EOS})},
		{"猫狗", cat(word("猫"), word("狗"))},
	} {
		got, err := tok.Encode(c.in)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got[:len(c.want)], c.want) || got[len(c.want)] != tok.PadID {
			t.Errorf("%q: got %v, want %v", c.in, got[:len(c.want)+1], c.want)
		}
	}
}

// pyLower against Python's str.lower.
func TestPyLower(t *testing.T) {
	for in, want := range map[string]string{
		"ΣΑΣ":       "σας",
		"ΟΔΥΣΣΕΥΣ.": "οδυσσευς.",
		"Σ":         "σ",
		"AΣB":       "aσb",
		"ΑΣ\u0301":  "ας\u0301",
		"İstanbul":  "i\u0307stanbul",
		"ǅemal":     "ǆemal",
		"STRASSE":   "strasse",
	} {
		if got := pyLower(in); got != want {
			t.Errorf("pyLower(%q) = %q, want %q", in, got, want)
		}
	}
}

// A tokenizer folder without its files gives one error naming the folder
// and the missing files.
func TestTokenizerFolderWithoutFiles(t *testing.T) {
	empty := t.TempDir()
	if _, err := LoadLlama(empty); err == nil || !strings.Contains(err.Error(), empty) || !strings.Contains(err.Error(), "has no tokenizer.json") {
		t.Errorf("LLaMA, empty folder: %v", err)
	}
	if _, err := LoadCLIP(empty); err == nil || !strings.Contains(err.Error(), "has no vocab.json and no merges.txt") {
		t.Errorf("CLIP, empty folder: %v", err)
	}
	if err := os.WriteFile(filepath.Join(empty, "vocab.json"), []byte(`{"<|startoftext|>": 0, "<|endoftext|>": 1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadCLIP(empty); err == nil || !strings.Contains(err.Error(), "has no merges.txt") {
		t.Errorf("CLIP without merges.txt: %v", err)
	}
	gone := filepath.Join(empty, "nope")
	if _, err := LoadLlama(gone); err == nil || !strings.Contains(err.Error(), gone+" does not exist") {
		t.Errorf("missing folder: %v", err)
	}
}

func TestSplitSpecial(t *testing.T) {
	got := SplitSpecial("<s>one<|x|>two<s><|x|>three", []string{"<s>", "<|x|>"})
	if !reflect.DeepEqual(got, []string{"one", "two", "three"}) {
		t.Errorf("SplitSpecial = %q", got)
	}
}

// TestUnknownSymbolError: a prompt's text the vocabulary lacks is named as
// typed, not as its byte-level symbols, which spell a UTF-8 'ä' as the
// Latin-1 "Ã¤".
func TestUnknownSymbolError(t *testing.T) {
	llama, err := LoadLlama(writeLlama(t, false))
	if err != nil {
		t.Fatal(err)
	}
	delete(llama.vocab, string(byteToRune[0xC3])) // the first byte of 'ä'
	clip, err := LoadCLIP(writeCLIP(t))
	if err != nil {
		t.Fatal(err)
	}
	delete(clip.vocab, string(byteToRune[0xC3]))
	for name, encode := range map[string]func(string) ([]int64, error){"llama": llama.Encode, "clip": clip.Encode} {
		_, err := encode("ein Bär")
		if err == nil || !strings.Contains(err.Error(), "ä") || strings.Contains(err.Error(), "Ã") {
			t.Errorf("%s: %v, want an error naming the word with its 'ä'", name, err)
		}
	}
	if got := byteText(string([]rune{byteToRune[0xC3], byteToRune[0xA4]}) + "x"); got != "äx" {
		t.Errorf("byteText = %q, want \"äx\"", got)
	}
}
