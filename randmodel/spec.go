package randmodel

import (
	"fmt"
	"math"
)

// initKind is how a tensor's values are drawn, as Hugging Face's
// _init_weights (transformers) and PyTorch's module defaults (diffusers)
// initialise them.
type initKind uint8

const (
	initNormal  initKind = iota // normal(0, scale): linears, embeddings
	initUniform                 // uniform(−scale, scale): convolutions (kaiming_uniform(a=√5) is ±1/√fan_in)
	initZeros                   // biases, norm biases
	initOnes                    // norm weights
)

// tensorSpec is one tensor of a checkpoint: its name, shape and values.
type tensorSpec struct {
	name  string
	shape []int
	init  initKind
	scale float32
}

func (t tensorSpec) numel() int64 {
	n := int64(1)
	for _, d := range t.shape {
		n *= int64(d)
	}
	return n
}

// initStd is transformers' initializer_range for every model written here
// (LLaMA, CLIP and SigLIP configs all say 0.02); diffusers' models get the
// same for their linears.
const initStd = 0.02

// specs collects tensors in module order (the order save_pretrained walks
// the state dict, which decides what lands in which shard).
type specs struct {
	prefix string
	list   *[]tensorSpec
}

func newSpecs() specs { return specs{list: new([]tensorSpec)} }

func (s specs) sub(name string) specs {
	return specs{prefix: s.prefix + name + ".", list: s.list}
}

func (s specs) add(name string, init initKind, scale float32, shape ...int) {
	*s.list = append(*s.list, tensorSpec{name: s.prefix + name, shape: shape, init: init, scale: scale})
}

// linear is nn.Linear(in, out): weight (out, in) and, with bias, (out).
func (s specs) linear(name string, out, in int, bias bool) {
	s.add(name+".weight", initNormal, initStd, out, in)
	if bias {
		s.add(name+".bias", initZeros, 0, out)
	}
}

// norm is an affine LayerNorm / GroupNorm (weight 1, bias 0), or an
// RMSNorm (weight only) when bias is false.
func (s specs) norm(name string, dim int, bias bool) {
	s.add(name+".weight", initOnes, 0, dim)
	if bias {
		s.add(name+".bias", initZeros, 0, dim)
	}
}

// conv is nn.Conv3d / nn.Conv2d with PyTorch's default weight scale
// (±1/√fan_in) and a zero bias.
func (s specs) conv(name string, out, in int, kernel ...int) {
	fanIn := in
	for _, k := range kernel {
		fanIn *= k
	}
	s.add(name+".weight", initUniform, float32(1/math.Sqrt(float64(fanIn))), append([]int{out, in}, kernel...)...)
	s.add(name+".bias", initZeros, 0, out)
}

func (s specs) embedding(name string, rows, dim int) {
	s.add(name+".weight", initNormal, initStd, rows, dim)
}

// transformerConfig is the part of HunyuanVideoTransformer3DModelPacked's
// config.json that decides the tensors.
type transformerConfig struct {
	Heads          int     `json:"num_attention_heads"`
	HeadDim        int     `json:"attention_head_dim"`
	Layers         int     `json:"num_layers"`
	SingleLayers   int     `json:"num_single_layers"`
	RefinerLayers  int     `json:"num_refiner_layers"`
	InChannels     int     `json:"in_channels"`
	OutChannels    int     `json:"out_channels"`
	PatchSize      int     `json:"patch_size"`
	PatchSizeT     int     `json:"patch_size_t"`
	MLPRatio       float64 `json:"mlp_ratio"`
	TextEmbedDim   int     `json:"text_embed_dim"`
	PooledDim      int     `json:"pooled_projection_dim"`
	ImageProjDim   int     `json:"image_proj_dim"`
	HasImageProj   bool    `json:"has_image_proj"`
	HasCleanX      bool    `json:"has_clean_x_embedder"`
	GuidanceEmbeds bool    `json:"guidance_embeds"`
	QKNorm         string  `json:"qk_norm"`
}

