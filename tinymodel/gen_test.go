package tinymodel

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/dlclark/regexp2"

	"github.com/framepack-go/framepack/tokenizer"
)

// The tiny tokenizers are generated from Corpus (TestTokenizerFiles checks
// the files in model/ against GenerateTokenizers and rewrites them with
// -update). The LLaMA vocabulary gets its frequent whole words, CLIP's
// merges learnt by plain BPE training, so the template and common prompt
// words take few tokens, as with the real tokenizers; every other text
// still tokenizes, byte by byte.
var corpus = Corpus()

// LLaMA: 300 ids. 0–255 are the byte-level symbols (GPT-2's byte-to-rune
// map, as LLaMA-3's tokenizer.json has them), then whole words, then the
// special tokens the prompt template and padding need.
const (
	llamaVocab = 300
	llamaBOS   = "<|begin_of_text|>"
)

var llamaSpecial = []string{llamaBOS, "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<pad>"}

// CLIP: 200 ids. CLIP lower-cases its input, so the byte symbols are the 68
// printable ASCII characters that are not upper-case letters, each alone
// and with "</w>" (the last symbol of a word), then learnt merges, then
// <|startoftext|> and <|endoftext|> last — the end token must be the
// largest id, since the legacy config (eos_token_id 2) pools at
// argmax(ids). Text outside printable ASCII has no symbol: the tiny CLIP
// tokenizer is for smoke runs with ASCII prompts.
const clipVocab = 200

// GenerateTokenizers returns the tiny model's tokenizer files by path
// relative to the model folder: tokenizer/tokenizer.json,
// tokenizer_2/vocab.json and tokenizer_2/merges.txt.
func GenerateTokenizers() (map[string][]byte, error) {
	llama, err := llamaTokenizer()
	if err != nil {
		return nil, err
	}
	vocab, merges, err := clipTokenizer()
	if err != nil {
		return nil, err
	}
	return map[string][]byte{
		"tokenizer/tokenizer.json": llama,
		"tokenizer_2/vocab.json":   vocab,
		"tokenizer_2/merges.txt":   merges,
	}, nil
}

func llamaTokenizer() ([]byte, error) {
	re := regexp2.MustCompile(tokenizer.LlamaPattern, regexp2.Unicode)
	var words [][]string
	for _, text := range corpus {
		for _, part := range tokenizer.SplitSpecial(text, llamaSpecial) {
			for m, _ := re.FindStringMatch(part); m != nil; m, _ = re.FindNextMatch(m) {
				words = append(words, tokenizer.ByteLevel(m.String()))
			}
		}
	}
	vocab := map[string]int{}
	for b := 0; b < 256; b++ {
		vocab[string(tokenizer.ByteRune(byte(b)))] = b
	}
	// LLaMA-3's BPE looks a whole pre-token up in the vocabulary before
	// merging (ignore_merges), so the ids go to the words that save the
	// most tokens; that keeps the template prefix short.
	for _, w := range wholeWords(words, llamaVocab-256-len(llamaSpecial)) {
		vocab[w] = len(vocab)
	}
	for i, s := range llamaSpecial {
		vocab[s] = llamaVocab - len(llamaSpecial) + i
	}
	doc := tokenizer.LlamaDocument(vocab, []string{}, llamaSpecial, llamaBOS)
	return marshal(doc)
}

