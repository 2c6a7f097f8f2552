// Package tokenizer turns prompts into token ids for HunyuanVideo's two text
// encoders: the LLaMA-3 byte-level BPE of tokenizer/tokenizer.json and CLIP's
// BPE of tokenizer_2/vocab.json + merges.txt.
package tokenizer

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"
)

// bpe merges the symbols of one pre-token by rank, lowest first; ranks maps
// "left right" to its merge priority. Two references differ in how they
// apply a merge when its pair occurs more than once: Python's GPT-2/CLIP
// code merges every occurrence, left to right, in one step (everyOccurrence);
// Hugging Face's tokenizers merges only the leftmost one and then looks for
// the lowest-ranked pair again, which matters when a merge made from the new
// symbol ranks below the pair just merged.
func bpe(symbols []string, ranks map[string]int, everyOccurrence bool) []string {
	for len(symbols) > 1 {
		best, at := -1, -1
		for i := 0; i+1 < len(symbols); i++ {
			if r, ok := ranks[symbols[i]+" "+symbols[i+1]]; ok && (best < 0 || r < best) {
				best, at = r, i
			}
		}
		if at < 0 {
			break
		}
		left, right := symbols[at], symbols[at+1]
		out := append(symbols[:at:at], left+right)
		for i := at + 2; i < len(symbols); {
			if everyOccurrence && i+1 < len(symbols) && symbols[i] == left && symbols[i+1] == right {
				out = append(out, left+right)
				i += 2
			} else {
				out = append(out, symbols[i])
				i++
			}
		}
		symbols = out
	}
	return symbols
}

// byteToRune is GPT-2's reversible map from bytes to printable runes.
var byteToRune = func() [256]rune {
	var m [256]rune
	n := 0
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			m[b] = rune(b)
		} else {
			m[b] = rune(256 + n)
			n++
		}
	}
	return m
}()

// ByteRune is the printable rune that byte-level BPE vocabularies (GPT-2's,
// LLaMA-3's, CLIP's) spell byte b with.
func ByteRune(b byte) rune { return byteToRune[b] }

// runeToByte inverts byteToRune.
var runeToByte = func() map[rune]byte {
	m := make(map[rune]byte, 256)
	for b := 0; b < 256; b++ {
		m[byteToRune[b]] = byte(b)
	}
	return m
}()

// byteText is the text a byte-level symbol spells: its runes mapped back to
// the bytes they stand for (a rune outside the map is kept). An error shows
// this, not the symbol, whose runes for a UTF-8 byte read as Latin-1 ('ä'
// is spelt "Ã¤").
func byteText(sym string) string {
	var b []byte
	for _, r := range sym {
		if c, ok := runeToByte[r]; ok {
			b = append(b, c)
		} else {
			b = utf8.AppendRune(b, r)
		}
	}
	return string(b)
}

// unknownSymbol is the error for symbol sym of the prompt's word that the
// vocabulary (what) lacks, naming the text as typed.
func unknownSymbol(sym, word, what string) error {
	if t := byteText(sym); utf8.ValidString(t) {
		return fmt.Errorf("tokenizer: %q of the prompt's %q is not in the %s", t, word, what)
	}
	return fmt.Errorf("tokenizer: a character of the prompt's %q is not in the %s", word, what)
}

// SplitSpecial drops the special tokens from text and returns the pieces
// between them, none empty: the text a vocabulary is learnt from.
func SplitSpecial(text string, special []string) []string {
	parts := []string{text}
	for _, s := range special {
		var next []string
		for _, p := range parts {
			next = append(next, strings.Split(p, s)...)
		}
		parts = next
	}
	var out []string
	for _, p := range parts {
		if p != "" {
			out = append(out, p)
		}
	}
	return out
}

// ByteLevel maps the UTF-8 bytes of s to one symbol per byte (ByteRune).
func ByteLevel(s string) []string {
	out := make([]string, len(s))
	for i := 0; i < len(s); i++ {
		out[i] = string(byteToRune[s[i]])
	}
	return out
}

// decodeByteLevel inverts ByteLevel.
func decodeByteLevel(s string) string {
	inv := make(map[rune]byte, 256)
	for b, r := range byteToRune {
		inv[r] = byte(b)
	}
	var sb strings.Builder
	for _, r := range s {
		if b, ok := inv[r]; ok {
			sb.WriteByte(b)
		} else {
			sb.WriteRune(r)
		}
	}
	return sb.String()
}

// fileProblem describes a failure to read the first of files in dir: a
// missing folder, or the files of it that are missing, by name.
func fileProblem(dir, kind string, err error, files ...string) error {
	if st, serr := os.Stat(dir); serr != nil || !st.IsDir() {
		return fmt.Errorf("tokenizer: the %s tokenizer folder %s does not exist", kind, dir)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("tokenizer: %w", err)
	}
	var missing []string
	for _, f := range files {
		if _, serr := os.Stat(filepath.Join(dir, f)); serr != nil {
			missing = append(missing, f)
		}
	}
	return fmt.Errorf("tokenizer: %s has no %s (the %s tokenizer folder holds %s)", dir, strings.Join(missing, " and no "), kind, strings.Join(files, ", "))
}
