package convchain

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/framepack-go/framepack/backend/cpu"
	"github.com/framepack-go/framepack/tensor"
)

// addingTier is a channels-last tier that adds to dst in place, as the
// GPU's library tier does with β = 1, and then fails with err (before
// adding, when before is set; err wraps ErrPartSum when it comes after).
type addingTier struct {
	cpu    tensor.Backend
	err    error
	before bool
	runs   int
}

func (*addingTier) Name() string                   { return "adding" }
func (*addingTier) Plan(Key, *Plan) (*Plan, error) { return &Plan{}, nil }
func (*addingTier) Run(*Plan, *tensor.Tensor, *tensor.Tensor, *tensor.Tensor, *tensor.Tensor, tensor.ConvParams) error {
	return errors.New("addingTier runs channels-last calls only")
}

func (t *addingTier) RunLast(_ *Plan, dst, x, w, bias *tensor.Tensor, p tensor.ConvParams) error {
	t.runs++
	if t.before {
		return t.err
	}
	s := tensor.NewScope(t.cpu)
	defer s.Close()
	y := s.Permute(s.Conv3d(s.Permute(x, 0, 4, 1, 2, 3), w, bias, [3]int{1, 1, 1}, p.Padding), 0, 2, 3, 4, 1)
	st := tensor.ContiguousStrides(dst.Shape())
	if err := t.cpu.Binary(tensor.OpAdd, dst, dst, st, y, st); err != nil {
		return err
	}
	return t.err
}

// TestAccumulateFailure: a tier that fails after it began adding to its
// output in place ends the call with an error, since the output may hold
// part of the sum and another tier would add again; one that fails before
// writing anything passes the call on, and the sum is added once.
func TestAccumulateFailure(t *testing.T) {
	c := cpu.New()
	rng := rand.New(rand.NewPCG(3, 4))
	x, w, b := tensor.RandN(rng, 1, 3, 4, 5, 2), tensor.RandN(rng, 4, 2, 3, 3, 3), tensor.RandN(rng, 4)
	p := tensor.ConvParams{Padding: [3]int{0, 1, 1}, Accumulate: true}
	s := tensor.NewScope(c)
	defer s.Close()
	conv := s.Permute(s.Conv3d(s.Permute(x, 0, 4, 1, 2, 3), w, b, [3]int{1, 1, 1}, p.Padding), 0, 2, 3, 4, 1).Float32s()

	for _, tc := range []struct {
		name   string
		tier   addingTier
		failed bool
	}{
		{"error after adding", addingTier{err: fmt.Errorf("bias: launch failed (%w)", ErrPartSum)}, true},
		{"error before adding", addingTier{err: errors.New("no engine for this convolution"), before: true}, false},
		{"out of memory before adding", addingTier{err: fmt.Errorf("workspace: %w", tensor.ErrOutOfMemory), before: true}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			first := &addingTier{cpu: c, err: tc.tier.err, before: tc.tier.before}
			next := &fakeTier{name: "gemm", be: c}
			ch, err := New([]Tier{first, next, CPUTier(c)}, Options{CachePath: "off", Faults: &Faults{}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				t.Fatal(err)
			}
			dst := tensor.New(tensor.F32, 1, 1, 4, 5, 4)
			start := dst.Float32s()
			for i := range start {
				start[i] = float32(i%7) - 3
			}
			err = Wrap(c, ch).Conv3dLast(dst, x, w, b, p)
			if tc.failed {
				if err == nil || !strings.Contains(err.Error(), "failed while adding to its output") || !strings.Contains(err.Error(), "launch failed") {
					t.Fatalf("want the call to end with the tier's error, got %v", err)
				}
				if next.runs != 0 {
					t.Fatalf("the next tier ran %d times after a part sum", next.runs)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if first.runs != 1 || next.runs != 1 {
				t.Fatalf("runs %d and %d, want one each", first.runs, next.runs)
			}
			for i, v := range dst.Float32s() {
				want := float32(i%7) - 3 + conv[i]
				if d := v - want; d > 1e-4 || d < -1e-4 {
					t.Fatalf("element %d is %v, want %v (the sum added once)", i, v, want)
				}
			}
		})
	}
}
