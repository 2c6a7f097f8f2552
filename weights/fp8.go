package weights

import (
	"fmt"
	"runtime"
	"strings"
	"sync"

	"github.com/framepack-go/framepack/tensor"
)

// FP8 weights. A Linear weight (out, in) can be held as F8E4M3 codes with
// one f32 scale per output row (weight ≈ code·scale): Builder.GetFP8 and
// CatFP8 hand out the two as separate weights (FP8Codes, FP8Scales), so a
// block's arena lays them out like any other.
//
// From a checkpoint, a part stored in another float dtype is quantized at
// load, each row scaled by amax/448 (saturating, never NaN). A part stored
// as F8_E4M3 is taken as it is, with its scale from the checkpoint where
// there is one, as single-file community checkpoints store them:
//   - "<layer>.scale_weight": ComfyUI's scaled_fp8 layout (the file also
//     holds an empty "scaled_fp8" marker), one scale per tensor;
//   - "<layer>.weight_scale": one per tensor or one per output row;
//   - neither: scale 1, a plain to(torch.float8_e4m3fn) of the weights
//     (kijai's FramePackI2V_HY_fp8_e4m3fn keeps norms, biases and the
//     modulations in bf16 and casts the rest so).
// "<layer>.scale_input" (scaled activations) is not used: FP8 here is
// weight-only. Loaded as an ordinary (Get) weight, an F8_E4M3 tensor is
// widened exactly and multiplied by its scale.

// FP8Kind says which half of an FP8 weight a Weight is.
type FP8Kind uint8

const (
	NotFP8    FP8Kind = iota
	FP8Codes          // the F8E4M3 codes (out, in)
	FP8Scales         // the F32 scales (out)
)

// scaleNames are the checkpoint names of an FP8 tensor's scale.
func scaleNames(name string) []string {
	base := strings.TrimSuffix(name, ".weight")
	return []string{base + ".scale_weight", base + ".weight_scale"}
}

// fp8Scale is the per-row scale of the F8E4M3 tensor name with rows rows,
// nil when the checkpoint has none.
func (c *Checkpoint) fp8Scale(name string, rows int) ([]float32, error) {
	for _, n := range scaleNames(name) {
		if !c.Has(n) {
			continue
		}
		h, err := c.Host(n)
		if err != nil {
			return nil, err
		}
		if !h.DType().IsFloat() || h.DType() == tensor.F64 {
			return nil, fmt.Errorf("weights: %s: scale %q is %s", c.where, n, h.DType())
		}
		v := h.ToFloat32()
		out := make([]float32, rows)
		switch len(v) {
		case 1:
			for i := range out {
				out[i] = v[0]
			}
		case rows:
			copy(out, v)
		default:
			return nil, fmt.Errorf("weights: %s: scale %q has %d values for %q's %d rows (want 1 or %d)", c.where, n, len(v), name, rows, rows)
		}
		return out, nil
	}
	return nil, nil
}

// dequantized applies the checkpoint's scale, if any, to an F8E4M3 tensor
// e (data) being loaded as an ordinary weight of dtype dt: the values as f32
// and F32, or data and e.dt unchanged (also when dt is F8E4M3: as stored).
func (c *Checkpoint) dequantized(e *entry, name string, data []byte, dt tensor.DType) ([]byte, tensor.DType, error) {
	if e.dt != tensor.F8E4M3 || dt == tensor.F8E4M3 {
		return data, e.dt, nil
	}
	rows := 1
	if len(e.shape) > 0 {
		rows = e.shape[0]
	}
	sc, err := c.fp8Scale(name, rows)
	if err != nil || sc == nil {
		return data, e.dt, err
	}
	out := make([]float32, len(data))
	cols := len(data) / max(rows, 1)
	for r := 0; r < rows; r++ {
		tensor.WidenF8E4M3Scaled(out[r*cols:(r+1)*cols], data[r*cols:(r+1)*cols], sc[r])
	}
	return tensor.BytesOf(out), tensor.F32, nil
}

// partFP8 is the codes and per-row scales of checkpoint tensor p (2-D
// after its first axis: rows p.Shape[0]).
func (c *Checkpoint) partFP8(p Spec) ([]byte, []float32, error) {
	e, sh, data, err := c.checked(p.Name, p.Shape, tensor.F32)
	if err != nil {
		return nil, nil, err
	}
	defer c.drop(sh, e)
	rows := 1
	if len(e.shape) > 0 {
		rows = e.shape[0]
	}
	n := len(data) / e.dt.Size()
	if e.dt == tensor.F8E4M3 {
		sc, err := c.fp8Scale(p.Name, rows)
		if err != nil {
			return nil, nil, err
		}
		if sc == nil {
			sc = make([]float32, rows)
			for i := range sc {
				sc[i] = 1
			}
		}
		return append([]byte(nil), data...), sc, nil
	}
	f := make([]float32, n)
	cols := n / max(rows, 1)
	q, sc := make([]byte, n), make([]float32, rows)
	inRows(rows, cols, func(lo, hi int) {
		convert(tensor.BytesOf(f[lo*cols:hi*cols]), tensor.F32, data[lo*cols*e.dt.Size():hi*cols*e.dt.Size()], e.dt)
		tensor.QuantizeF8E4M3Rows(q[lo*cols:hi*cols], sc[lo:hi], f[lo*cols:hi*cols], hi-lo, cols)
	})
	return q, sc, nil
}