// transformerTensors lists HunyuanVideoTransformer3DModelPacked's state dict
// (FramePack's diffusers_helper/models/hunyuan_video_packed.py).
func transformerTensors(c transformerConfig) ([]tensorSpec, error) {
	if c.Heads <= 0 || c.HeadDim <= 0 || c.InChannels <= 0 || c.PatchSize <= 0 || c.PatchSizeT <= 0 || c.MLPRatio <= 0 {
		return nil, fmt.Errorf("transformer config: heads %d, head dim %d, in channels %d, patch %d×%d, mlp ratio %g must be positive",
			c.Heads, c.HeadDim, c.InChannels, c.PatchSizeT, c.PatchSize, c.MLPRatio)
	}
	if c.QKNorm != "rms_norm" {
		return nil, fmt.Errorf("transformer config: qk_norm %q, want rms_norm", c.QKNorm)
	}
	if c.OutChannels == 0 {
		c.OutChannels = c.InChannels
	}
	d := c.Heads * c.HeadDim
	mlp := int(float64(d) * c.MLPRatio)
	s := newSpecs()
	s.sub("x_embedder").conv("proj", d, c.InChannels, c.PatchSizeT, c.PatchSize, c.PatchSize)

	// context_embedder: HunyuanVideoTokenRefiner(text_embed_dim, …).
	ce := s.sub("context_embedder")
	timestepTextEmbed(ce.sub("time_text_embed"), d, c.TextEmbedDim, false)
	ce.linear("proj_in", d, c.TextEmbedDim, true)
	for i := 0; i < c.RefinerLayers; i++ {
		b := ce.sub(fmt.Sprintf("token_refiner.refiner_blocks.%d", i))
		b.norm("norm1", d, true)
		attention(b.sub("attn"), d)
		b.norm("norm2", d, true)
		b.linear("ff.net.0.proj", mlp, d, true)
		b.linear("ff.net.2", d, mlp, true)
		b.linear("norm_out.linear", 2*d, d, true)
	}
	timestepTextEmbed(s.sub("time_text_embed"), d, c.PooledDim, c.GuidanceEmbeds)

	for i := 0; i < c.Layers; i++ {
		b := s.sub(fmt.Sprintf("transformer_blocks.%d", i))
		b.linear("norm1.linear", 6*d, d, true)
		b.linear("norm1_context.linear", 6*d, d, true)
		a := b.sub("attn")
		a.norm("norm_q", c.HeadDim, false)
		a.norm("norm_k", c.HeadDim, false)
		a.linear("to_q", d, d, true)
		a.linear("to_k", d, d, true)
		a.linear("to_v", d, d, true)
		a.linear("add_k_proj", d, d, true)
		a.linear("add_v_proj", d, d, true)
		a.linear("add_q_proj", d, d, true)
		a.linear("to_out.0", d, d, true)
		a.linear("to_add_out", d, d, true)
		a.norm("norm_added_q", c.HeadDim, false)
		a.norm("norm_added_k", c.HeadDim, false)
		b.linear("ff.net.0.proj", mlp, d, true)
		b.linear("ff.net.2", d, mlp, true)
		b.linear("ff_context.net.0.proj", mlp, d, true)
		b.linear("ff_context.net.2", d, mlp, true)
	}
	for i := 0; i < c.SingleLayers; i++ {
		b := s.sub(fmt.Sprintf("single_transformer_blocks.%d", i))
		a := b.sub("attn")
		a.norm("norm_q", c.HeadDim, false)
		a.norm("norm_k", c.HeadDim, false)
		a.linear("to_q", d, d, true)
		a.linear("to_k", d, d, true)
		a.linear("to_v", d, d, true)
		b.linear("norm.linear", 3*d, d, true)
		b.linear("proj_mlp", mlp, d, true)
		b.linear("proj_out", d, d+mlp, true)
	}
	s.linear("norm_out.linear", 2*d, d, true)
	s.linear("proj_out", c.PatchSizeT*c.PatchSize*c.PatchSize*c.OutChannels, d, true)
	if c.HasImageProj {
		p := s.sub("image_projection")
		p.linear("up", 3*d, c.ImageProjDim, true)
		p.linear("down", d, 3*d, true)
	}
	if c.HasCleanX {
		// HunyuanVideoPatchEmbedForCleanLatents: 16 input channels, fixed.
		x := s.sub("clean_x_embedder")
		x.conv("proj", d, 16, 1, 2, 2)
		x.conv("proj_2x", d, 16, 2, 4, 4)
		x.conv("proj_4x", d, 16, 4, 8, 8)
	}
	return *s.list, nil
}

