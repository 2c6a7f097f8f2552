package tokenizer

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"unicode"

	"golang.org/x/text/unicode/norm"

	"github.com/framepack-go/framepack/internal/jsonobj"
)

// CLIP is transformers' slow CLIPTokenizer without ftfy (what FramePack
// runs): BERT's BasicTokenizer cleaning and lower-casing, CLIP's regex,
// byte-level BPE with "</w>" word ends, BOS/EOS, truncation and padding to
// MaxLength.
type CLIP struct {
	vocab     map[string]int64
	ranks     map[string]int
	BOS, EOS  int64
	PadID     int64
	MaxLength int
}

const (
	clipBOS = "<|startoftext|>"
	clipEOS = "<|endoftext|>"
	// clipMaxMerges is how many merges CLIPTokenizer reads (49152 − 256 − 2).
	clipMaxMerges = 49152 - 256 - 2
)

// clipPattern is CLIP's pre-tokenizer regex on the lower-cased text. The
// reference matches it case-insensitively with Python's regex module, which
// leaves the letter and number classes as they are and puts U+0345 (it
// case-folds to ι) in no class at all, so the reference drops it; Go's (?i)
// would add U+0345 to \p{L}, hence (?i) only on the literals here.
var clipPattern = regexp.MustCompile(`(?i:<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d)|\p{L}+|\p{N}|[^\s\p{L}\p{N}\x{0345}]+`)

// LoadCLIP reads dir/vocab.json and dir/merges.txt.
func LoadCLIP(dir string) (*CLIP, error) {
	vpath := filepath.Join(dir, "vocab.json")
	mpath := filepath.Join(dir, "merges.txt")
	raw, err := os.ReadFile(vpath)
	if err != nil {
		return nil, fileProblem(dir, "CLIP", err, "vocab.json", "merges.txt")
	}
	t := &CLIP{ranks: map[string]int{}, MaxLength: 77}
	if err := jsonobj.Check(raw); err != nil {
		return nil, fmt.Errorf("tokenizer: %s %v", vpath, err)
	}
	if err := json.Unmarshal(raw, &t.vocab); err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", vpath, err)
	}
	raw, err = os.ReadFile(mpath)
	if err != nil {
		return nil, fileProblem(dir, "CLIP", err, "merges.txt")
	}
	// As CLIPTokenizer reads it: the lines after the "#version" line, at
	// most clipMaxMerges of them; a merge's rank is its line's index (a
	// repeated merge takes its last rank).
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")[1:]
	if len(lines) > clipMaxMerges {
		lines = lines[:clipMaxMerges]
	}
	for i, line := range lines {
		f := strings.Fields(line)
		if len(f) != 2 {
			return nil, fmt.Errorf("tokenizer: %s:%d: a merge is two symbols, have %q", mpath, i+2, line)
		}
		t.ranks[f[0]+" "+f[1]] = i
	}
	var ok1, ok2 bool
	t.BOS, ok1 = t.vocab[clipBOS]
	t.EOS, ok2 = t.vocab[clipEOS]
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("tokenizer: %s: %s or %s is missing", vpath, clipBOS, clipEOS)
	}
	t.PadID = t.EOS
	return t, nil
}

