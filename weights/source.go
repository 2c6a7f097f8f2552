package weights

import (
	"fmt"

	"github.com/framepack-go/framepack/tensor"
)

// CheckpointSource makes weights from a checkpoint's tensors on a backend:
// each part is checked (present, its shape, a float dtype), converted to the
// weight's dtype, and its mapped pages are released once copied.
type CheckpointSource struct {
	Ck *Checkpoint
	Be tensor.Backend
}

// Make loads w onto the backend.
func (s *CheckpointSource) Make(w Weight) (*tensor.Tensor, error) {
	if w.Optional && !s.Ck.Has(w.Parts[0].Name) {
		return nil, nil
	}
	if w.FP8 != NotFP8 {
		return makeFilled(s.Be, w, s.Fill)
	}
	if len(w.Parts) == 1 && w.Round == tensor.Invalid {
		return s.Ck.Load(s.Be, w.Name, w.DType, w.Shape...)
	}
	if len(w.Shape) == 0 {
		_, shape, err := s.Ck.Info(w.Name)
		if err != nil {
			return nil, err
		}
		w.Shape, w.Parts = shape, []Spec{{Name: w.Name, Shape: shape}}
	}
	t, err := tensor.Alloc(s.Be, w.DType, w.Shape...)
	if err != nil {
		return nil, fmt.Errorf("weights: %s: tensor %q (%s %v): %w", s.Ck.where, w.Name, w.DType, w.Shape, err)
	}
	if err := s.Upload(w, t.Buffer(), 0); err != nil {
		tensor.Release(t)
		return nil, err
	}
	return t, nil
}

// Upload copies w's parts into dst from byte offset off (converted in
// bounded chunks, or straight from the mapping when no conversion is
// needed), releasing each part's mapped pages after.
func (s *CheckpointSource) Upload(w Weight, dst tensor.Buffer, off int64) error {
	if w.FP8 != NotFP8 {
		host := make([]byte, w.Bytes())
		if err := s.Fill(w, host); err != nil {
			return err
		}
		return s.Be.Upload(dst, off, host)
	}
	for _, p := range w.Parts {
		if err := s.Ck.put(s.Be, dst, off, p.Name, p.Shape, w.DType, w.Round); err != nil {
			return err
		}
		off += p.Numel() * int64(w.DType.Size())
	}
	return nil
}

// Fill writes w's values into the host bytes dst.
func (s *CheckpointSource) Fill(w Weight, dst []byte) error {
	if w.FP8 != NotFP8 {
		return fillFP8(w, dst, func(p Spec) ([]byte, []float32, error) { return s.Ck.fp8.get(p, s.Ck.partFP8) })
	}
	off := int64(0)
	for _, p := range w.Parts {
		n := p.Numel() * int64(w.DType.Size())
		if err := s.Ck.fill(dst[off:off+n], p.Name, p.Shape, w.DType, w.Round); err != nil {
			return err
		}
		off += n
	}
	return nil
}

// Check verifies from the headers that every part of ws can be read (see
// Checkpoint.Check).
func (s *CheckpointSource) Check(ws []Weight) error {
	var specs []Spec
	for _, w := range ws {
		specs = append(specs, w.Parts...)
	}
	return s.Ck.Check(specs)
}

// WillNeed asks for w's bytes to be read ahead (best effort; an error means
// the checkpoint is closed).
func (s *CheckpointSource) WillNeed(w Weight) error {
	for _, p := range w.Parts {
		if err := s.Ck.WillNeed(p.Name); err != nil {
			return err
		}
	}
	return nil
}

// RandomSource makes weights with seeded random values on a backend (see
// FillRandom); a fused weight's parts get their own names' values, as a
// checkpoint written by FillRandom would give them.
type RandomSource struct {
	Be   tensor.Backend
	Seed uint64

	fp8 fp8Memo
}

// Make allocates w on the backend and fills it (in place on host memory).
func (s *RandomSource) Make(w Weight) (*tensor.Tensor, error) {
	t, err := tensor.Alloc(s.Be, w.DType, w.Shape...)
	if err != nil {
		return nil, fmt.Errorf("random weight %s: %w", w.Name, err)
	}
	if hb, ok := t.Buffer().(*tensor.HostBuffer); ok && tensor.IsHostBacked(s.Be) {
		err = s.Fill(w, hb.Data()[:t.Bytes()])
	} else {
		host := make([]byte, t.Bytes())
		if err = s.Fill(w, host); err == nil {
			err = s.Be.Upload(t.Buffer(), 0, host)
		}
	}
	if err != nil {
		tensor.Release(t)
		return nil, fmt.Errorf("random weight %s: %w", w.Name, err)
	}
	return t, nil
}

// Fill writes w's values into the host bytes dst.
func (s *RandomSource) Fill(w Weight, dst []byte) error {
	if w.FP8 != NotFP8 {
		return fillFP8(w, dst, func(p Spec) ([]byte, []float32, error) { return s.fp8.get(p, s.randomFP8) })
	}
	switch w.DType {
	case tensor.F32, tensor.F16, tensor.BF16:
	default:
		return fmt.Errorf("random weight %s: dtype %s is not f32, f16 or bf16", w.Name, w.DType)
	}
	off := int64(0)
	for _, p := range w.Parts {
		n := p.Numel() * int64(w.DType.Size())
		fillRandomParallel(dst[off:off+n], w.DType, w.Round, p, s.Seed)
		off += n
	}
	return nil
}
