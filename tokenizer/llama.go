package tokenizer

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/dlclark/regexp2"

	"github.com/framepack-go/framepack/internal/jsonobj"
)

// LlamaPattern is LLaMA-3's pre-tokenizer regex, as its tokenizer.json's
// Split step has it (Llama reads the pattern from the file; this copy is
// for writing such files).
const LlamaPattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// Llama is a Hugging Face byte-level BPE tokenizer (tokenizer.json) as
// LLaMA-3 ships it: added tokens split out first, a regex pre-tokenizer,
// byte-level BPE with whole-word lookup (ignore_merges), and the template's
// special tokens around the sequence.
type Llama struct {
	vocab        map[string]int64
	ranks        map[string]int
	added        []addedToken // longest first
	split        *regexp2.Regexp
	ignoreMerges bool
	prefix       []int64 // template tokens before the text (BOS)
	suffix       []int64
	PadID        int64
}

type addedToken struct {
	content string
	id      int64
}

type hfTokenizer struct {
	AddedTokens []struct {
		ID      int64  `json:"id"`
		Content string `json:"content"`
	} `json:"added_tokens"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Model         struct {
		Type         string           `json:"type"`
		Vocab        map[string]int64 `json:"vocab"`
		Merges       json.RawMessage  `json:"merges"`
		IgnoreMerges bool             `json:"ignore_merges"`
		ByteFallback bool             `json:"byte_fallback"`
	} `json:"model"`
}

// LoadLlama reads dir/tokenizer.json, and dir/tokenizer_config.json and
// dir/special_tokens_map.json where present (see specialsFromConfig).
func LoadLlama(dir string) (*Llama, error) {
	path := filepath.Join(dir, "tokenizer.json")
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fileProblem(dir, "LLaMA", err, "tokenizer.json")
	}
	var hf hfTokenizer
	if err := jsonobj.Check(raw); err != nil {
		return nil, fmt.Errorf("tokenizer: %s %v", path, err)
	}
	if err := json.Unmarshal(raw, &hf); err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", path, err)
	}
	if hf.Model.Type != "BPE" || len(hf.Model.Vocab) == 0 {
		return nil, fmt.Errorf("tokenizer: %s: want a BPE model with a vocabulary, have type %q with %d entries", path, hf.Model.Type, len(hf.Model.Vocab))
	}
	t := &Llama{vocab: hf.Model.Vocab, ranks: map[string]int{}, ignoreMerges: hf.Model.IgnoreMerges}
	merges, err := parseMerges(hf.Model.Merges)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %s: merges: %w", path, err)
	}
	for i, m := range merges {
		t.ranks[m] = i
	}
	for _, a := range hf.AddedTokens {
		t.added = append(t.added, addedToken{a.Content, a.ID})
		t.vocab[a.Content] = a.ID
	}
	sort.SliceStable(t.added, func(i, j int) bool { return len(t.added[i].content) > len(t.added[j].content) })
	pattern, err := splitPattern(hf.PreTokenizer)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %s: pre_tokenizer: %w", path, err)
	}
	if t.split, err = regexp2.Compile(pattern, regexp2.Unicode); err != nil {
		return nil, fmt.Errorf("tokenizer: %s: pre-tokenizer regex: %w", path, err)
	}
	if t.prefix, t.suffix, err = template(hf.PostProcessor, t.vocab); err != nil {
		return nil, fmt.Errorf("tokenizer: %s: post_processor: %w", path, err)
	}
	for _, name := range []string{"<pad>", "<|end_of_text|>"} {
		if id, ok := t.vocab[name]; ok {
			t.PadID = id
			break
		}
	}
	if err := t.specialsFromConfig(dir); err != nil {
		return nil, err
	}
	return t, nil
}

// llamaConfig is what LlamaTokenizerFast takes from tokenizer_config.json
// (special_tokens_map.json may name the tokens too, and wins).
type llamaConfig struct {
	AddBOS *bool     `json:"add_bos_token"`
	AddEOS *bool     `json:"add_eos_token"`
	BOS    tokenName `json:"bos_token"`
	EOS    tokenName `json:"eos_token"`
	Pad    tokenName `json:"pad_token"`
}

// tokenName is a special token as the config files write it: a string or
// an object with "content".
type tokenName string

func (n *tokenName) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		*n = tokenName(s)
		return nil
	}
	var o struct{ Content string }
	if err := json.Unmarshal(b, &o); err != nil {
		return err
	}
	*n = tokenName(o.Content)
	return nil
}

// specialsFromConfig applies tokenizer_config.json as FramePack's
// LlamaTokenizerFast does: it replaces the post-processor of tokenizer.json
// with BOS (add_bos_token, default true) + text + EOS (add_eos_token,
// default false). Without the file, or without a BOS name, the template of
// tokenizer.json stands.
func (t *Llama) specialsFromConfig(dir string) error {
	var cfg llamaConfig
	found := false
	for _, name := range []string{"tokenizer_config.json", "special_tokens_map.json"} {
		path := filepath.Join(dir, name)
		raw, err := os.ReadFile(path)
		if os.IsNotExist(err) {
			continue
		}
		if err == nil {
			if err = jsonobj.Check(raw); err != nil {
				return fmt.Errorf("tokenizer: %s %v", path, err)
			}
			err = json.Unmarshal(raw, &cfg)
		}
		if err != nil {
			return fmt.Errorf("tokenizer: %s: %w", path, err)
		}
		found = true
	}
	if !found || cfg.BOS == "" {
		return nil
	}
	id := func(name tokenName) (int64, error) {
		v, ok := t.vocab[string(name)]
		if !ok {
			return 0, fmt.Errorf("tokenizer: %s: special token %q of tokenizer_config.json or special_tokens_map.json is not in the vocabulary", dir, name)
		}
		return v, nil
	}
	t.prefix, t.suffix = nil, nil
	if cfg.AddBOS == nil || *cfg.AddBOS {
		bos, err := id(cfg.BOS)
		if err != nil {
			return err
		}
		t.prefix = []int64{bos}
	}
	if cfg.AddEOS != nil && *cfg.AddEOS {
		eos, err := id(cfg.EOS)
		if err != nil {
			return err
		}
		t.suffix = []int64{eos}
	}
	if pad, ok := t.vocab[string(cfg.Pad)]; ok { // the pipeline never pads, so an unknown one is no error
		t.PadID = pad
	}
	return nil
}

// parseMerges accepts both encodings of merges: "a b" strings and [a, b] pairs.
func parseMerges(raw json.RawMessage) ([]string, error) {
	var s []string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var pairs [][2]string
	if err := json.Unmarshal(raw, &pairs); err != nil {
		return nil, err
	}
	out := make([]string, len(pairs))
	for i, p := range pairs {
		out[i] = p[0] + " " + p[1]
	}
	return out, nil
}

// splitPattern finds the Split regex of the pre-tokenizer; LLaMA-3's is a
// Sequence of Split(Isolated) and ByteLevel(use_regex false).
func splitPattern(raw json.RawMessage) (string, error) {
	type pre struct {
		Type          string                 `json:"type"`
		Pattern       struct{ Regex string } `json:"pattern"`
		Behavior      string                 `json:"behavior"`
		Invert        bool                   `json:"invert"`
		UseRegex      *bool                  `json:"use_regex"`
		Pretokenizers []json.RawMessage      `json:"pretokenizers"`
	}
	var p pre
	if err := json.Unmarshal(raw, &p); err != nil {
		return "", err
	}
	list := []json.RawMessage{raw}
	if p.Type == "Sequence" {
		list = p.Pretokenizers
	}
	pattern := ""
	for _, r := range list {
		var q pre
		if err := json.Unmarshal(r, &q); err != nil {
			return "", err
		}
		switch q.Type {
		case "Split":
			if q.Behavior != "Isolated" || q.Invert || q.Pattern.Regex == "" {
				return "", fmt.Errorf("unsupported Split (behavior %q, invert %v)", q.Behavior, q.Invert)
			}
			pattern = q.Pattern.Regex
		case "ByteLevel":
			if q.UseRegex != nil && *q.UseRegex {
				return "", fmt.Errorf("ByteLevel with its own regex is not supported")
			}
		default:
			return "", fmt.Errorf("unsupported pre-tokenizer %q", q.Type)
		}
	}
	if pattern == "" {
		return "", fmt.Errorf("no Split pattern")
	}
	return pattern, nil
}

// template reads the special tokens a TemplateProcessing puts around a
// single sequence.
func template(raw json.RawMessage, vocab map[string]int64) (prefix, suffix []int64, err error) {
	type piece struct {
		SpecialToken *struct{ ID string } `json:"SpecialToken"`
		Sequence     *struct{ ID string } `json:"Sequence"`
	}
	type proc struct {
		Type       string            `json:"type"`
		Single     []piece           `json:"single"`
		Processors []json.RawMessage `json:"processors"`
	}
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil, nil
	}
	var p proc
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, nil, err
	}
	list := []json.RawMessage{raw}
	if p.Type == "Sequence" {
		list = p.Processors
	}
	for _, r := range list {
		var q proc
		if err := json.Unmarshal(r, &q); err != nil {
			return nil, nil, err
		}
		if q.Type != "TemplateProcessing" {
			continue
		}
		seen := false
		for _, pc := range q.Single {
			switch {
			case pc.Sequence != nil:
				seen = true
			case pc.SpecialToken != nil:
				id, ok := vocab[pc.SpecialToken.ID]
				if !ok {
					return nil, nil, fmt.Errorf("template token %q is not in the vocabulary", pc.SpecialToken.ID)
				}
				if seen {
					suffix = append(suffix, id)
				} else {
					prefix = append(prefix, id)
				}
			}
		}
	}
	return prefix, suffix, nil
}

// Encode tokenizes text with the template's special tokens (BOS).
func (t *Llama) Encode(text string) ([]int64, error) {
	ids := append([]int64(nil), t.prefix...)
	for _, part := range t.splitAdded(text) {
		if part.id >= 0 {
			ids = append(ids, part.id)
			continue
		}
		m, err := t.split.FindStringMatch(part.text)
		for ; m != nil && err == nil; m, err = t.split.FindNextMatch(m) {
			word, err := t.word(m.String())
			if err != nil {
				return nil, err
			}
			ids = append(ids, word...)
		}
		if err != nil {
			return nil, fmt.Errorf("tokenizer: %w", err)
		}
	}
	return append(ids, t.suffix...), nil
}

func (t *Llama) word(w string) ([]int64, error) {
	sym := ByteLevel(w)
	if t.ignoreMerges {
		if id, ok := t.vocab[strings.Join(sym, "")]; ok {
			return []int64{id}, nil
		}
	}
	var ids []int64
	for _, s := range bpe(sym, t.ranks, false) {
		id, ok := t.vocab[s]
		if !ok {
			return nil, unknownSymbol(s, w, "vocabulary")
		}
		ids = append(ids, id)
	}
	return ids, nil
}

type textPart struct {
	text string
	id   int64 // ≥ 0 for an added token
}

// splitAdded cuts the text at every added token, longest match first.
func (t *Llama) splitAdded(text string) []textPart {
	var parts []textPart
	start := 0
	for i := 0; i < len(text); {
		matched := false
		for _, a := range t.added {
			if a.content != "" && strings.HasPrefix(text[i:], a.content) {
				if start < i {
					parts = append(parts, textPart{text[start:i], -1})
				}
				parts = append(parts, textPart{"", a.id})
				i += len(a.content)
				start = i
				matched = true
				break
			}
		}
		if !matched {
			i++
		}
	}
	if start < len(text) {
		parts = append(parts, textPart{text[start:], -1})
	}
	return parts
}

// ID is the id of a token in the vocabulary.
func (t *Llama) ID(token string) (int64, bool) { id, ok := t.vocab[token]; return id, ok }

// LlamaDocument is a tokenizer.json of LLaMA-3's form, as LoadLlama reads
// it and transformers writes it: LlamaPattern's pre-tokenizer, byte-level
// BPE over vocab and merges that looks a whole pre-token up first
// (ignore_merges), the special tokens added under their ids in vocab, and
// bos before every sequence. The tokenizer generators of the random and
// tiny models write it.
func LlamaDocument(vocab map[string]int, merges []string, specials []string, bos string) map[string]any {
	var added []map[string]any
	for _, s := range specials {
		added = append(added, map[string]any{"id": vocab[s], "content": s, "single_word": false, "lstrip": false,
			"rstrip": false, "normalized": false, "special": true})
	}
	piece := func(kind, id string, typeID int) map[string]any {
		return map[string]any{kind: map[string]any{"id": id, "type_id": typeID}}
	}
	return map[string]any{
		"version":      "1.0",
		"truncation":   nil,
		"padding":      nil,
		"added_tokens": added,
		"normalizer":   nil,
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]string{"Regex": LlamaPattern}, "behavior": "Isolated", "invert": false},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false},
		}},
		"post_processor": map[string]any{"type": "TemplateProcessing",
			"single": []any{piece("SpecialToken", bos, 0), piece("Sequence", "A", 0)},
			"pair": []any{piece("SpecialToken", bos, 0), piece("Sequence", "A", 0),
				piece("SpecialToken", bos, 1), piece("Sequence", "B", 1)},
			"special_tokens": map[string]any{bos: map[string]any{"id": bos, "ids": []int{vocab[bos]}, "tokens": []string{bos}}},
		},
		"decoder": map[string]any{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
		"model": map[string]any{"type": "BPE", "dropout": nil, "unk_token": nil, "continuing_subword_prefix": nil,
			"end_of_word_suffix": nil, "fuse_unk": false, "byte_fallback": false, "ignore_merges": true,
			"vocab": vocab, "merges": merges},
	}
}
