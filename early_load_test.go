package framepack

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/framepack-go/framepack/internal/testutil/testdevice"
	"github.com/framepack-go/framepack/memory"
	"github.com/framepack-go/framepack/model/clip"
	"github.com/framepack-go/framepack/model/hunyuan"
	"github.com/framepack-go/framepack/model/llama"
	"github.com/framepack-go/framepack/model/siglip"
	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/vae"
)

// TestTransformerLoadsEarly: on a device where every model fits at once,
// the transformer loads in the background beside the encoders and the job
// gives the frames and latents of sequential loads, and the budget holds. Where the models do not all fit, the transformer loads
// when the first section needs it.
func TestTransformerLoadsEarly(t *testing.T) {
	t.Parallel() // its own pipelines; the tests that measure the process run first, alone
	req := smallRequest(testImage(t))
	req.Seconds = 0.2 // one section: the transformer loads once either way
	run := func(t *testing.T, sequential bool, cp, preserve int64, req Request) (*Result, string, *Pipeline) {
		var logs bytes.Buffer
		p, err := Load(tinyDir(t), Options{Device: DeviceCPU, DType: tensor.F32, SequentialLoads: sequential,
			Logger: slog.New(slog.NewTextHandler(io.MultiWriter(&logs, logWriter()), &slog.HandlerOptions{Level: slog.LevelDebug}))})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		p.be = memory.Budgeted(testdevice.NewFake(), memory.Budget{Device: "fake", Total: cp, Cap: cp, Preserve: preserve})
		res, err := p.Generate(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if res.PeakBytes > cp {
			t.Errorf("peak %d over the %d cap", res.PeakBytes, cp)
		}
		return res, logs.String(), p
	}
	transformerLoad := func(res *Result) ModelLoad {
		for _, l := range res.Loads {
			if l.Part == PartTransformer {
				return l
			}
		}
		t.Fatal("no transformer load")
		return ModelLoad{}
	}
	seq, _, _ := run(t, true, 1<<30, 0, req)
	if transformerLoad(seq).Overlapped {
		t.Error("SequentialLoads loaded the transformer beside the encoders")
	}
	res, logs, p := run(t, false, 1<<30, 0, req)
	if !p.keepAll() {
		t.Fatal("the tiny model does not fit 1 GiB at once")
	}
	l := transformerLoad(res)
	if !l.Overlapped || l.Wait > l.Time || l.Bytes <= 0 {
		t.Errorf("transformer load %+v: want one beside the encoders, waited at most its time", l)
	}
	if !strings.Contains(logs, "in the background") {
		t.Error("no log line of the background load")
	}
	if !bytes.Equal(res.Pix, seq.Pix) || !slices.Equal(res.Latents.Float32s(), seq.Latents.Float32s()) {
		t.Error("the frames or latents differ from those of sequential loads")
	}
	// Every model stays loaded, charged with its weights.
	for _, h := range p.be.Stats().Owners {
		if h.Bytes == 0 {
			t.Errorf("%s holds nothing after a job that keeps every model", h.Owner)
		}
	}

	// Not every model fits at once: nothing loads early (decided before
	// the first section: one is enough).
	small, logs, p := run(t, false, 64<<20, 61<<20, req)
	if p.keepAll() {
		t.Fatal("the tiny model fits the small budget at once")
	}
	if transformerLoad(small).Overlapped || strings.Contains(logs, "in the background") {
		t.Error("the transformer loaded early under a budget that cannot hold every model")
	}
}

// TestWeightTensorsListEveryAllocation: each model's WeightTensors, which
// the pipeline charges to its owner (exactly, as another model may build
// or run meanwhile), lists every device allocation its load leaves live:
// charging what was allocated since the load began to another owner finds
// nothing more.
func TestWeightTensorsListEveryAllocation(t *testing.T) {
	p := loadTiny(t)
	mb := memory.Budgeted(testdevice.NewFake(), memory.Budget{Device: "fake", Total: 1 << 30, Cap: 1 << 30})
	type weighted interface {
		closer
		WeightTensors() []*tensor.Tensor
	}
	for part, load := range map[string]func() (weighted, error){
		PartTextEncoder:  func() (weighted, error) { return llama.Load(p.paths[PartTextEncoder], mb, tensor.BF16) },
		PartTextEncoder2: func() (weighted, error) { return clip.Load(p.paths[PartTextEncoder2], mb, tensor.BF16) },
		PartImageEncoder: func() (weighted, error) { return siglip.Load(p.paths[PartImageEncoder], mb, tensor.BF16) },
		PartVAE:          func() (weighted, error) { return vae.Load(p.paths[PartVAE], mb, vae.Options{DType: tensor.BF16}) },
		PartTransformer: func() (weighted, error) {
			return hunyuan.Load(p.paths[PartTransformer], mb, hunyuan.Options{DType: tensor.BF16})
		},
		PartTransformer + " (streamed)": func() (weighted, error) {
			return hunyuan.Load(p.paths[PartTransformer], mb, hunyuan.Options{DType: tensor.BF16, HostBlocks: true, KeepBlockBytes: 1 << 20})
		},
	} {
		mark := mb.Mark()
		m, err := load()
		if err != nil {
			t.Fatal(err)
		}
		mb.Charge(part, m.WeightTensors()...)
		mb.ChargeSince("unlisted", mark)
		if n := mb.Held("unlisted"); n != 0 || mb.Held(part) == 0 {
			t.Errorf("%s: %d bytes listed, %d allocated and not listed", part, mb.Held(part), n)
		}
		m.Close()
		if n := mb.Stats().InUse; n != 0 {
			t.Fatalf("%s: %d bytes left after Close", part, n)
		}
	}
}
