package randmodel

import (
	"fmt"
	"strings"

	"github.com/dlclark/regexp2"

	"github.com/framepack-go/framepack/tinymodel"
	"github.com/framepack-go/framepack/tokenizer"
)

// The tokenizers are small byte-level BPE vocabularies with the released
// special-token ids. Every text tokenizes (every byte has a symbol); the
// words of HunyuanVideo's prompt template and of a few prompts are whole
// tokens, so the template takes about as many tokens as with the real
// LLaMA-3 tokenizer (crop_start 95) and the text encoder does a real-sized
// job.
var corpus = append(tinymodel.Corpus(), // diffusers' HunyuanVideo prompt template, a few prompts
	"A cat walks slowly across the room, looks at the camera and sits down.")

// llamaSpecials are LLaMA-3's 256 special tokens, ids 128000–128255: the
// text markers and the chat-header ids FramePack's template uses
// (<|start_header_id|> 128006, <|end_header_id|> 128007, <|eot_id|> 128009),
// the rest reserved.
func llamaSpecials() []string {
	s := make([]string, 256)
	named := map[int]string{0: "<|begin_of_text|>", 1: "<|end_of_text|>", 6: "<|start_header_id|>", 7: "<|end_header_id|>", 9: "<|eot_id|>"}
	r := 0
	for i := range s {
		if n, ok := named[i]; ok {
			s[i] = n
			continue
		}
		s[i] = fmt.Sprintf("<|reserved_special_token_%d|>", r)
		r++
	}
	return s
}

const (
	llamaFirstSpecial = 128000
	llamaBOS          = "<|begin_of_text|>"
	llamaEOS          = "<|end_of_text|>"
	clipBOS           = "<|startoftext|>"
	clipEOS           = "<|endoftext|>"
	clipBOSID         = 49406 // CLIP's ids; the end token must be the largest
	clipEOSID         = 49407 // (the legacy eos_token_id 2 pools at argmax)
)

// tokenizerFiles returns tokenizer/ and tokenizer_2/'s files by path.
func tokenizerFiles() (map[string][]byte, error) {
	out := map[string][]byte{}
	if err := llamaFiles(out); err != nil {
		return nil, err
	}
	if err := clipFiles(out); err != nil {
		return nil, err
	}
	return out, nil
}

// bpeVocab builds a vocabulary in which each word is one token: the 256
// byte symbols first (ids 0–255), then, word by word, each of its
// prefixes, with the merge (prefix, next symbol) that makes it — so both
// whole-word lookup and plain BPE merging reach the whole word.
type bpeVocab struct {
	vocab  map[string]int
	merges []string
	seen   map[string]bool
}

func newBPEVocab(symbols []string) *bpeVocab {
	v := &bpeVocab{vocab: map[string]int{}, seen: map[string]bool{}}
	for _, s := range symbols {
		v.vocab[s] = len(v.vocab)
	}
	return v
}

func (v *bpeVocab) addWord(sym []string) {
	prefix := sym[0]
	for _, s := range sym[1:] {
		merged := prefix + s
		if m := prefix + " " + s; !v.seen[m] {
			v.seen[m] = true
			v.merges = append(v.merges, m)
		}
		if _, ok := v.vocab[merged]; !ok {
			v.vocab[merged] = len(v.vocab)
		}
		prefix = merged
	}
}

