package framepack

import (
	"bytes"
	"context"
	"slices"
	"testing"

	"github.com/framepack-go/framepack/internal/testmode"
	"github.com/framepack-go/framepack/memory"
	"github.com/framepack-go/framepack/tensor"
)

// TestDecodeOverlap: a section's decode beside the next section's sampling
// gives the sequential path's latents and frames bit for bit; under a cap
// where the decode and the sampling do not fit together the planner decodes
// first, and the budget is never exceeded. Two sections (the first
// decoded beside the second's sampling) in the default suite, three in the
// full one (testmode); the uncapped overlapped run is the shared one.
func TestDecodeOverlap(t *testing.T) {
	t.Parallel() // its own pipelines; the tests that measure the process run first, alone
	img := testImage(t)
	req := smallRequest(img)
	req.Seconds = 0.8 // two sections
	req.Steps = 2
	overlapped := []bool{true, false} // all but the last
	if testmode.Full() {
		req.Seconds = 1.2
		overlapped = []bool{true, true, false}
	}
	run := func(t *testing.T, sequential bool, capBytes int64) (*Result, []bool) {
		p, err := Load(tinyDir(t), Options{Device: DeviceCPU, DType: tensor.F32, SequentialDecode: sequential, Logger: quietLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		if capBytes > 0 {
			p.be = memory.Budgeted(p.dev.CPU, memory.Budget{Device: "test", Total: capBytes, Cap: capBytes})
			p.dev.Backend = p.be // the decode plans in its room
		}
		res, err := p.Generate(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if capBytes > 0 && res.PeakBytes > capBytes {
			t.Errorf("peak %d over the %d cap", res.PeakBytes, capBytes)
		}
		var ov []bool
		for _, s := range res.Sections {
			ov = append(ov, s.DecodeOverlapped)
		}
		return res, ov
	}
	seq, ov := run(t, true, 0)
	if slices.Contains(ov, true) {
		t.Fatalf("SequentialDecode overlapped: %v", ov)
	}
	same := func(t *testing.T, res, seq *Result) {
		t.Helper()
		if !bytes.Equal(res.Pix, seq.Pix) || !slices.Equal(res.Latents.Float32s(), seq.Latents.Float32s()) {
			t.Errorf("the overlapped path's frames or latents differ from the sequential path's")
		}
	}
	t.Run("uncapped", func(t *testing.T) {
		t.Parallel()
		res := runShared(t, req).Result
		var ov []bool
		for _, s := range res.Sections {
			ov = append(ov, s.DecodeOverlapped)
		}
		if !slices.Equal(ov, overlapped) {
			t.Errorf("overlapped sections %v, want %v (all but the last)", ov, overlapped)
		}
		same(t, res, seq)
		for _, s := range res.Sections {
			if s.Decode <= 0 || s.Frames == 0 {
				t.Errorf("section %d: decode %v, %d frames", s.Index, s.Decode, s.Frames)
			}
			// On the CPU the whole decode runs beside the sampling: nothing
			// of it in line.
			if s.DecodeInline != 0 {
				t.Errorf("section %d: %v of the decode in line on the CPU", s.Index, s.DecodeInline)
			}
		}
	})

	// The tiny model's weights are about 9 MiB, a section's decode at this
	// size a few; at 10 MiB the decode and the sampling no longer fit
	// together, at 1 GiB they do.
	for _, c := range []struct {
		cap     int64
		overlap bool
	}{{1 << 30, true}, {10 << 20, false}} {
		t.Run(memory.FormatBytes(c.cap), func(t *testing.T) {
			t.Parallel()
			res, ov := run(t, false, c.cap)
			t.Logf("cap %s: overlapped %v, peak %s", memory.FormatBytes(c.cap), ov, memory.FormatBytes(res.PeakBytes))
			if slices.Contains(ov, true) != c.overlap {
				t.Errorf("cap %s: overlapped %v", memory.FormatBytes(c.cap), ov)
			}
			// The sequential path under the same cap decodes with the
			// tiling the overlapped path planned. Where that is the
			// uncapped run's tiling, that run is the same computation, so
			// the default suite compares with it; otherwise (and in the
			// full suite) the sequential path runs under the cap.
			if testmode.Full() || !sameTilings(res, seq) {
				capped, _ := run(t, true, c.cap)
				same(t, res, capped)
			} else {
				same(t, res, seq)
			}
		})
	}
}

// sameTilings reports whether a and b decoded each section with the same
// tiling.
func sameTilings(a, b *Result) bool {
	if len(a.Sections) != len(b.Sections) {
		return false
	}
	for i := range a.Sections {
		if a.Sections[i].DecodeTiling != b.Sections[i].DecodeTiling {
			return false
		}
	}
	return true
}
