package hunyuan

import (
	"fmt"
	"math"
	"sync/atomic"
	"testing"

	"github.com/framepack-go/framepack/backend/cpu"
	"github.com/framepack-go/framepack/internal/numcmp"
	"github.com/framepack-go/framepack/internal/testutil/testdevice"
	"github.com/framepack-go/framepack/localcomm"
	"github.com/framepack-go/framepack/tensor"
)

// parallelConfig is tinyConfig with 4 heads, so the heads divide over 2
// and 4 ranks, and two blocks of each kind.
func parallelConfig() Config {
	c := tinyConfig()
	c.NumAttentionHeads = 4
	c.NumLayers, c.NumSingleLayers = 2, 2
	c.PooledProjectionDim = 16
	return c
}

// parallelSection has 6·5 + (2+2+16 clean frames' tokens) image tokens: the
// shards are uneven over 4 ranks.
func parallelSection(batch int) Section {
	return Section{Batch: batch, LatentH: 10, LatentW: 12, WindowSize: 3, LatentPadding: 1, ImageTokens: 5, TextTokens: 9, ValidText: 6}
}

// rankBackend makes each rank's backend: the CPU, whose host buffers the
// exchanges read and write in place, or (TestParallelForwardDevice) the
// CPU dressed as a device, whose buffers are reached through views.
var rankBackend = func() tensor.Backend { return cpu.New() }

