package section

import (
	"fmt"
	"strings"

	"github.com/framepack-go/framepack/model/clip"
	"github.com/framepack-go/framepack/model/llama"
	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/tokenizer"
)

// PromptTemplate is HunyuanVideo's DEFAULT_PROMPT_TEMPLATE (diffusers
// 0.33.1), which FramePack uses for the LLaMA text encoder; {} is the user
// prompt.
const PromptTemplate = "<|start_header_id|>system<|end_header_id|>\n\nDescribe the video by detailing the following aspects: " +
	"1. The main content and theme of the video.2. The color, shape, size, texture, quantity, text, and spatial " +
	"relationships of the objects.3. Actions, events, behaviors temporal relationships, physical movement changes " +
	"of the objects.4. background environment, light, style and atmosphere.5. camera angles, movements, and " +
	"transitions used in the video:<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n{}<|eot_id|>"

const (
	// MaxPromptTokens is encode_prompt_conds' max_length: the LLaMA prompt
	// is cut 256 tokens after the template's prefix.
	MaxPromptTokens = 256
	// TextLength is the length crop_or_pad_yield_mask gives the LLaMA states.
	TextLength = 512
	// LlamaHiddenState is the hidden state FramePack takes: hidden_states[-3].
	LlamaHiddenState = -3
)

// CropStart is the number of tokens the template puts before the prompt,
// BOS included: diffusers hard-codes 95 for the real tokenizer; counting
// the template prefix's tokens gives that and works for any tokenizer.
func CropStart(tok *tokenizer.Llama) (int, error) {
	prefix, _, _ := strings.Cut(PromptTemplate, "{}")
	ids, err := tok.Encode(prefix)
	if err != nil {
		return 0, fmt.Errorf("tokenizing the prompt template: %w", err)
	}
	return len(ids), nil
}

// Prompt is one prompt's conditioning on the host before padding: what
// encode_prompt_conds returns.
type Prompt struct {
	Embeds []float32 // (Tokens, D) llama_vec: LLaMA hidden states of the prompt's tokens
	Tokens int
	Pooled []float32 // (D2) clip_l_pooler
}

// LlamaIDs tokenizes the templated prompt, truncated to cropStart + 256.
func LlamaIDs(tok *tokenizer.Llama, cropStart int, prompt string) ([]int64, error) {
	ids, err := tok.Encode(strings.Replace(PromptTemplate, "{}", prompt, 1))
	if err != nil {
		return nil, fmt.Errorf("tokenizing the prompt for the LLaMA text encoder: %w", err)
	}
	if n := cropStart + MaxPromptTokens; len(ids) > n {
		ids = ids[:n]
	}
	if len(ids) <= cropStart {
		return nil, fmt.Errorf("the templated prompt has %d tokens, no more than the template's %d", len(ids), cropStart)
	}
	return ids, nil
}

// EncodeLlama is the LLaMA half of encode_prompt_conds:
// hidden_states[-3][crop_start:attn_len] of the templated prompt, into
// c.Embeds and c.Tokens. FramePack runs both halves in one call; they are
// two here so that each encoder can be loaded for its half alone.
func EncodeLlama(s *tensor.Scope, m *llama.Model, tok *tokenizer.Llama, cropStart int, prompt string, c *Prompt) error {
	ids, err := LlamaIDs(tok, cropStart, prompt)
	if err != nil {
		return err
	}
	err = tensor.Catch(func() {
		want := m.NumHiddenLayers + 1 + LlamaHiddenState
		h := m.Forward(s, ids, want).Hidden[want]
		h = s.Slice(h, 1, cropStart, len(ids))
		c.Tokens = len(ids) - cropStart
		c.Embeds = tensor.Float32s(h)
	})
	if err != nil {
		return fmt.Errorf("LLaMA text encoder: %w", err)
	}
	return nil
}

// EncodeCLIP is the CLIP half: the pooled output of the raw prompt,
// truncated to the model's 77 positions, into c.Pooled.
func EncodeCLIP(s *tensor.Scope, m *clip.Model, tok *tokenizer.CLIP, prompt string, c *Prompt) error {
	ids, err := tok.Encode(prompt)
	if err != nil {
		return fmt.Errorf("tokenizing the prompt for the CLIP text encoder (tokenizer_2): %w", err)
	}
	if len(ids) > m.MaxPositionEmbeddings {
		ids = ids[:m.MaxPositionEmbeddings]
	}
	return tensor.Catch(func() {
		c.Pooled = tensor.Float32s(m.Forward(s, ids).Pooled)
	})
}

// Padded is the transformer's text conditioning: the LLaMA states through
// crop_or_pad_yield_mask(·, 512), zero-padded (or cropped) to (1, 512, d)
// with the mask (1, 512) 1 on the real tokens, and the pooled output (1, D2).
func (c Prompt) Padded(d int) Text {
	n := min(c.Tokens, TextLength)
	e := make([]float32, TextLength*d)
	copy(e, c.Embeds[:n*d])
	m := make([]float32, TextLength)
	for i := range n {
		m[i] = 1
	}
	return Text{
		Embeds: tensor.FromFloat32(e, 1, TextLength, d),
		Mask:   tensor.FromFloat32(m, 1, TextLength),
		Pooled: tensor.FromFloat32(c.Pooled, 1, len(c.Pooled)),
	}
}

// ZerosLike is FramePack's negative conditioning when cfg is 1: zeros of
// the positive's shape (the negative pass is then never run).
func (c Prompt) ZerosLike() Prompt {
	return Prompt{Embeds: make([]float32, len(c.Embeds)), Tokens: c.Tokens, Pooled: make([]float32, len(c.Pooled))}
}
