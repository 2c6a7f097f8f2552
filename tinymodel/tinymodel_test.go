package tinymodel

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/framepack-go/framepack/section"
	"github.com/framepack-go/framepack/tokenizer"
)

func readConfig(t *testing.T, dir string, v any) {
	t.Helper()
	b, err := fs.ReadFile(FS(), dir+"/config.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatal(err)
	}
}

// TestDimsFit checks that the five models plug into each other.
func TestDimsFit(t *testing.T) {
	var tr struct {
		TextEmbedDim        int `json:"text_embed_dim"`
		PooledProjectionDim int `json:"pooled_projection_dim"`
		ImageProjDim        int `json:"image_proj_dim"`
		InChannels          int `json:"in_channels"`
	}
	var llama, clip, siglip struct {
		HiddenSize int `json:"hidden_size"`
		VocabSize  int `json:"vocab_size"`
		EOS        int `json:"eos_token_id"`
		ImageSize  int `json:"image_size"`
	}
	var vae struct {
		LatentChannels int `json:"latent_channels"`
	}
	readConfig(t, "transformer", &tr)
	readConfig(t, "text_encoder", &llama)
	readConfig(t, "text_encoder_2", &clip)
	readConfig(t, "image_encoder", &siglip)
	readConfig(t, "vae", &vae)
	if tr.TextEmbedDim != llama.HiddenSize || tr.PooledProjectionDim != clip.HiddenSize || tr.ImageProjDim != siglip.HiddenSize {
		t.Errorf("transformer text/pooled/image dims %d/%d/%d, encoders %d/%d/%d",
			tr.TextEmbedDim, tr.PooledProjectionDim, tr.ImageProjDim, llama.HiddenSize, clip.HiddenSize, siglip.HiddenSize)
	}
	if vae.LatentChannels != tr.InChannels {
		t.Errorf("vae latent channels %d, transformer in_channels %d", vae.LatentChannels, tr.InChannels)
	}
	if llama.VocabSize != llamaVocab || clip.VocabSize != clipVocab || clip.EOS != 2 {
		t.Errorf("vocab sizes %d/%d (eos id %d), tokenizers made for %d/%d with the legacy eos id 2", llama.VocabSize, clip.VocabSize, clip.EOS, llamaVocab, clipVocab)
	}
}

const template = section.PromptTemplate

func TestTokenizers(t *testing.T) {
	dir := t.TempDir()
	if err := Extract(dir); err != nil {
		t.Fatal(err)
	}
	llama, err := tokenizer.LoadLlama(filepath.Join(dir, "tokenizer"))
	if err != nil {
		t.Fatal(err)
	}
	bos, _ := llama.ID(llamaBOS)
	eot, _ := llama.ID("<|eot_id|>")
	for _, prompt := range []string{"", "The girl dances gracefully.", "Ünïcödé — 日本語 🙂", "  spaces\tand\nnewlines  "} {
		ids, err := llama.Encode(strings.Replace(template, "{}", prompt, 1))
		if err != nil {
			t.Fatalf("%q: %v", prompt, err)
		}
		if ids[0] != bos || ids[len(ids)-1] != eot {
			t.Errorf("%q: want BOS first and <|eot_id|> last, have %v", prompt, ids)
		}
		for _, id := range ids {
			if id < 0 || id >= llamaVocab {
				t.Errorf("%q: id %d outside the vocabulary", prompt, id)
			}
		}
	}
	// The template's prefix plus FramePack's 256 prompt tokens fit the
	// tiny LLaMA's 512 positions.
	prefix, _ := llama.Encode(template[:strings.Index(template, "{}")])
	if n := len(prefix); n < 20 || n+256 > 512 {
		t.Errorf("template prefix is %d tokens", n)
	}
	t.Logf("template prefix: %d tokens (the real tokenizer: 95)", len(prefix))

	clip, err := tokenizer.LoadCLIP(filepath.Join(dir, "tokenizer_2"))
	if err != nil {
		t.Fatal(err)
	}
	if clip.EOS != clipVocab-1 || clip.BOS != clipVocab-2 {
		t.Errorf("CLIP BOS/EOS %d/%d, want %d/%d", clip.BOS, clip.EOS, clipVocab-2, clipVocab-1)
	}
	var ascii strings.Builder
	for b := 0x20; b < 0x7f; b++ {
		ascii.WriteByte(byte(b))
	}
	for _, prompt := range []string{"", "The Girl dances, GRACEFULLY!", ascii.String(), "a\tb\nc"} {
		ids, err := clip.Encode(prompt)
		if err != nil {
			t.Fatalf("%q: %v", prompt, err)
		}
		if len(ids) != 77 || ids[0] != clip.BOS {
			t.Errorf("%q: %d ids starting %d", prompt, len(ids), ids[0])
		}
		// The first end token is the largest id: where the legacy config pools.
		end := -1
		for i, id := range ids {
			if id < 0 || id >= clipVocab {
				t.Errorf("%q: id %d outside the vocabulary", prompt, id)
			}
			if id == clip.EOS && end < 0 {
				end = i
			}
		}
		if end < 1 {
			t.Errorf("%q: no end token", prompt)
		}
	}
	if _, err := clip.Encode("café"); err == nil {
		t.Error("non-ASCII text should not tokenize with the tiny CLIP vocabulary")
	}
}

func TestDirReuses(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	t.Setenv("HOME", t.TempDir())
	a, tmpA, err := Dir()
	if err != nil {
		t.Fatal(err)
	}
	b, tmpB, err := Dir()
	if err != nil {
		t.Fatal(err)
	}
	if tmpA || tmpB || a != b {
		t.Errorf("Dir: %s (temporary %v) then %s (temporary %v), want one cached folder", a, tmpA, b, tmpB)
	}
	if _, err := os.Stat(filepath.Join(a, "transformer", "config.json")); err != nil {
		t.Error(err)
	}
	// A damaged cache is extracted again.
	if err := os.Truncate(filepath.Join(a, "vae", "diffusion_pytorch_model.safetensors"), 10); err != nil {
		t.Fatal(err)
	}
	if complete(a) {
		t.Error("a truncated file went unnoticed")
	}
	if c, _, err := Dir(); err != nil || c != a || !complete(c) {
		t.Errorf("Dir after damage: %s, %v; complete %v", c, err, complete(c))
	}
}

// TestConfigSaysResolution: the transformer's config names the resolution
// the model was made for (framepack.ResolutionKey), Resolution.
func TestConfigSaysResolution(t *testing.T) {
	var tr struct {
		Resolution int `json:"framepack_resolution"`
	}
	readConfig(t, "transformer", &tr)
	if tr.Resolution != Resolution {
		t.Errorf("transformer config: framepack_resolution %d, want %d", tr.Resolution, Resolution)
	}
}
