package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// referenceIDs is testdata/reference_ids.json: prompts and the ids the
// reference tokenizers gave for them (its "source" field says how).
type referenceIDs struct {
	Source   string    `json:"source"`
	Template string    `json:"template"`
	Prompts  []string  `json:"prompts"`
	Llama    [][]int64 `json:"llama"`
	Prefix   []int64   `json:"llama_template_prefix"`
	CLIP     [][]int64 `json:"clip"`
}

// realTokenizerDir is $FRAMEPACK_TOKENIZER_DIR, a folder laid out like the
// HunyuanVideo model (tokenizer/tokenizer.json, tokenizer_2/vocab.json +
// merges.txt), with the real LLaMA-3 and CLIP vocabularies; the tests skip
// without it.
func realTokenizerDir(t *testing.T) (string, *referenceIDs) {
	dir := os.Getenv("FRAMEPACK_TOKENIZER_DIR")
	if dir == "" {
		t.Skip("FRAMEPACK_TOKENIZER_DIR is not set: it names a folder with the real tokenizer/ and tokenizer_2/ files")
	}
	raw, err := os.ReadFile(filepath.Join("testdata", "reference_ids.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref referenceIDs
	if err := json.Unmarshal(raw, &ref); err != nil {
		t.Fatal(err)
	}
	return dir, &ref
}

func TestRealLlamaMatchesReference(t *testing.T) {
	dir, ref := realTokenizerDir(t)
	tok, err := LoadLlama(filepath.Join(dir, "tokenizer"))
	if err != nil {
		t.Fatal(err)
	}
	prefix, _, _ := strings.Cut(ref.Template, "{}")
	if got, err := tok.Encode(prefix); err != nil || !reflect.DeepEqual(got, ref.Prefix) {
		t.Errorf("template prefix: got %v (%v), want %v", got, err, ref.Prefix)
	}
	if len(ref.Prefix) != 95 {
		t.Errorf("the reference's template prefix has %d tokens, want crop_start 95", len(ref.Prefix))
	}
	match := 0
	for i, p := range ref.Prompts {
		got, err := tok.Encode(strings.Replace(ref.Template, "{}", p, 1))
		if err != nil {
			t.Errorf("prompt %d %q: %v", i, p, err)
			continue
		}
		if reflect.DeepEqual(got, ref.Llama[i]) {
			match++
		} else {
			n := min(len(ref.Prefix), len(got), len(ref.Llama[i]))
			t.Errorf("prompt %d %q, after %d tokens:\n got %v\nwant %v", i, p, n, got[n:], ref.Llama[i][n:])
		}
	}
	t.Logf("LLaMA: %d/%d prompts match the reference", match, len(ref.Prompts))
}

func TestRealCLIPMatchesReference(t *testing.T) {
	dir, ref := realTokenizerDir(t)
	tok, err := LoadCLIP(filepath.Join(dir, "tokenizer_2"))
	if err != nil {
		t.Fatal(err)
	}
	match := 0
	for i, p := range ref.Prompts {
		got, err := tok.Encode(p)
		if err != nil {
			t.Errorf("prompt %d %q: %v", i, p, err)
			continue
		}
		if reflect.DeepEqual(got, ref.CLIP[i]) {
			match++
		} else {
			t.Errorf("prompt %d %q:\n got %v\nwant %v", i, p, got, ref.CLIP[i])
		}
	}
	t.Logf("CLIP: %d/%d prompts match the reference", match, len(ref.Prompts))
}
