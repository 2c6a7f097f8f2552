package framepack

import (
	"context"
	"testing"
)

// TestResultLoads: every model load is listed with the stage whose time
// includes it, and those stages' times are at least their loads.
func TestResultLoads(t *testing.T) {
	p := loadTiny(t)
	req := smallRequest(testImage(t))
	req.Seconds = 0.2
	res, err := p.Generate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{PartTextEncoder: StageTextEncode, PartTextEncoder2: StageTextEncode,
		PartImageEncoder: StageImageEncode, PartTransformer: ""}
	seen := map[string]int{}
	var inStage = map[string]int64{}
	for _, l := range res.Loads {
		seen[l.Part]++
		if w, ok := want[l.Part]; ok && l.Stage != w {
			t.Errorf("%s loaded in stage %q, want %q", l.Part, l.Stage, w)
		}
		if l.Time <= 0 || l.Bytes <= 0 {
			t.Errorf("%s load: %v, %d bytes", l.Part, l.Time, l.Bytes)
		}
		inStage[l.Stage] += int64(l.Time)
	}
	// The VAE: its encoder in the encode stage, then its decoder.
	var vae []string
	for _, l := range res.Loads {
		if l.Part == PartVAE {
			vae = append(vae, l.Stage)
		}
	}
	if p.keepAll() {
		// Every model fits: the VAE is loaded whole, once.
		if len(vae) != 1 || vae[0] != StageVAEEncode {
			t.Errorf("VAE loads in stages %q, want one, in the encode stage", vae)
		}
	} else if len(vae) < 2 || vae[0] != StageVAEEncode || vae[1] != StageDecode {
		t.Errorf("VAE loads in stages %q, want the encode stage then decode", vae)
	}
	for part := range want {
		if seen[part] == 0 {
			t.Errorf("no load of %s", part)
		}
	}
	var decode int64
	for _, s := range res.Sections {
		decode += int64(s.Decode)
	}
	if inStage[StageTextEncode] > int64(res.TextEncode) || inStage[StageDecode] > decode ||
		inStage[StageImageEncode] > int64(res.ImageEncode) || inStage[StageVAEEncode] > int64(res.VAEEncode) {
		t.Errorf("loads %v exceed their stages' times (text %v, vae encode %v, image %v, decode %v)",
			inStage, res.TextEncode, res.VAEEncode, res.ImageEncode, decode)
	}
}