// attention is diffusers' Attention with biased q, k, v and out (the
// refiner's; the double blocks list theirs in their own order).
func attention(a specs, d int) {
	a.linear("to_q", d, d, true)
	a.linear("to_k", d, d, true)
	a.linear("to_v", d, d, true)
	a.linear("to_out.0", d, d, true)
}

// timestepTextEmbed is CombinedTimestep(Guidance)TextProjEmbeddings: the
// 256-channel sinusoid's MLP, the guidance's, and the pooled text's.
func timestepTextEmbed(s specs, d, textDim int, guidance bool) {
	s.linear("timestep_embedder.linear_1", d, 256, true)
	s.linear("timestep_embedder.linear_2", d, d, true)
	if guidance {
		s.linear("guidance_embedder.linear_1", d, 256, true)
		s.linear("guidance_embedder.linear_2", d, d, true)
	}
	s.linear("text_embedder.linear_1", d, textDim, true)
	s.linear("text_embedder.linear_2", d, d, true)
}

// llamaConfig is the part of LlamaModel's config.json that decides the
// tensors.
type llamaConfig struct {
	Hidden       int  `json:"hidden_size"`
	Intermediate int  `json:"intermediate_size"`
	Layers       int  `json:"num_hidden_layers"`
	Heads        int  `json:"num_attention_heads"`
	KVHeads      int  `json:"num_key_value_heads"`
	HeadDim      int  `json:"head_dim"`
	Vocab        int  `json:"vocab_size"`
	AttnBias     bool `json:"attention_bias"`
	MLPBias      bool `json:"mlp_bias"`
}

// llamaTensors lists transformers' LlamaModel state dict (no "model."
// prefix, no lm_head: the text encoder is the bare model).
func llamaTensors(c llamaConfig) ([]tensorSpec, error) {
	if c.HeadDim == 0 && c.Heads > 0 {
		c.HeadDim = c.Hidden / c.Heads
	}
	if c.KVHeads == 0 {
		c.KVHeads = c.Heads
	}
	if c.Hidden <= 0 || c.Intermediate <= 0 || c.Heads <= 0 || c.HeadDim <= 0 || c.Vocab <= 0 {
		return nil, fmt.Errorf("text_encoder config: hidden %d, intermediate %d, heads %d, head dim %d, vocab %d must be positive",
			c.Hidden, c.Intermediate, c.Heads, c.HeadDim, c.Vocab)
	}
	s := newSpecs()
	s.embedding("embed_tokens", c.Vocab, c.Hidden)
	for i := 0; i < c.Layers; i++ {
		l := s.sub(fmt.Sprintf("layers.%d", i))
		a := l.sub("self_attn")
		a.linear("q_proj", c.Heads*c.HeadDim, c.Hidden, c.AttnBias)
		a.linear("k_proj", c.KVHeads*c.HeadDim, c.Hidden, c.AttnBias)
		a.linear("v_proj", c.KVHeads*c.HeadDim, c.Hidden, c.AttnBias)
		a.linear("o_proj", c.Hidden, c.Heads*c.HeadDim, c.AttnBias)
		m := l.sub("mlp")
		m.linear("gate_proj", c.Intermediate, c.Hidden, c.MLPBias)
		m.linear("up_proj", c.Intermediate, c.Hidden, c.MLPBias)
		m.linear("down_proj", c.Hidden, c.Intermediate, c.MLPBias)
		l.norm("input_layernorm", c.Hidden, false)
		l.norm("post_attention_layernorm", c.Hidden, false)
	}
	s.norm("norm", c.Hidden, false)
	return *s.list, nil
}

// encoderConfig is the part of CLIPTextModel's and SiglipVisionModel's
// config.json that decides the tensors.
type encoderConfig struct {
	Hidden       int `json:"hidden_size"`
	Intermediate int `json:"intermediate_size"`
	Layers       int `json:"num_hidden_layers"`
	Vocab        int `json:"vocab_size"`
	MaxPositions int `json:"max_position_embeddings"`
	ImageSize    int `json:"image_size"`
	PatchSize    int `json:"patch_size"`
	Channels     int `json:"num_channels"`
}