// inRows runs fn over blocks of rows of a (rows, cols) matrix on every
// core: quantizing a 13-billion-parameter transformer at load takes
// minutes on one.
func inRows(rows, cols int, fn func(lo, hi int)) {
	step := max(1, (1<<20)/max(cols, 1))
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	for lo := 0; lo < rows; lo += step {
		hi := min(rows, lo+step)
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			fn(lo, hi)
		}()
	}
	wg.Wait()
}

// fp8Memo keeps a quantized part between the fills of its two halves (an
// FP8 weight's codes and its scales are separate weights, each filled from
// the same quantization): the part is quantized once, and dropped when the
// other half takes it.
type fp8Memo struct {
	mu sync.Mutex
	m  map[string]fp8Part
}

type fp8Part struct {
	q  []byte
	sc []float32
}

// get returns part p quantized by quantize, or the copy the other half
// left.
func (m *fp8Memo) get(p Spec, quantize func(Spec) ([]byte, []float32, error)) ([]byte, []float32, error) {
	m.mu.Lock()
	if e, ok := m.m[p.Name]; ok {
		delete(m.m, p.Name)
		m.mu.Unlock()
		return e.q, e.sc, nil
	}
	m.mu.Unlock()
	q, sc, err := quantize(p)
	if err != nil {
		return nil, nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.m[p.Name]; ok {
		delete(m.m, p.Name) // the other half quantized it at the same time: both are served
	} else {
		if m.m == nil {
			m.m = map[string]fp8Part{}
		}
		m.m[p.Name] = fp8Part{q, sc}
	}
	return q, sc, nil
}

func (m *fp8Memo) clear() {
	m.mu.Lock()
	m.m = nil
	m.mu.Unlock()
}

// fillFP8 writes one half of the FP8 weight w into dst from its parts.
func fillFP8(w Weight, dst []byte, part func(Spec) ([]byte, []float32, error)) error {
	off := 0
	for _, p := range w.Parts {
		q, sc, err := part(p)
		if err != nil {
			return err
		}
		if w.FP8 == FP8Codes {
			off += copy(dst[off:], q)
		} else {
			off += copy(dst[off:], tensor.BytesOf(sc))
		}
	}
	if off != len(dst) {
		return fmt.Errorf("weights: fp8 weight %s: %d bytes for %d", w.Name, off, len(dst))
	}
	return nil
}

// makeFilled allocates w on be and fills it through fill.
func makeFilled(be tensor.Backend, w Weight, fill func(Weight, []byte) error) (*tensor.Tensor, error) {
	t, err := tensor.Alloc(be, w.DType, w.Shape...)
	if err != nil {
		return nil, fmt.Errorf("weights: %s (%s %v): %w", w.Name, w.DType, w.Shape, err)
	}
	if hb, ok := t.Buffer().(*tensor.HostBuffer); ok && tensor.IsHostBacked(be) {
		err = fill(w, hb.Data()[:t.Bytes()])
	} else {
		host := make([]byte, t.Bytes())
		if err = fill(w, host); err == nil {
			err = be.Upload(t.Buffer(), 0, host)
		}
	}
	if err != nil {
		tensor.Release(t)
		return nil, err
	}
	return t, nil
}

// randomFP8 quantizes the random f32 values of part p.
func (s *RandomSource) randomFP8(p Spec) ([]byte, []float32, error) {
	n := int(p.Numel())
	f := make([]float32, n)
	fillRandomParallel(tensor.BytesOf(f), tensor.F32, tensor.Invalid, p, s.Seed)
	rows := 1
	if len(p.Shape) > 0 {
		rows = p.Shape[0]
	}
	q, sc := make([]byte, n), make([]float32, rows)
	cols := n / max(rows, 1)
	inRows(rows, cols, func(lo, hi int) {
		tensor.QuantizeF8E4M3Rows(q[lo*cols:hi*cols], sc[lo:hi], f[lo*cols:hi*cols], hi-lo, cols)
	})
	return q, sc, nil
}

// GetFP8 is the Linear weight name (out, in) as F8E4M3 codes w and f32
// per-output-row scales (out).
func (b *Builder) GetFP8(name string, out, in int) (w, scale *tensor.Tensor) {
	return b.CatFP8([]string{name}, []int{out}, in)
}

// CatFP8 is Cat for FP8 weights: the named Linear weights (rows[i], in)
// stacked, as codes and per-row scales.
func (b *Builder) CatFP8(names []string, rows []int, in int) (w, scale *tensor.Tensor) {
	if len(names) != len(rows) || len(names) == 0 {
		b.Fail("weights: CatFP8 of %d names with %d row counts", len(names), len(rows))
		return nil, nil
	}
	parts := make([]Spec, len(names))
	total := 0
	for i, n := range names {
		parts[i] = Spec{Name: b.prefix + n, Shape: []int{rows[i], in}}
		total += rows[i]
	}
	c := *b
	c.dt, c.round = tensor.F8E4M3, tensor.Invalid
	w = c.makeFP8(parts[0].Name, []int{total, in}, parts, FP8Codes)
	c.dt = tensor.F32
	scale = c.makeFP8(parts[0].Name+":scale", []int{total}, parts, FP8Scales)
	return w, scale
}

// FP8 is a builder whose Linear weights that a model loads through
// LinearFP8Weights are FP8.
func (b *Builder) FP8() *Builder {
	c := *b
	c.fp8 = true
	return &c
}

// IsFP8 reports whether the builder was asked for FP8 Linear weights.
func (b *Builder) IsFP8() bool { return b.fp8 }
