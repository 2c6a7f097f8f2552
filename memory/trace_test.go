package memory

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/framepack-go/framepack/internal/testutil/memtest"
	"github.com/framepack-go/framepack/tensor"
)

// The models of FramePack I2V at their real sizes (spec §3.10, §4.7, §5):
// one group per module, in the order the forward pass meets them.
// The transformer takes trBytes per parameter (2 for bf16, 1 for fp8).
func framePackModels(mb *Backend, trBytes int64) map[string]*model {
	bytesPer := int64(2) // fp16
	add := func(m *model, _ string, params int64) { m.sizes = append(m.sizes, params*bytesPer) }
	m := map[string]*model{}
	// LLaMA 3 8B text encoder, fp16: embed_tokens, 32 layers, norm.
	llama := newModel(mb, "text_encoder")
	add(llama, "embed_tokens", 128256*4096)
	for i := range 32 {
		add(llama, fmt.Sprintf("layers.%d", i), 218_112_000)
	}
	add(llama, "norm", 4096)
	m["text_encoder"] = llama
	clip := newModel(mb, "text_encoder_2")
	add(clip, "all", 123_060_480)
	m["text_encoder_2"] = clip
	siglip := newModel(mb, "image_encoder")
	add(siglip, "all", 428_225_600)
	m["image_encoder"] = siglip
	vae := newModel(mb, "vae")
	add(vae, "all", 246_478_803)
	m["vae"] = vae
	// The packed HunyuanVideo transformer: 25.7 GB in bf16.
	bytesPer = trBytes
	tr := newModel(mb, "transformer")
	add(tr, "embedders", 199_680+14_361_600+309_175_296+32_262_144+38_940_672)
	for i := range 20 {
		add(tr, fmt.Sprintf("transformer_blocks.%d", i), 339_831_296)
	}
	for i := range 40 {
		add(tr, fmt.Sprintf("single_transformer_blocks.%d", i), 141_591_808)
	}
	add(tr, "norm_out", 18_880_512+196_672)
	m["transformer"] = tr
	return m
}

// forward runs m's forward pass, group by group, with act allocating the
// activations of one group in a scope.
func forward(t *testing.T, mb *Backend, m *model, act func(s *tensor.Scope)) {
	t.Helper()
	root := tensor.NewScope(mb)
	defer root.Close()
	for i := range m.sizes {
		s := root.Child()
		err := tensor.Catch(func() { act(s) })
		s.Close()
		if err != nil {
			t.Fatalf("%s group %d: %v", m.owner, i, err)
		}
	}
}

// A simulated 24 GiB device runs FramePack's stages (text encode, VAE
// encode, image encode, sampling, decode) under the default 20 GiB cap:
// the device never holds more than the cap, and nothing of the
// transformer is on it when decoding starts. The bf16 transformer (25.7 GB)
// streams beside the preserved 6 GiB; an fp8 one (12.9 GB) is resident.
func TestSimulated24GiBDevice(t *testing.T) {
	t.Run("bf16 transformer streamed", func(t *testing.T) { simulate(t, 2, Streamed) })
	t.Run("fp8 transformer resident", func(t *testing.T) { simulate(t, 1, Resident) })
}