func llamaFiles(out map[string][]byte) error {
	specials := llamaSpecials()
	var symbols []string
	for b := 0; b < 256; b++ {
		symbols = append(symbols, string(tokenizer.ByteRune(byte(b))))
	}
	v := newBPEVocab(symbols)
	re := regexp2.MustCompile(tokenizer.LlamaPattern, regexp2.Unicode)
	for _, text := range corpus {
		for _, part := range tokenizer.SplitSpecial(text, specials[:10]) {
			m, err := re.FindStringMatch(part)
			for ; m != nil && err == nil; m, err = re.FindNextMatch(m) {
				v.addWord(tokenizer.ByteLevel(m.String()))
			}
			if err != nil {
				return fmt.Errorf("tokenizer corpus: %w", err)
			}
		}
	}
	if len(v.vocab) >= llamaFirstSpecial {
		return fmt.Errorf("tokenizer: %d regular tokens reach the special ids", len(v.vocab))
	}
	decoder := map[string]any{}
	for i, s := range specials {
		id := llamaFirstSpecial + i
		// In the model's vocabulary too, so that every loader gives the
		// added token this id rather than the next free one.
		v.vocab[s] = id
		decoder[fmt.Sprint(id)] = map[string]any{"content": s, "single_word": false, "lstrip": false,
			"rstrip": false, "normalized": false, "special": true}
	}
	doc := tokenizer.LlamaDocument(v.vocab, v.merges, specials, llamaBOS)
	var err error
	if out["tokenizer/tokenizer.json"], err = marshal(doc); err != nil {
		return err
	}
	if out["tokenizer/tokenizer_config.json"], err = marshal(map[string]any{
		"add_bos_token": true, "add_eos_token": false, "added_tokens_decoder": decoder,
		"bos_token": llamaBOS, "eos_token": llamaEOS, "pad_token": llamaEOS,
		"clean_up_tokenization_spaces": true, "model_input_names": []string{"input_ids", "attention_mask"},
		"model_max_length": 131072, "tokenizer_class": "PreTrainedTokenizerFast",
	}); err != nil {
		return err
	}
	out["tokenizer/special_tokens_map.json"], err = marshal(map[string]any{
		"bos_token": special(llamaBOS), "eos_token": special(llamaEOS), "pad_token": special(llamaEOS),
	})
	return err
}

func special(s string) map[string]any {
	return map[string]any{"content": s, "lstrip": false, "normalized": false, "rstrip": false, "single_word": false}
}

// CLIP's pre-tokenizer on lower-cased text.
const clipPattern = `<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|\p{L}+|\p{N}|[^\s\p{L}\p{N}]+`

func clipFiles(out map[string][]byte) error {
	// CLIP's first 512 ids: the 256 byte symbols, then each with "</w>"
	// (the last symbol of a word), as the real vocabulary has them.
	var symbols []string
	for b := 0; b < 256; b++ {
		symbols = append(symbols, string(tokenizer.ByteRune(byte(b))))
	}
	for b := 0; b < 256; b++ {
		symbols = append(symbols, string(tokenizer.ByteRune(byte(b)))+"</w>")
	}
	v := newBPEVocab(symbols)
	re := regexp2.MustCompile(clipPattern, regexp2.Unicode)
	for _, text := range corpus {
		for _, part := range tokenizer.SplitSpecial(text, llamaSpecials()[:10]) {
			m, err := re.FindStringMatch(strings.ToLower(part))
			for ; m != nil && err == nil; m, err = re.FindNextMatch(m) {
				w := tokenizer.ByteLevel(m.String())
				w[len(w)-1] += "</w>"
				v.addWord(w)
			}
			if err != nil {
				return fmt.Errorf("tokenizer corpus: %w", err)
			}
		}
	}
	if len(v.vocab) >= clipBOSID {
		return fmt.Errorf("tokenizer: %d CLIP tokens reach the special ids", len(v.vocab))
	}
	v.vocab[clipBOS] = clipBOSID
	v.vocab[clipEOS] = clipEOSID
	var err error
	if out["tokenizer_2/vocab.json"], err = marshal(v.vocab); err != nil {
		return err
	}
	out["tokenizer_2/merges.txt"] = []byte("#version: 0.2\n" + strings.Join(v.merges, "\n") + "\n")
	decoder := map[string]any{}
	for _, s := range []string{clipBOS, clipEOS} {
		d := special(s)
		d["special"] = true
		decoder[fmt.Sprint(v.vocab[s])] = d
	}
	if out["tokenizer_2/tokenizer_config.json"], err = marshal(map[string]any{
		"add_prefix_space": false, "added_tokens_decoder": decoder, "bos_token": clipBOS, "clean_up_tokenization_spaces": true,
		"do_lower_case": true, "eos_token": clipEOS, "errors": "replace", "model_max_length": 77,
		"pad_token": clipEOS, "tokenizer_class": "CLIPTokenizer", "unk_token": clipEOS,
	}); err != nil {
		return err
	}
	out["tokenizer_2/special_tokens_map.json"], err = marshal(map[string]any{
		"bos_token": special(clipBOS), "eos_token": special(clipEOS), "pad_token": special(clipEOS), "unk_token": special(clipEOS),
	})
	return err
}