// encoderLayers lists the CLIP / SigLIP encoder layers (same names).
func encoderLayers(s specs, c encoderConfig) {
	for i := 0; i < c.Layers; i++ {
		l := s.sub(fmt.Sprintf("encoder.layers.%d", i))
		a := l.sub("self_attn")
		a.linear("k_proj", c.Hidden, c.Hidden, true)
		a.linear("v_proj", c.Hidden, c.Hidden, true)
		a.linear("q_proj", c.Hidden, c.Hidden, true)
		a.linear("out_proj", c.Hidden, c.Hidden, true)
		l.norm("layer_norm1", c.Hidden, true)
		l.linear("mlp.fc1", c.Intermediate, c.Hidden, true)
		l.linear("mlp.fc2", c.Hidden, c.Intermediate, true)
		l.norm("layer_norm2", c.Hidden, true)
	}
}

// clipTensors lists transformers' CLIPTextModel state dict.
func clipTensors(c encoderConfig) ([]tensorSpec, error) {
	if c.Hidden <= 0 || c.Intermediate <= 0 || c.Vocab <= 0 || c.MaxPositions <= 0 {
		return nil, fmt.Errorf("text_encoder_2 config: hidden %d, intermediate %d, vocab %d, positions %d must be positive",
			c.Hidden, c.Intermediate, c.Vocab, c.MaxPositions)
	}
	s := newSpecs().sub("text_model")
	s.embedding("embeddings.token_embedding", c.Vocab, c.Hidden)
	s.embedding("embeddings.position_embedding", c.MaxPositions, c.Hidden)
	encoderLayers(s, c)
	s.norm("final_layer_norm", c.Hidden, true)
	return *s.list, nil
}

// siglipTensors lists transformers' SiglipVisionModel state dict, with the
// attention-pooling head (vision_use_head defaults to true).
func siglipTensors(c encoderConfig) ([]tensorSpec, error) {
	if c.Channels == 0 {
		c.Channels = 3
	}
	if c.Hidden <= 0 || c.Intermediate <= 0 || c.ImageSize <= 0 || c.PatchSize <= 0 {
		return nil, fmt.Errorf("image_encoder config: hidden %d, intermediate %d, image %d, patch %d must be positive",
			c.Hidden, c.Intermediate, c.ImageSize, c.PatchSize)
	}
	// A stride-patch convolution without padding: 384/14 gives 27 a side.
	side := c.ImageSize / c.PatchSize
	s := newSpecs().sub("vision_model")
	s.conv("embeddings.patch_embedding", c.Hidden, c.Channels, c.PatchSize, c.PatchSize)
	s.embedding("embeddings.position_embedding", side*side, c.Hidden)
	encoderLayers(s, c)
	s.norm("post_layernorm", c.Hidden, true)
	h := s.sub("head")
	h.add("probe", initNormal, initStd, 1, 1, c.Hidden)
	h.add("attention.in_proj_weight", initNormal, initStd, 3*c.Hidden, c.Hidden)
	h.add("attention.in_proj_bias", initZeros, 0, 3*c.Hidden)
	h.linear("attention.out_proj", c.Hidden, c.Hidden, true)
	h.norm("layernorm", c.Hidden, true)
	h.linear("mlp.fc1", c.Intermediate, c.Hidden, true)
	h.linear("mlp.fc2", c.Hidden, c.Intermediate, true)
	return *s.list, nil
}

// vaeConfig is the part of AutoencoderKLHunyuanVideo's config.json that
// decides the tensors.
type vaeConfig struct {
	InChannels     int      `json:"in_channels"`
	OutChannels    int      `json:"out_channels"`
	LatentChannels int      `json:"latent_channels"`
	BlockOut       []int    `json:"block_out_channels"`
	LayersPerBlock int      `json:"layers_per_block"`
	NormGroups     int      `json:"norm_num_groups"`
	SpatialRatio   int      `json:"spatial_compression_ratio"`
	TemporalRatio  int      `json:"temporal_compression_ratio"`
	MidAttention   *bool    `json:"mid_block_add_attention"`
	DownBlockTypes []string `json:"down_block_types"`
	UpBlockTypes   []string `json:"up_block_types"`
}

func log2(n int) int {
	k := 0
	for n > 1 {
		n >>= 1
		k++
	}
	return k
}