func clipTokenizer() (vocabJSON, mergesTxt []byte, err error) {
	var chars []string
	for b := byte('!'); b <= '~'; b++ {
		if b < 'A' || b > 'Z' {
			chars = append(chars, string(rune(b)))
		}
	}
	vocab := map[string]int{}
	for _, c := range chars {
		vocab[c] = len(vocab)
	}
	for _, c := range chars {
		vocab[c+"</w>"] = len(vocab)
	}
	// CLIP's pre-tokenizer on lower-cased text: letters, single digits,
	// runs of other symbols.
	re := regexp2.MustCompile(`'s|'t|'re|'ve|'m|'ll|'d|\p{L}+|\p{N}|[^\s\p{L}\p{N}]+`, regexp2.Unicode)
	var words [][]string
	for _, text := range corpus {
		for _, part := range tokenizer.SplitSpecial(text, llamaSpecial) {
			for m, _ := re.FindStringMatch(strings.ToLower(part)); m != nil; m, _ = re.FindNextMatch(m) {
				w := tokenizer.ByteLevel(m.String())
				w[len(w)-1] += "</w>"
				words = append(words, w)
			}
		}
	}
	merges := train(words, clipVocab-len(vocab)-2, vocab)
	vocab["<|startoftext|>"] = clipVocab - 2
	vocab["<|endoftext|>"] = clipVocab - 1
	if vocabJSON, err = marshal(vocab); err != nil {
		return nil, nil, err
	}
	var sb strings.Builder
	sb.WriteString("#version: 0.2\n")
	for _, m := range merges {
		sb.WriteString(m + "\n")
	}
	return vocabJSON, []byte(sb.String()), nil
}

// train learns n merges from words by byte-pair encoding: repeatedly the
// most frequent adjacent pair (ties: the smaller pair string) becomes a new
// symbol with the next id in vocab.
func train(words [][]string, n int, vocab map[string]int) []string {
	var merges []string
	for len(merges) < n {
		counts := map[[2]string]int{}
		for _, w := range words {
			for i := 0; i+1 < len(w); i++ {
				counts[[2]string{w[i], w[i+1]}]++
			}
		}
		var best [2]string
		bestN := 0
		for p, c := range counts {
			if _, dup := vocab[p[0]+p[1]]; dup {
				continue
			}
			if c > bestN || (c == bestN && p[0]+" "+p[1] < best[0]+" "+best[1]) {
				best, bestN = p, c
			}
		}
		if bestN < 2 {
			break
		}
		merged := best[0] + best[1]
		vocab[merged] = len(vocab)
		merges = append(merges, best[0]+" "+best[1])
		for wi, w := range words {
			var out []string
			for i := 0; i < len(w); i++ {
				if i+1 < len(w) && w[i] == best[0] && w[i+1] == best[1] {
					out = append(out, merged)
					i++
				} else {
					out = append(out, w[i])
				}
			}
			words[wi] = out
		}
	}
	return merges
}

// wholeWords picks the n multi-byte words that save the most tokens
// (count × (length − 1); ties by the word).
func wholeWords(words [][]string, n int) []string {
	count := map[string]int{}
	length := map[string]int{}
	for _, w := range words {
		if len(w) > 1 {
			k := strings.Join(w, "")
			count[k]++
			length[k] = len(w)
		}
	}
	var list []string
	for k := range count {
		list = append(list, k)
	}
	gain := func(k string) int { return count[k] * (length[k] - 1) }
	sort.Slice(list, func(i, j int) bool {
		if gain(list[i]) != gain(list[j]) {
			return gain(list[i]) > gain(list[j])
		}
		return list[i] < list[j]
	})
	return list[:min(n, len(list))]
}

// marshal is json with sorted keys, two-space indent and a final newline,
// without HTML escaping (the tokens contain < and >).
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("tinymodel: %w", err)
	}
	return buf.Bytes(), nil
}

var update = flag.Bool("update", false, "rewrite the generated tokenizer files in model/")

// TestTokenizerFiles checks that the embedded tokenizer files are what
// GenerateTokenizers makes (go test -run TestTokenizerFiles -update
// rewrites them).
func TestTokenizerFiles(t *testing.T) {
	gen, err := GenerateTokenizers()
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range gen {
		dst := filepath.Join("model", filepath.FromSlash(p))
		if *update {
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(dst, want, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		have, err := fs.ReadFile(FS(), p)
		if err != nil {
			t.Fatalf("%v (run go test -run TestTokenizerFiles -update)", err)
		}
		if !bytes.Equal(have, want) {
			t.Errorf("%s differs from what the generator makes (run go test -run TestTokenizerFiles -update)", p)
		}
	}
}
