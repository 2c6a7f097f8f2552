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
	matchReference(t, "LLaMA", ref.Prompts, ref.Llama, len(ref.Prefix), func(p string) ([]int64, error) {
		return tok.Encode(strings.Replace(ref.Template, "{}", p, 1))
	})
}

// matchReference encodes each prompt with encode, compares the ids with
// want's (a mismatch is shown after the first skip tokens, which the
// template gives all prompts) and logs how many of the tokenizer's match.
func matchReference(t *testing.T, name string, prompts []string, want [][]int64, skip int, encode func(p string) ([]int64, error)) {
	t.Helper()
	match := 0
	for i, p := range prompts {
		got, err := encode(p)
		if err != nil {
			t.Errorf("prompt %d %q: %v", i, p, err)
			continue
		}
		if reflect.DeepEqual(got, want[i]) {
			match++
			continue
		}
		n := min(skip, len(got), len(want[i]))
		t.Errorf("prompt %d %q, after %d tokens:\n got %v\nwant %v", i, p, n, got[n:], want[i][n:])
	}
	t.Logf("%s: %d/%d prompts match the reference", name, match, len(prompts))
}

func TestRealCLIPMatchesReference(t *testing.T) {
	dir, ref := realTokenizerDir(t)
	tok, err := LoadCLIP(filepath.Join(dir, "tokenizer_2"))
	if err != nil {
		t.Fatal(err)
	}
	matchReference(t, "CLIP", ref.Prompts, ref.CLIP, 0, tok.Encode)
}
