package weights

import (
	"errors"
	"fmt"

	"github.com/framepack-go/framepack/tensor"
)

// FP8 weights quantized on the device. Quantizing a bf16 transformer on the
// host costs tens of seconds of CPU; a backend with tensor.FP8Compute does
// it in milliseconds from the values uploaded as they are stored, with the
// same codes and scales bit for bit (QuantizeRowsFP8 is
// tensor.QuantizeF8E4M3Rows). The Loader takes this path for an FP8 weight
// bound for device memory whose source can give its unquantized values.

// FP8Inputs is a source that gives an FP8 weight's values unquantized, as
// an ordinary weight (rows, in) in the dtype its quantization reads them in;
// ok is false where they cannot be (a part stored as F8E4M3, taken with its
// own scale, or parts in different dtypes). FillFP8Input fills such a
// weight with the values the host would quantize, as stored (a LoRA is
// never merged into them).
type FP8Inputs interface {
	FP8Input(w Weight) (in Weight, ok bool)
	FillFP8Input(in Weight, dst []byte) error
}

// FP8Input implements FP8Inputs: the parts in their stored dtype (f64 as
// f32, as partFP8 reads them).
func (s *CheckpointSource) FP8Input(w Weight) (Weight, bool) {
	dt := tensor.Invalid
	for _, p := range w.Parts {
		pdt, shape, err := s.Ck.Info(p.Name)
		if err != nil || len(shape) != 2 || (dt != tensor.Invalid && pdt != dt) {
			return Weight{}, false
		}
		dt = pdt
	}
	switch dt {
	case tensor.F32, tensor.F16, tensor.BF16:
	case tensor.F64:
		dt = tensor.F32
	default:
		return Weight{}, false
	}
	return fp8InputOf(w, dt)
}

// FillFP8Input implements FP8Inputs.
func (s *CheckpointSource) FillFP8Input(in Weight, dst []byte) error { return s.Fill(in, dst) }

// FP8Input implements FP8Inputs: the random values in f32, as randomFP8
// makes them.
func (s *RandomSource) FP8Input(w Weight) (Weight, bool) { return fp8InputOf(w, tensor.F32) }

// FillFP8Input implements FP8Inputs.
func (s *RandomSource) FillFP8Input(in Weight, dst []byte) error { return s.Fill(in, dst) }

// fp8InputOf is FP8 weight w's parts stacked as an ordinary weight of dt.
func fp8InputOf(w Weight, dt tensor.DType) (Weight, bool) {
	rows, in := 0, -1
	for _, p := range w.Parts {
		if len(p.Shape) != 2 || (in >= 0 && p.Shape[1] != in) || p.Optional {
			return Weight{}, false
		}
		rows, in = rows+p.Shape[0], p.Shape[1]
	}
	if len(w.Parts) == 0 {
		return Weight{}, false
	}
	return Weight{Name: w.Name, Shape: []int{rows, in}, Parts: w.Parts, DType: dt}, true
}

// quantizeOnDevice fills c (one half of an FP8 weight, bound for device
// memory) by uploading its values and quantizing them there. done is false
// when this path does not apply (no FP8Compute on the backend, a source
// without unquantized values, no device memory for the temporaries): the
// caller then quantizes on the host.
func (l *Loader) quantizeOnDevice(c *Copy) (done bool, err error) {
	fq, ok := tensor.As[tensor.FP8Compute](l.be)
	if !ok || c.host != nil || c.w.FP8 == NotFP8 {
		return false, nil
	}
	fi, ok := l.src.(FP8Inputs)
	if !ok {
		return false, nil
	}
	in, ok := fi.FP8Input(c.w)
	if !ok {
		return false, nil
	}
	rows, k := in.Shape[0], in.Shape[1]
	var temps []*tensor.Tensor
	defer func() {
		for _, t := range temps {
			tensor.Release(t)
		}
	}()
	alloc := func(dt tensor.DType, shape ...int) *tensor.Tensor {
		if err != nil {
			return nil
		}
		var t *tensor.Tensor
		if t, err = tensor.Alloc(l.be, dt, shape...); err == nil {
			temps = append(temps, t)
		}
		return t
	}
	x, q, sc := alloc(in.DType, rows, k), alloc(tensor.F8E4M3, rows, k), alloc(tensor.F32, rows)
	if errors.Is(err, tensor.ErrOutOfMemory) {
		return false, nil // no room beside the weights: the host quantizes
	}
	if err != nil {
		return true, fmt.Errorf("weights: %s: %w", c.w.Name, err)
	}
	host := make([]byte, x.Bytes())
	if err := fi.FillFP8Input(in, host); err != nil {
		return true, err
	}
	if err := l.be.Upload(x.Buffer(), 0, host); err != nil {
		return true, fmt.Errorf("weights: %s: upload: %w", c.w.Name, err)
	}
	if err := fq.QuantizeRowsFP8(q, sc, x); err != nil {
		return true, fmt.Errorf("weights: %s: quantize on the device: %w", c.w.Name, err)
	}
	half := q
	if c.w.FP8 == FP8Scales {
		half = sc
	}
	n := int(half.Bytes())
	if int64(n) != c.w.Bytes() {
		return true, fmt.Errorf("weights: %s: %d quantized bytes for a weight of %d", c.w.Name, n, c.w.Bytes())
	}
	src := tensor.Wrap(l.be, half.Buffer(), tensor.U8, n)
	dst := tensor.Wrap(l.be, c.dst, tensor.U8, int(c.off)+n)
	if err := l.be.Copy(dst, int(c.off), []int{1}, src, 0, []int{1}, []int{n}); err != nil {
		return true, fmt.Errorf("weights: %s: %w", c.w.Name, err)
	}
	return true, nil
}
