// Package loadtest checks in tests that a model loaded through the
// parallel weight loads (weights.Build, weights.Loader) holds the bytes the
// sequential path gives, on every kind of backend. It is for tests only.
package loadtest

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/framepack-go/framepack/backend/cpu"
	"github.com/framepack-go/framepack/internal/hfmodel"
	"github.com/framepack-go/framepack/internal/testutil/testdevice"
	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/weights"
)

// Backends are the backends a load is checked on: the test device
// (FRAMEPACK_TEST_DEVICE: the CPU, the GPU or the fake device), the CPU,
// the fake device, and the fake device with copies that finish long after
// they are queued (a staging buffer refilled too early uploads changed
// bytes).
func Backends(t testing.TB) map[string]tensor.Backend {
	t.Helper()
	lag := testdevice.NewFake()
	lag.CopyDelay = 200 * time.Microsecond
	return map[string]tensor.Backend{
		"device:" + testdevice.Name(): testdevice.Backend(t),
		"cpu":                         cpu.New(),
		"fake":                        testdevice.NewFake(),
		"fake-lagging-copies":         lag,
	}
}

// Same fails t unless got and want are the same tensors, one for one: dtype,
// shape and bytes.
func Same(t testing.TB, got, want []*tensor.Tensor) {
	t.Helper()
	require.Len(t, got, len(want), "weights")
	bad := 0
	for i := range got {
		g, w := got[i], want[i]
		if (g == nil) != (w == nil) {
			t.Fatalf("weight %d: %v, want %v", i, g, w)
		}
		if g == nil {
			continue
		}
		require.Equal(t, w.DType(), g.DType(), "weight %d's dtype", i)
		require.Equal(t, w.Shape(), g.Shape(), "weight %d's shape", i)
		if !slices.Equal(Bytes(t, g), Bytes(t, w)) {
			if bad++; bad <= 5 {
				t.Errorf("weight %d (%v): bytes differ", i, g)
			}
		}
	}
	if bad > 5 {
		t.Errorf("and %d more weights differ", bad-5)
	}
}

// Bytes is x's storage as host bytes.
func Bytes(t testing.TB, x *tensor.Tensor) []byte {
	t.Helper()
	out := make([]byte, x.Bytes())
	if err := x.Backend().Sync(); err != nil {
		t.Fatal(err)
	}
	if err := x.Backend().Download(out, x.Buffer(), 0); err != nil {
		t.Fatal(err)
	}
	return out
}

// Model is a loaded model as MatchesSequential sees it.
type Model interface {
	Close()
	WeightTensors() []*tensor.Tensor
}

// MatchesSequential checks, on every backend of Backends and for each of
// dts, that the model load makes (the parallel path) holds the same
// weights as the one sequential makes; more, when set, checks the loaded
// model further.
func MatchesSequential[M Model](t *testing.T, dts []tensor.DType, load, sequential func(be tensor.Backend, dt tensor.DType) (M, error),
	more func(t *testing.T, dt tensor.DType, loaded, seq M)) {
	t.Helper()
	for name, be := range Backends(t) {
		for _, dt := range dts {
			t.Run(name+"/"+dt.String(), func(t *testing.T) {
				m, err := load(be, dt)
				if err != nil {
					t.Fatal(err)
				}
				defer m.Close()
				seq, err := sequential(be, dt)
				if err != nil {
					t.Fatal(err)
				}
				defer seq.Close()
				Same(t, m.WeightTensors(), seq.WeightTensors())
				if more != nil {
					more(t, dt, m, seq)
				}
			})
		}
	}
}

// MatchesSequentialHF is MatchesSequential for a transformers model
// (internal/hfmodel) in dir: load, the model package's Load, against
// hfmodel.LoadSequential with the package's read and build.
func MatchesSequentialHF[C any, M Model](t *testing.T, dir string, dts []tensor.DType,
	load func(dir string, be tensor.Backend, dt tensor.DType) (M, error),
	read func(dir string) (C, error), build func(l *weights.Builder, cfg C) M,
	more func(t *testing.T, dt tensor.DType, loaded, seq M)) {
	t.Helper()
	MatchesSequential(t, dts,
		func(be tensor.Backend, dt tensor.DType) (M, error) { return load(dir, be, dt) },
		func(be tensor.Backend, dt tensor.DType) (M, error) {
			return hfmodel.LoadSequential(dir, be, dt, read, build)
		}, more)
}