func simulate(t *testing.T, trBytes int64, trState State) {
	dev := memtest.NewDevice("sim 24 GiB", 24*GiB)
	b := NewBudget("sim 24 GiB", 24*GiB, 0)
	if b.Cap != 20*GiB || b.Preserve != 6*GiB {
		t.Fatalf("default budget %v", b)
	}
	mb := Budgeted(dev, b)
	var logBuf strings.Builder
	mgr := NewManager(mb, testLogger(&logBuf))
	models := framePackModels(mb, trBytes)
	for _, name := range []string{"text_encoder", "text_encoder_2", "image_encoder", "vae", "transformer"} {
		must(t, mgr.Add(name, models[name], OnHost))
	}
	const bf16 = 2
	alloc := func(s *tensor.Scope, bytes int64) *tensor.Tensor { return s.Empty(tensor.U8, int(bytes)) }

	// Text encode: CLIP resident, LLaMA (15 GiB) streamed beside the
	// preserved amount; 256 tokens.
	must(t, mgr.Load("text_encoder_2"))
	must(t, mgr.LoadPreserving("text_encoder", "text_encoder_2"))
	if mgr.State("text_encoder") != Streamed {
		t.Fatalf("LLaMA should stream under a 20 GiB cap, is %v", mgr.State("text_encoder"))
	}
	forward(t, mb, models["text_encoder"], func(s *tensor.Scope) {
		alloc(s, 256*4096*bf16*4)
		alloc(s, 256*14336*bf16*2)
	})
	forward(t, mb, models["text_encoder_2"], func(s *tensor.Scope) { alloc(s, 77*768*bf16*8) })
	must(t, mgr.Unload("text_encoder"))
	must(t, mgr.Unload("text_encoder_2"))

	// VAE encode of a 640×640 image, then SigLIP, each unloaded after its
	// stage.
	must(t, mgr.Load("vae"))
	forward(t, mb, models["vae"], func(s *tensor.Scope) {
		for range 6 {
			alloc(s, 128*640*640*bf16)
		}
	})
	must(t, mgr.Unload("vae"))
	must(t, mgr.Load("image_encoder"))
	forward(t, mb, models["image_encoder"], func(s *tensor.Scope) { alloc(s, 729*1152*bf16*8) })
	must(t, mgr.Unload("image_encoder"))

	// Sampling: the transformer filled up to the preserved amount, the rest
	// streamed; ~20k tokens of hidden state per block.
	must(t, mgr.LoadPreserving("transformer"))
	if mgr.State("transformer") != trState || mb.Held("transformer") > 14*GiB || mb.Held("transformer") < 11*GiB {
		t.Fatalf("transformer placement: %v, %v", mgr.State("transformer"), mb)
	}
	const tokens = 20_000 + 512
	hidden := int64(tokens * 3072 * bf16)
	for step := range 2 { // two sampling steps are enough to exercise the streaming
		_ = step
		forward(t, mb, models["transformer"], func(s *tensor.Scope) {
			for range 6 { // norm, q, k, v, attention out, residual
				alloc(s, hidden)
			}
			alloc(s, 4*hidden) // MLP
		})
	}

	// Decode: the transformer unloaded first, the VAE alone on the device;
	// temporal tiles of 5 latent frames decode to 17 frames of 640×640, up
	// to ~6.8 GiB of activations.
	must(t, mgr.Unload("transformer"))
	must(t, mgr.Load("vae"))
	if held := mb.Held("transformer"); held != 0 {
		t.Fatalf("the transformer holds %s at decode", FormatBytes(held))
	}
	decodeErr := mgr.Run(Attempt{Op: "vae decode", Keep: []string{"vae"}, Run: func() error {
		s := tensor.NewScope(mb)
		defer s.Close()
		for range 4 {
			alloc(s, 128*17*640*640*bf16)
		}
		return nil
	}})
	must(t, decodeErr)
	st := mb.Stats()

	if st.Peak > b.Cap || dev.Peak() > b.Cap {
		t.Fatalf("peak %s (device %s) above the %s cap", FormatBytes(st.Peak), FormatBytes(dev.Peak()), FormatBytes(b.Cap))
	}
	if st.Peak < 12*GiB {
		t.Fatalf("peak %s: the trace did not use the budget", FormatBytes(st.Peak))
	}
	if st.Refused != 0 {
		t.Fatalf("%d allocations refused", st.Refused)
	}
	for _, want := range []string{
		"memory: transformer on host → " + trState.String(),
		"memory: transformer " + trState.String() + " → unloaded, freed",
		"memory: vae unloaded → resident, uploaded 470.1 MiB; device sim 24 GiB: cap 20.0 GiB, in use 470.1 MiB",
		"text_encoder 0 B, text_encoder_2 0 B, image_encoder 0 B, vae 470.1 MiB, transformer 0 B",
	} {
		if !strings.Contains(logBuf.String(), want) {
			t.Errorf("log lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("log:\n%s", logBuf.String())
	}
	t.Logf("peak %s of a %s cap; device peak %s", FormatBytes(st.Peak), FormatBytes(b.Cap), FormatBytes(dev.Peak()))

	// The control: had the streamed transformer stayed (FramePack's partial
	// offload keeps most of it), the decode would not fit under the cap,
	// and the cap, not the device, refuses it.
	if trState != Streamed {
		return
	}
	must(t, mgr.LoadPreserving("transformer"))
	must(t, models["vae"].Place(Resident, 0))
	err := tensor.Catch(func() {
		s := tensor.NewScope(mb)
		defer s.Close()
		for range 4 {
			alloc(s, 128*17*640*640*bf16)
		}
	})
	if !errors.Is(err, tensor.ErrOutOfMemory) || dev.Peak() > b.Cap {
		t.Fatalf("decode beside the transformer: %v, device peak %s", err, FormatBytes(dev.Peak()))
	}
}