// runRanks runs fn on n ranks (goroutines, each with its own CPU backend
// and its own copy of the model, the same seed) and returns each rank's
// host outputs.
func runRanks(t *testing.T, n int, dt tensor.DType, fn func(m *Model) []*tensor.Tensor) [][]*tensor.Tensor {
	t.Helper()
	var exchanges atomic.Int64
	outs := make([][]*tensor.Tensor, n)
	errs := localcomm.Run(localcomm.New(n), func(c tensor.Comm) error {
		m, err := RandomModel(parallelConfig(), rankBackend(), Options{DType: dt}, 7)
		if err != nil {
			return err
		}
		defer m.Close()
		if err := m.SetSequenceParallel(counting{c, &exchanges}); err != nil {
			return err
		}
		outs[c.Rank()] = fn(m)
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	if n > 1 && exchanges.Load() == 0 {
		t.Fatalf("%d ranks exchanged nothing: the forward did not run sequence parallel", n)
	}
	return outs
}

// counting counts the all-to-alls a model makes.
type counting struct {
	tensor.Comm
	n *atomic.Int64
}

func (c counting) AllToAll(send, recv []*tensor.Tensor) error {
	c.n.Add(1)
	return c.Comm.AllToAll(send, recv)
}

func forwardHost(m *Model, in *Inputs) *tensor.Tensor {
	s := tensor.NewScope(m.Backend())
	defer s.Close()
	return tensor.ToHost(s.Clone(m.Forward(s, in)))
}

func maxRelL2(t *testing.T, got, want *tensor.Tensor) float64 {
	t.Helper()
	if fmt.Sprint(got.Shape()) != fmt.Sprint(want.Shape()) {
		t.Fatalf("shape %v, want %v", got.Shape(), want.Shape())
	}
	return numcmp.RelL2(got.ToFloat32(), want.ToFloat32())
}

// Every rank of a sequence-parallel forward returns the one-rank output:
// batch 1 and 2 (text masks), with and without the history streams, over
// 2 and 4 ranks with uneven shards, in f32 and bf16.
func TestParallelForward(t *testing.T) {
	for _, tc := range []struct {
		name    string
		batch   int
		history bool
		dt      tensor.DType
		tol     float64
	}{
		{"b1", 1, true, tensor.F32, 1e-6},
		{"b2_mask", 2, true, tensor.F32, 1e-6},
		{"b1_no_history", 1, false, tensor.F32, 1e-6},
		{"b1_bf16", 1, true, tensor.BF16, 1e-2},
	} {
		in := SectionInputs(parallelConfig(), parallelSection(tc.batch), 11)
		if tc.batch == 2 { // the second element's text is shorter
			mask := in.EncoderAttentionMask.ToFloat32()
			l := len(mask) / 2
			for i := l + 3; i < 2*l; i++ {
				mask[i] = 0
			}
		}
		if !tc.history {
			in.CleanLatents, in.CleanLatents2x, in.CleanLatents4x = nil, nil, nil
		}
		want := runRanks(t, 1, tc.dt, func(m *Model) []*tensor.Tensor { return []*tensor.Tensor{forwardHost(m, in)} })[0][0]
		for _, n := range []int{2, 4} {
			t.Run(fmt.Sprintf("%s/%d_ranks", tc.name, n), func(t *testing.T) {
				outs := runRanks(t, n, tc.dt, func(m *Model) []*tensor.Tensor { return []*tensor.Tensor{forwardHost(m, in)} })
				for r, o := range outs {
					d := maxRelL2(t, o[0], want)
					if d > tc.tol || math.IsNaN(d) {
						t.Errorf("rank %d: rel_l2 %.3g from one rank (> %g)", r, d, tc.tol)
					} else if r == 0 {
						t.Logf("rel_l2 %.3g from one rank", d)
					}
				}
			})
		}
	}
}

func TestParallelForwardDevice(t *testing.T) {
	rankBackend = func() tensor.Backend { return testdevice.NewFake() }
	defer func() { rankBackend = func() tensor.Backend { return cpu.New() } }()
	in := SectionInputs(parallelConfig(), parallelSection(1), 3)
	want := runRanks(t, 1, tensor.F32, func(m *Model) []*tensor.Tensor { return []*tensor.Tensor{forwardHost(m, in)} })[0][0]
	for _, n := range []int{2, 4} {
		for r, o := range runRanks(t, n, tensor.F32, func(m *Model) []*tensor.Tensor { return []*tensor.Tensor{forwardHost(m, in)} }) {
			if d := maxRelL2(t, o[0], want); d > 1e-6 || math.IsNaN(d) {
				t.Errorf("%d ranks, rank %d: rel_l2 %.3g from one rank", n, r, d)
			}
		}
	}
}

// TeaCache decides the same on every rank as on one: over 5 steps with
// slowly changing latents, each rank computes and skips the same calls and
// returns the one-rank outputs.
func TestParallelTeaCache(t *testing.T) {
	in := SectionInputs(parallelConfig(), parallelSection(1), 5)
	steps := func(m *Model) []*tensor.Tensor {
		m.InitTeaCache(true, 5, 0.15)
		var outs []*tensor.Tensor
		for i := range 5 {
			step := *in
			step.HiddenStates = scaled(in.HiddenStates, 1+0.002*float32(i))
			step.Timestep = []float32{1000 - 50*float32(i)}
			outs = append(outs, forwardHost(m, &step))
		}
		comp, skip := m.TeaCacheStats()
		outs = append(outs, tensor.FromFloat32([]float32{float32(comp), float32(skip)}, 2))
		return outs
	}
	want := runRanks(t, 1, tensor.F32, steps)[0]
	if st := want[5].ToFloat32(); st[1] == 0 {
		t.Fatalf("the one-rank run skipped no step (%v): the test would not see the decision", st)
	}
	for r, outs := range runRanks(t, 4, tensor.F32, steps) {
		if got, w := fmt.Sprint(outs[5].ToFloat32()), fmt.Sprint(want[5].ToFloat32()); got != w {
			t.Errorf("rank %d: computed/skipped %s, one rank %s", r, got, w)
		}
		for i := range 5 {
			if d := maxRelL2(t, outs[i], want[i]); d > 1e-6 || math.IsNaN(d) {
				t.Errorf("rank %d step %d: rel_l2 %.3g", r, i, d)
			}
		}
	}
}

func TestParallelHeadsMustDivide(t *testing.T) {
	m, err := RandomModel(parallelConfig(), cpu.New(), Options{}, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.SetSequenceParallel(localcomm.New(3)[0]); err == nil {
		t.Error("4 heads over 3 ranks: want an error")
	}
}
