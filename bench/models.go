package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/framepack-go/framepack/randmodel"
)

// ModelsOptions are bench make-models': the folder to write and how.
type ModelsOptions struct {
	Out     string
	Size    string // randmodel.Released or randmodel.Tiny
	Seed    uint64
	Workers int // goroutines generating and writing (0: one per core)
}

// MakeModels writes a FramePack model folder of random weights in the
// released layout (randmodel.Write), logging its progress every 5 s, and
// prints one line: files, bytes, parameters, seconds, GB/s.
func MakeModels(ctx context.Context, w io.Writer, o ModelsOptions) error {
	if o.Out == "" {
		return errors.New("bench make-models: --out DIR is required")
	}
	var mu sync.Mutex
	last := time.Now()
	start := last
	progress := func(done, total int64) {
		mu.Lock()
		defer mu.Unlock()
		if time.Since(last) < 5*time.Second && done < total {
			return
		}
		last = time.Now()
		slog.Info(fmt.Sprintf("make-models: %.1f of %.1f GB (%.0f%%), %.2f GB/s", float64(done)/1e9, float64(total)/1e9,
			100*float64(done)/float64(total), float64(done)/1e9/time.Since(start).Seconds()))
	}
	sum, err := randmodel.Write(ctx, o.Out, randmodel.Options{Size: randmodel.Size(o.Size), Seed: o.Seed, Workers: o.Workers, Progress: progress})
	if err != nil {
		return err
	}
	secs := time.Since(start).Seconds()
	return Print(w, Result{
		"bench": "make-models", "size": o.Size, "dir": o.Out, "files": sum.Files, "bytes": sum.WeightBytes,
		"params": sum.Params, "seconds": secs, "gb_per_s": float64(sum.WeightBytes) / 1e9 / secs,
	})
}
