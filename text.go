package framepack

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
	// maxPromptTokens is FramePack's max_length for the LLaMA prompt
	// (encode_prompt_conds: 256 tokens after the template's prefix).
	maxPromptTokens = 256
	// textPadLength is crop_or_pad_yield_mask's length for the LLaMA states.
	textPadLength = 512
	// llamaHiddenState is the hidden state FramePack takes (hidden_states[-3]).
	llamaHiddenState = -3
)

// cropStart is the number of tokens the template puts before the prompt,
// BOS included: diffusers hard-codes 95 for the real tokenizer; counting
// the template prefix's tokens gives that and works for any tokenizer.
func cropStart(tok *tokenizer.Llama) (int, error) {
	prefix, _, _ := strings.Cut(PromptTemplate, "{}")
	ids, err := tok.Encode(prefix)
	if err != nil {
		return 0, fmt.Errorf("tokenizing the prompt template: %w", err)
	}
	return len(ids), nil
}

// textCond is one prompt's conditioning on the host, before padding.
type textCond struct {
	embeds []float32 // (L, D) LLaMA hidden states of the prompt tokens
	tokens int       // L
	pooled []float32 // (D2) CLIP pooled output
}

// llamaIDs tokenizes the templated prompt, truncated to crop_start + 256.
func (p *Pipeline) llamaIDs(prompt string) ([]int64, error) {
	ids, err := p.llamaTok.Encode(strings.Replace(PromptTemplate, "{}", prompt, 1))
	if err != nil {
		return nil, fmt.Errorf("tokenizing the prompt for the LLaMA text encoder: %w", err)
	}
	if n := p.cropStart + maxPromptTokens; len(ids) > n {
		ids = ids[:n]
	}
	if len(ids) <= p.cropStart {
		return nil, fmt.Errorf("the templated prompt has %d tokens, no more than the template's %d", len(ids), p.cropStart)
	}
	return ids, nil
}

// encodeLlama runs FramePack's LLaMA half of encode_prompt_conds:
// hidden_states[-3][crop_start:attn_len] of the templated prompt.
func (p *Pipeline) encodeLlama(m *llama.Model, s *tensor.Scope, prompt string) (textCond, error) {
	ids, err := p.llamaIDs(prompt)
	if err != nil {
		return textCond{}, err
	}
	var out textCond
	err = tensor.Catch(func() {
		want := m.NumHiddenLayers + 1 + llamaHiddenState
		h := m.Forward(s, ids, want).Hidden[want]
		h = s.Slice(h, 1, p.cropStart, len(ids))
		out.tokens = len(ids) - p.cropStart
		out.embeds = tensor.Float32s(h)
	})
	if err != nil {
		return textCond{}, fmt.Errorf("LLaMA text encoder: %w", err)
	}
	return out, nil
}

// encodeCLIP is the CLIP half: the pooled output of the raw prompt padded
// to 77 tokens.
func (p *Pipeline) encodeCLIP(m *clip.Model, s *tensor.Scope, prompt string, into *textCond) error {
	ids, err := p.clipTok.Encode(prompt)
	if err != nil {
		return fmt.Errorf("tokenizing the prompt for the CLIP text encoder (tokenizer_2): %w", err)
	}
	if len(ids) > m.MaxPositionEmbeddings {
		ids = ids[:m.MaxPositionEmbeddings]
	}
	return tensor.Catch(func() {
		into.pooled = tensor.Float32s(m.Forward(s, ids).Pooled)
	})
}

// padded is crop_or_pad_yield_mask(·, 512): the states zero-padded (or
// cropped) to 512 tokens, shape (1, 512, D), and the mask (1, 512), 1 on
// the real tokens.
func (c textCond) padded(d int) (embeds, mask *tensor.Tensor) {
	n := min(c.tokens, textPadLength)
	e := make([]float32, textPadLength*d)
	copy(e, c.embeds[:n*d])
	m := make([]float32, textPadLength)
	for i := 0; i < n; i++ {
		m[i] = 1
	}
	return tensor.FromFloat32(e, 1, textPadLength, d), tensor.FromFloat32(m, 1, textPadLength)
}

// zerosLike is FramePack's negative conditioning when cfg is 1: zeros of
// the positive's shape (the negative pass is then never run).
func (c textCond) zerosLike() textCond {
	return textCond{embeds: make([]float32, len(c.embeds)), tokens: c.tokens, pooled: make([]float32, len(c.pooled))}
}
