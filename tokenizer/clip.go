package tokenizer

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"unicode"

	"golang.org/x/text/unicode/norm"
)

// CLIP is transformers' CLIPTokenizer without ftfy (what FramePack runs):
// BERT-style basic cleaning and lower-casing, CLIP's regex, byte-level BPE
// with "</w>" word ends, BOS/EOS, truncation and padding to MaxLength.
type CLIP struct {
	vocab     map[string]int64
	ranks     map[string]int
	BOS, EOS  int64
	PadID     int64
	MaxLength int
}

// clipPattern is CLIP's pre-tokenizer regex (matched case-insensitively on
// the lower-cased text).
var clipPattern = regexp.MustCompile(`(?i)<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|\p{L}+|\p{N}|[^\s\p{L}\p{N}]+`)

// LoadCLIP reads dir/vocab.json and dir/merges.txt.
func LoadCLIP(dir string) (*CLIP, error) {
	vpath := filepath.Join(dir, "vocab.json")
	raw, err := os.ReadFile(vpath)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	t := &CLIP{ranks: map[string]int{}, MaxLength: 77}
	if err := json.Unmarshal(raw, &t.vocab); err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", vpath, err)
	}
	mpath := filepath.Join(dir, "merges.txt")
	f, err := os.Open(mpath)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	line := 0
	// CLIPTokenizer keeps the merges after the "#version" line, at most
	// 49152 − 256 − 2 of them.
	for sc.Scan() {
		line++
		if line == 1 || len(t.ranks) >= 49152-256-2 {
			continue
		}
		m := strings.TrimSpace(sc.Text())
		if m == "" {
			continue
		}
		if len(strings.Fields(m)) != 2 {
			return nil, fmt.Errorf("tokenizer: %s:%d: a merge is two symbols, have %q", mpath, line, m)
		}
		if _, dup := t.ranks[m]; !dup {
			t.ranks[m] = len(t.ranks)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", mpath, err)
	}
	var ok1, ok2 bool
	t.BOS, ok1 = t.vocab["<|startoftext|>"]
	t.EOS, ok2 = t.vocab["<|endoftext|>"]
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("tokenizer: %s: <|startoftext|> or <|endoftext|> is missing", vpath)
	}
	t.PadID = t.EOS
	return t, nil
}

// Encode returns BOS + tokens + EOS, truncated to MaxLength and padded with
// PadID to MaxLength, as the pipeline calls it (padding "max_length").
func (t *CLIP) Encode(text string) ([]int64, error) {
	var toks []int64
	for _, w := range clipPattern.FindAllString(cleanBasic(text), -1) {
		sym := byteLevel(w)
		sym[len(sym)-1] += "</w>"
		for _, s := range bpe(sym, t.ranks) {
			id, ok := t.vocab[s]
			if !ok {
				return nil, fmt.Errorf("tokenizer: symbol %q is not in the CLIP vocabulary", s)
			}
			toks = append(toks, id)
		}
	}
	if n := t.MaxLength - 2; len(toks) > n {
		toks = toks[:n]
	}
	ids := append(append([]int64{t.BOS}, toks...), t.EOS)
	for len(ids) < t.MaxLength {
		ids = append(ids, t.PadID)
	}
	return ids, nil
}

// cleanBasic is transformers' BasicTokenizer as CLIPTokenizer configures it
// (lower case, accents kept, no punctuation split): NFC, control characters
// dropped, whitespace normalised, CJK characters isolated, words lower-cased
// and joined by single spaces.
func cleanBasic(text string) string {
	text = norm.NFC.String(text)
	var sb strings.Builder
	for _, r := range text {
		switch {
		case r == 0 || r == 0xFFFD || (isControl(r) && !unicode.IsSpace(r)):
			continue
		case unicode.IsSpace(r):
			sb.WriteByte(' ')
		case isCJK(r):
			sb.WriteByte(' ')
			sb.WriteRune(r)
			sb.WriteByte(' ')
		default:
			sb.WriteRune(r)
		}
	}
	words := strings.Fields(sb.String())
	for i, w := range words {
		words[i] = strings.ToLower(w)
	}
	return strings.Join(words, " ")
}

func isControl(r rune) bool {
	if r == '\t' || r == '\n' || r == '\r' {
		return false
	}
	return unicode.In(r, unicode.Cc, unicode.Cf)
}

func isCJK(r rune) bool {
	return (r >= 0x4E00 && r <= 0x9FFF) || (r >= 0x3400 && r <= 0x4DBF) || (r >= 0x20000 && r <= 0x2A6DF) ||
		(r >= 0x2A700 && r <= 0x2B73F) || (r >= 0x2B740 && r <= 0x2B81F) || (r >= 0x2B820 && r <= 0x2CEAF) ||
		(r >= 0xF900 && r <= 0xFAFF) || (r >= 0x2F800 && r <= 0x2FA1F)
}
