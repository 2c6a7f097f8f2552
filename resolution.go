package framepack

import (
	"fmt"
	"path/filepath"

	"github.com/framepack-go/framepack/weights"
)

// ResolutionKey is the key of the transformer's config.json where a model
// folder says the bucket resolution it was made for. The tiny models
// (tinymodel, `bench make-models --size tiny`) write it; the released
// checkpoints, without it, were made for FramePack's 640.
const ResolutionKey = "framepack_resolution"

// DefaultResolution is FramePack's bucket resolution: what the released
// weights were trained at, and what a model folder without ResolutionKey
// is taken to be made for.
const DefaultResolution = 640

// TransformerResolution is the bucket resolution the transformer in dir
// (its folder, holding config.json) was made for: its config's
// ResolutionKey, else DefaultResolution.
func TransformerResolution(dir string) (int, error) {
	var c struct {
		Resolution *int `json:"framepack_resolution"`
	}
	if err := weights.ReadConfig(dir, &c); err != nil {
		return 0, err
	}
	switch {
	case c.Resolution == nil:
		return DefaultResolution, nil
	case *c.Resolution < MinResolution || *c.Resolution > MaxResolution:
		return 0, fmt.Errorf("%s: %s %d is not a bucket resolution (%d–%d)", filepath.Join(dir, "config.json"), ResolutionKey,
			*c.Resolution, MinResolution, MaxResolution)
	}
	return *c.Resolution, nil
}

// Resolution is the bucket resolution the loaded model was made for
// (TransformerResolution); 0 once closed.
func (p *Pipeline) Resolution() int {
	if !p.open() {
		return 0
	}
	return p.resolution
}

// DefaultRequest is the package's DefaultRequest at the resolution the
// model was made for: FramePack's 640 for the released weights, the tiny
// model's own for tinymodel's.
func (p *Pipeline) DefaultRequest() Request {
	r := DefaultRequest()
	if res := p.Resolution(); res > 0 {
		r.Resolution = res
	}
	return r
}

// farResolution is how far above the model's own resolution a request may
// go before Generate warns.
const farResolution = 2

// checkResolution warns when req's resolution is far beyond the one the
// model was made for: the work grows with the square of it.
func (p *Pipeline) checkResolution(req Request) {
	if own := p.resolution; own > 0 && req.Resolution > farResolution*own {
		f := float64(req.Resolution) / float64(own)
		p.log.Warn(fmt.Sprintf("resolution %d is %.1f× the %d this model was made for (its transformer config's %s): about %.0f× the pixels, time and memory",
			req.Resolution, f, own, ResolutionKey, f*f))
	}
}
