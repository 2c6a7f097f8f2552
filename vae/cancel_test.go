package vae

import (
	"context"
	"errors"
	"testing"

	"github.com/framepack-go/framepack/backend/cpu"
	"github.com/framepack-go/framepack/tensor"
)

// TestDecodeProgressAndCancel: a decode reports every tile, and one
// cancelled after its first tile stops within the next tile instead of
// running to the end of the video.
func TestDecodeProgressAndCancel(t *testing.T) {
	v := randomVAE(t, smallConfig(), cpu.New(), tensor.F32, 3)
	z := randLatents(5, 1, 16, 3, 8, 8) // 64×64 pixels: 4 spatial tiles of 32
	til := SpatialTiling(32, 24)

	var seen []int
	total := 0
	s := tensor.NewScope(cpu.New())
	defer s.Close()
	if err := tensor.Catch(func() {
		v.Decode(s, z, DecodeOptions{Tiling: til, Progress: func(done, n int) { seen = append(seen, done); total = n }})
	}); err != nil {
		t.Fatal(err)
	}
	if total < 4 || len(seen) != total || seen[0] != 1 || seen[total-1] != total {
		t.Fatalf("progress %v of %d tiles, want 1…n once each with n ≥ 4", seen, total)
	}

	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	err := tensor.Catch(func() {
		v.Decode(s, z, DecodeOptions{Tiling: til, Context: ctx, Progress: func(done, n int) {
			calls++
			cancel()
		}})
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled decode: %v, want context.Canceled", err)
	}
	if calls != 1 {
		t.Errorf("%d tiles assembled after the cancel at the first, want 1 (of %d)", calls, total)
	}
}