// Encode returns BOS + tokens + EOS, truncated to MaxLength and padded with
// PadID to MaxLength, as the pipeline calls it (padding "max_length").
func (t *CLIP) Encode(text string) ([]int64, error) {
	var toks []int64
	// The special tokens' exact text is split out before anything else, as
	// the slow tokenizer does with its added tokens.
	for _, part := range splitOn(text, clipBOS, clipEOS) {
		switch part {
		case "":
			continue
		case clipBOS, clipEOS:
			toks = append(toks, t.vocab[part])
			continue
		}
		for _, w := range clipPattern.FindAllString(basicClean(part), -1) {
			if w == clipBOS || w == clipEOS { // the BPE cache maps these to themselves
				toks = append(toks, t.vocab[w])
				continue
			}
			sym := ByteLevel(w)
			sym[len(sym)-1] += "</w>"
			for _, s := range bpe(sym, t.ranks, true) {
				id, ok := t.vocab[s]
				if !ok {
					return nil, unknownSymbol(strings.TrimSuffix(s, "</w>"), w, "CLIP vocabulary")
				}
				toks = append(toks, id)
			}
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

// splitOn cuts text around every occurrence of the given strings (which
// must not overlap one another), keeping them as parts of their own.
func splitOn(text string, seps ...string) []string {
	var parts []string
	start := 0
	for i := 0; i < len(text); {
		hit := ""
		for _, s := range seps {
			if strings.HasPrefix(text[i:], s) {
				hit = s
				break
			}
		}
		if hit == "" {
			i++
			continue
		}
		parts = append(parts, text[start:i], hit)
		i += len(hit)
		start = i
	}
	return append(parts, text[start:])
}

// basicClean is transformers' BasicTokenizer as CLIPTokenizer configures it
// (lower case, accents kept, no punctuation split), in its order: control
// and unassigned characters dropped, whitespace made spaces, CJK characters
// isolated, then NFC, then each word lower-cased as Python's str.lower does;
// the words are joined by single spaces.
func basicClean(text string) string {
	var sb strings.Builder
	for _, r := range text {
		switch {
		case r == 0 || r == 0xFFFD || isControl(r):
		case r == ' ' || r == '\t' || r == '\n' || r == '\r' || unicode.Is(unicode.Zs, r):
			sb.WriteByte(' ')
		case isCJK(r):
			sb.WriteByte(' ')
			sb.WriteRune(r)
			sb.WriteByte(' ')
		default:
			sb.WriteRune(r)
		}
	}
	words := strings.Fields(norm.NFC.String(sb.String()))
	for i, w := range words {
		words[i] = pyLower(w)
	}
	return strings.Join(words, " ")
}

// isControl is BERT's test: every "C" category (Cc, Cf, Cs, Co, and
// unassigned code points) except tab, newline and carriage return.
func isControl(r rune) bool {
	if r == '\t' || r == '\n' || r == '\r' {
		return false
	}
	return unicode.In(r, unicode.C) || !unicode.In(r, unicode.L, unicode.M, unicode.N, unicode.P, unicode.S, unicode.Z)
}

func isCJK(r rune) bool {
	return (r >= 0x4E00 && r <= 0x9FFF) || (r >= 0x3400 && r <= 0x4DBF) || (r >= 0x20000 && r <= 0x2A6DF) ||
		(r >= 0x2A700 && r <= 0x2B73F) || (r >= 0x2B740 && r <= 0x2B81F) || (r >= 0x2B820 && r <= 0x2CEAF) ||
		(r >= 0xF900 && r <= 0xFAFF) || (r >= 0x2F800 && r <= 0x2FA1F)
}

// pyLower is Python's str.lower: the simple lower-case mapping, plus the two
// full mappings it applies, İ → "i̇" and a capital sigma that ends a word
// → ς (Unicode's Final_Sigma context).
func pyLower(s string) string {
	rs := []rune(s)
	var sb strings.Builder
	for i, r := range rs {
		switch r {
		case 'İ':
			sb.WriteString("i\u0307")
		case 'Σ':
			if finalSigma(rs, i) {
				sb.WriteRune('ς')
			} else {
				sb.WriteRune('σ')
			}
		default:
			sb.WriteRune(unicode.ToLower(r))
		}
	}
	return sb.String()
}

// finalSigma: a cased letter before rs[i] and none after it, skipping
// case-ignorable characters both ways.
func finalSigma(rs []rune, i int) bool {
	j := i - 1
	for j >= 0 && caseIgnorable(rs[j]) {
		j--
	}
	if j < 0 || !cased(rs[j]) {
		return false
	}
	j = i + 1
	for j < len(rs) && caseIgnorable(rs[j]) {
		j++
	}
	return j == len(rs) || !cased(rs[j])
}

func cased(r rune) bool {
	return unicode.In(r, unicode.Lu, unicode.Ll, unicode.Lt, unicode.Other_Lowercase, unicode.Other_Uppercase)
}

// caseIgnorable is Unicode's Case_Ignorable: Mn, Me, Cf, Lm, Sk and the
// word-break MidLetter, MidNumLet and Single_Quote characters.
func caseIgnorable(r rune) bool {
	switch r {
	case '\'', '.', ':', '\u00B7', '\u0387', '\u055F', '\u05F4', '\u2018', '\u2019', '\u2024', '\u2027',
		'\uFE13', '\uFE52', '\uFE55', '\uFF07', '\uFF0E', '\uFF1A':
		return true
	}
	return unicode.In(r, unicode.Mn, unicode.Me, unicode.Cf, unicode.Lm, unicode.Sk)
}