// vaeTensors lists diffusers' AutoencoderKLHunyuanVideo state dict
// (models/autoencoders/autoencoder_kl_hunyuan_video.py).
func vaeTensors(c vaeConfig) ([]tensorSpec, error) {
	if len(c.BlockOut) == 0 || c.LatentChannels <= 0 || c.InChannels <= 0 || c.OutChannels <= 0 || c.LayersPerBlock <= 0 {
		return nil, fmt.Errorf("vae config: block_out_channels %v, latent %d, in %d, out %d, layers per block %d",
			c.BlockOut, c.LatentChannels, c.InChannels, c.OutChannels, c.LayersPerBlock)
	}
	if c.TemporalRatio != 4 || c.SpatialRatio <= 0 {
		return nil, fmt.Errorf("vae config: compression %d× spatial, %d× temporal: the HunyuanVideo VAE has 4× temporal", c.SpatialRatio, c.TemporalRatio)
	}
	mid := c.MidAttention == nil || *c.MidAttention
	n := len(c.BlockOut)
	spatial, temporal := log2(c.SpatialRatio), log2(c.TemporalRatio)
	resnet := func(s specs, in, out int) {
		s.norm("norm1", in, true)
		s.sub("conv1").conv("conv", out, in, 3, 3, 3)
		s.norm("norm2", out, true)
		s.sub("conv2").conv("conv", out, out, 3, 3, 3)
		if in != out {
			s.sub("conv_shortcut").conv("conv", out, in, 1, 1, 1)
		}
	}
	midBlock := func(s specs, ch int) {
		if mid {
			a := s.sub("attentions.0")
			a.norm("group_norm", ch, true)
			a.linear("to_q", ch, ch, true)
			a.linear("to_k", ch, ch, true)
			a.linear("to_v", ch, ch, true)
			a.linear("to_out.0", ch, ch, true)
		}
		resnet(s.sub("resnets.0"), ch, ch)
		resnet(s.sub("resnets.1"), ch, ch)
	}
	s := newSpecs()
	e := s.sub("encoder")
	e.sub("conv_in").conv("conv", c.BlockOut[0], c.InChannels, 3, 3, 3)
	out := c.BlockOut[0]
	for i := 0; i < n; i++ {
		in := out
		out = c.BlockOut[i]
		b := e.sub(fmt.Sprintf("down_blocks.%d", i))
		for j := 0; j < c.LayersPerBlock; j++ {
			if j == 0 {
				resnet(b.sub("resnets.0"), in, out)
			} else {
				resnet(b.sub(fmt.Sprintf("resnets.%d", j)), out, out)
			}
		}
		// diffusers' encoder: spatial downsampling in the first log2(8)
		// blocks, temporal in the last log2(4) before the final one.
		if i < spatial || (i >= n-1-temporal && i != n-1) {
			b.sub("downsamplers.0.conv").conv("conv", out, out, 3, 3, 3)
		}
	}
	ch := c.BlockOut[n-1]
	midBlock(e.sub("mid_block"), ch)
	e.norm("conv_norm_out", ch, true)
	e.sub("conv_out").conv("conv", 2*c.LatentChannels, ch, 3, 3, 3)

	d := s.sub("decoder")
	d.sub("conv_in").conv("conv", ch, c.LatentChannels, 3, 3, 3)
	midBlock(d.sub("mid_block"), ch)
	out = ch
	for i := 0; i < n; i++ {
		in := out
		out = c.BlockOut[n-1-i]
		b := d.sub(fmt.Sprintf("up_blocks.%d", i))
		for j := 0; j <= c.LayersPerBlock; j++ {
			if j == 0 {
				resnet(b.sub("resnets.0"), in, out)
			} else {
				resnet(b.sub(fmt.Sprintf("resnets.%d", j)), out, out)
			}
		}
		if i < spatial || (i >= n-1-temporal && i != n-1) {
			b.sub("upsamplers.0.conv").conv("conv", out, out, 3, 3, 3)
		}
	}
	d.norm("conv_norm_out", c.BlockOut[0], true)
	d.sub("conv_out").conv("conv", c.OutChannels, c.BlockOut[0], 3, 3, 3)

	s.conv("quant_conv", 2*c.LatentChannels, 2*c.LatentChannels, 1, 1, 1)
	s.conv("post_quant_conv", c.LatentChannels, c.LatentChannels, 1, 1, 1)
	return *s.list, nil
}
