package bench

import (
	"math"
	"time"

	"github.com/framepack-go/framepack"
	"github.com/framepack-go/framepack/tensor"
)

// genResult splits a job's times into disjoint stages: the model loads are
// taken out of the stage times that include them (Result.Loads) and, with
// framepack.Load's time (loadPipeline), make load_s. gpus is the number of
// processes that shared the job.
func genResult(res *framepack.Result, steps, gpus int, loadPipeline, write time.Duration) Result {
	ls := loadStats(res, loadPipeline)
	ss := sectionStats(res)
	text := res.TextEncode - ls.byStage[framepack.StageTextEncode]
	image := res.VAEEncode + res.ImageEncode - ls.byStage[framepack.StageVAEEncode] - ls.byStage[framepack.StageImageEncode]
	decode := ss.decode - ls.byStage[framepack.StageDecode]
	r := Result{
		"bench": "generate", "impl": "framepack",
		"width": res.Width, "height": res.Height, "frames": res.T, "sections": len(res.Sections),
		"load_s": ls.load.Seconds(), "text_s": text.Seconds(), "image_s": image.Seconds(),
		"sample_s": ss.sample.Seconds(), "decode_s": decode.Seconds(), "write_s": write.Seconds(),
		"section_sample_s": ss.perSection, "teacache_skipped_steps": ss.skipped,
		"transformer_calls": ss.calls, "transformer_computed": ss.calls - ss.cacheSkipped, "cache_skipped_calls": ss.cacheSkipped,
		"device_peak_gib": gib(res.PeakBytes), "load_gbps": ls.gbps, "load_models": ls.models, "gpus": gpus,
		"latents_nonfinite": nonFinite(res.Latents),
	}
	// The section loop's share of time with the transformer not sampling
	// (its loads, decodes that did not run beside a sampling, joins).
	r["decode_overlapped_sections"] = ss.overlapped
	r["decode_overlapped_s"] = ss.overlappedDecode.Seconds()
	if loop := res.Total - res.TextEncode - res.VAEEncode - res.ImageEncode - transformerLoad(res); loop > 0 {
		r["loop_idle_share"] = max(0, 1-ss.sample.Seconds()/loop.Seconds())
	}
	if ss.sample > 0 {
		r["sample_device_idle_s"] = ss.sampleIdle.Seconds()
		r["sample_device_idle_share"] = ss.sampleIdle.Seconds() / ss.sample.Seconds()
	}
	if n := len(res.Sections) * steps; n > 0 {
		r["sample_s_per_step"] = ss.sample.Seconds() / float64(n)
	}
	return r
}

// loads are a job's model loads summed: by stage, the time the job waited
// (load_s), and per model its bytes, time and rate.
type loads struct {
	byStage map[string]time.Duration
	load    time.Duration
	gbps    map[string]float64
	models  map[string]map[string]any
}

func loadStats(res *framepack.Result, loadPipeline time.Duration) loads {
	type partLoads struct {
		bytes            int64
		took, overlapped time.Duration
		n                int
	}
	l := loads{byStage: map[string]time.Duration{}, load: loadPipeline, gbps: map[string]float64{}, models: map[string]map[string]any{}}
	byPart := map[string]*partLoads{}
	for _, ml := range res.Loads {
		l.byStage[ml.Stage] += ml.Time
		l.load += ml.Waited()
		b := byPart[ml.Part]
		if b == nil {
			b = &partLoads{}
			byPart[ml.Part] = b
		}
		b.bytes += ml.Bytes
		b.took += ml.Time
		b.n++
		if ml.Overlapped {
			b.overlapped += ml.Time - ml.Wait
		}
	}
	for part, b := range byPart {
		m := map[string]any{"bytes": b.bytes, "s": b.took.Seconds(), "loads": b.n, "overlapped_s": b.overlapped.Seconds()}
		if b.took > 0 {
			l.gbps[part] = float64(b.bytes) / 1e9 / b.took.Seconds()
			m["gbps"] = l.gbps[part]
		}
		l.models[part] = m
	}
	return l
}

// sections are a job's sections summed.
type sections struct {
	sample, sampleIdle, decode, overlappedDecode time.Duration
	perSection                                   []float64 // each section's sampling, seconds
	skipped, overlapped, calls, cacheSkipped     int
}

func sectionStats(res *framepack.Result) sections {
	var ss sections
	for _, s := range res.Sections {
		ss.sample += s.Sample
		ss.sampleIdle += s.SampleIdle
		if s.DecodeOverlapped {
			// What ran in line (on a GPU the decode itself) and the wait
			// for the rest add to the wall time; the rest ran beside the
			// next sampling.
			ss.overlapped++
			ss.decode += s.DecodeInline + s.DecodeWait
			ss.overlappedDecode += s.Decode - s.DecodeInline
		} else {
			ss.decode += s.Decode
		}
		ss.perSection = append(ss.perSection, s.Sample.Seconds())
		ss.skipped += s.TeaCacheSkipped
		ss.calls += s.TransformerCalls
		ss.cacheSkipped += len(s.CacheSkipped)
	}
	return ss
}

// nonFinite counts NaN and ±Inf in the latents: random weights must still
// compute numbers, as a NaN would give a video of black frames and a
// timing that means nothing.
func nonFinite(latents *tensor.Tensor) int {
	n := 0
	if latents != nil {
		for _, v := range tensor.Float32s(latents) {
			if v != v || v > math.MaxFloat32 || v < -math.MaxFloat32 {
				n++
			}
		}
	}
	return n
}

// transformerLoad is the time the job waited for the transformer's loads
// (no stage time includes them; one beside the encoders counts only its
// wait).
func transformerLoad(res *framepack.Result) time.Duration {
	var d time.Duration
	for _, l := range res.Loads {
		if l.Part == framepack.PartTransformer {
			d += l.Waited()
		}
	}
	return d
}
