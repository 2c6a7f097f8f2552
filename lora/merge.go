package lora

import (
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"
	"unsafe"

	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/weights"
)

// delta is one LoRA's update of rows [row, row+rows) of a checkpoint
// tensor: factor·B·A, B rows×rank, A rank×in.
type delta struct {
	row, rows, rank, in int
	a, b                []float32
	factor              float32
}

// Set is what the LoRAs of a run change, by checkpoint tensor name.
type Set struct {
	deltas map[string][]delta
}

// Len is the number of checkpoint tensors the set changes.
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	return len(s.deltas)
}

// Touches reports whether merging changes w: whether any part of it is
// adapted. FP8 weights are never merged (3 mantissa bits would lose most of
// a LoRA's update); their LoRAs are added at run time (LowRank).
func (s *Set) Touches(w weights.Weight) bool {
	if s == nil || w.FP8 != weights.NotFP8 {
		return false
	}
	for _, p := range w.Parts {
		if len(s.deltas[p.Name]) > 0 {
			return true
		}
	}
	return false
}

// Resolve reads files and maps every module they adapt onto the
// transformer's checkpoint tensors plan (hunyuan.Plan). A module that
// matches no tensor, or whose factors do not fit it, fails, naming a few
// unmatched modules and how many there are.
func Resolve(files []File, plan []weights.Spec) (*Set, error) {
	tg := newTargets(plan)
	s := &Set{deltas: map[string][]delta{}}
	for _, f := range files {
		if math.IsNaN(f.Scale) || math.IsInf(f.Scale, 0) {
			return nil, fmt.Errorf("lora %s: scale %v is not a finite number", f.Path, f.Scale)
		}
		pairs, err := Read(f.Path)
		if err != nil {
			return nil, err
		}
		if len(pairs) == 0 {
			return nil, fmt.Errorf("lora %s: no LoRA factors in the file", f.Path)
		}
		var unmatched []string
		for _, p := range pairs {
			parts := tg.find(p.Module)
			if parts == nil {
				unmatched = append(unmatched, p.Module)
				continue
			}
			rows := 0
			for _, q := range parts {
				rows += q.Shape[0]
				if q.Shape[1] != p.In {
					return nil, fmt.Errorf("lora %s: module %s has %d inputs, the transformer's %s has %d", f.Path, p.Module, p.In, q.Name, q.Shape[1])
				}
			}
			if rows != p.Out {
				return nil, fmt.Errorf("lora %s: module %s has %d outputs, the transformer's %s has %d", f.Path, p.Module, p.Out, names(parts), rows)
			}
			factor := float32(f.Scale * p.Alpha / float64(p.Rank))
			off := 0
			for _, q := range parts {
				n := q.Shape[0]
				s.deltas[q.Name] = append(s.deltas[q.Name], delta{
					rows: n, rank: p.Rank, in: p.In, a: p.Down,
					b: p.Up[off*p.Rank : (off+n)*p.Rank], factor: factor,
				})
				off += n
			}
		}
		if len(unmatched) > 0 {
			return nil, fmt.Errorf("lora %s: %d of %d modules match no weight of the transformer: %s", f.Path, len(unmatched), len(pairs), few(unmatched))
		}
	}
	return s, nil
}

func names(ss []weights.Spec) string {
	var n []string
	for _, s := range ss {
		n = append(n, s.Name)
	}
	return strings.Join(n, "|")
}

// Apply adds the set's deltas for checkpoint tensor name (rows×in, f32
// row-major) into w.
func (s *Set) Apply(name string, w []float32, in int) {
	for _, d := range s.deltas[name] {
		addLowRank(w[d.row*in:], d, in)
	}
}

// LowRank is the set's update of the Linear whose weight stacks parts
// (each (rows, in)) as two factors, so that the update of y = x·Wᵀ is
// (x·Aᵀ)·Bᵀ: A (r, in) stacks every delta's down factor, B (out, r) its
// up factor times its scale in the delta's rows and columns, zeros
// elsewhere. ok is false when no part is adapted.
func (s *Set) LowRank(parts []weights.Spec) (a, b []float32, r, in int, ok bool) {
	if s == nil {
		return nil, nil, 0, 0, false
	}
	out := 0
	for _, p := range parts {
		for _, d := range s.deltas[p.Name] {
			r += d.rank
			in = d.in
		}
		out += p.Shape[0]
	}
	if r == 0 {
		return nil, nil, 0, 0, false
	}
	a, b = make([]float32, r*in), make([]float32, out*r)
	col, row := 0, 0
	for _, p := range parts {
		for _, d := range s.deltas[p.Name] {
			copy(a[col*in:], d.a[:d.rank*in])
			for i := 0; i < d.rows; i++ {
				for k := 0; k < d.rank; k++ {
					b[(row+d.row+i)*r+col+k] = d.factor * d.b[i*d.rank+k]
				}
			}
			col += d.rank
		}
		row += p.Shape[0]
	}
	return a, b, r, in, true
}

// addLowRank adds d.factor·B·A to the rows×in matrix w, in f32, rows in
// parallel.
func addLowRank(w []float32, d delta, in int) {
	workers := min(runtime.GOMAXPROCS(0), d.rows)
	per := (d.rows + workers - 1) / workers
	var wg sync.WaitGroup
	for lo := 0; lo < d.rows; lo += per {
		hi := min(lo+per, d.rows)
		wg.Add(1)
		go func() {
			defer wg.Done()
			acc := make([]float32, in)
			for r := lo; r < hi; r++ {
				clear(acc)
				for k := 0; k < d.rank; k++ {
					bk := d.b[r*d.rank+k]
					if bk == 0 {
						continue
					}
					ak := d.a[k*in : (k+1)*in]
					for j, v := range ak {
						acc[j] += bk * v
					}
				}
				row := w[r*in : (r+1)*in]
				for j, v := range acc {
					row[j] += d.factor * v
				}
			}
		}()
	}
	wg.Wait()
}

// Source makes weights from Inner with the set's LoRAs merged in: a weight
// with a changed part is read in f32, updated, and rounded once to its
// dtype (through its Round dtype first, as Inner would).
type Source struct {
	Inner weights.Filler
	Be    tensor.Backend
	Set   *Set
}

// Make makes w, merged when the set changes it.
func (s *Source) Make(w weights.Weight) (*tensor.Tensor, error) {
	if !s.Set.Touches(w) {
		return s.Inner.Make(w)
	}
	t, err := tensor.Alloc(s.Be, w.DType, w.Shape...)
	if err != nil {
		return nil, fmt.Errorf("lora: weight %s: %w", w.Name, err)
	}
	host := make([]byte, t.Bytes())
	if err = s.Fill(w, host); err == nil {
		err = s.Be.Upload(t.Buffer(), 0, host)
	}
	if err != nil {
		tensor.Release(t)
		return nil, err
	}
	return t, nil
}

// Ranged lets weights the set leaves alone be read in pieces, as Inner
// reads them (weights.RangeFiller); a merged weight is made whole.
func (s *Source) Ranged(w weights.Weight) (int, bool) {
	rf, ok := s.Inner.(weights.RangeFiller)
	if !ok || s.Set.Touches(w) {
		return 0, false
	}
	return rf.Ranged(w)
}

// FillRange fills part of a weight the set leaves alone, through Inner.
func (s *Source) FillRange(w weights.Weight, p int, lo, hi int64, dst, buf []byte) error {
	rf, ok := s.Inner.(weights.RangeFiller)
	if !ok || s.Set.Touches(w) {
		return fmt.Errorf("lora: weight %s cannot be filled in pieces", w.Name)
	}
	return rf.FillRange(w, p, lo, hi, dst, buf)
}

// FP8Input and FillFP8Input give Inner's unquantized values of an FP8
// weight (weights.FP8Inputs), unmerged: the set never changes FP8 weights.
func (s *Source) FP8Input(w weights.Weight) (weights.Weight, bool) {
	if fi, ok := s.Inner.(weights.FP8Inputs); ok {
		return fi.FP8Input(w)
	}
	return weights.Weight{}, false
}

func (s *Source) FillFP8Input(in weights.Weight, dst []byte) error {
	fi, ok := s.Inner.(weights.FP8Inputs)
	if !ok {
		return fmt.Errorf("lora: %s: the source has no unquantized FP8 values", in.Name)
	}
	return fi.FillFP8Input(in, dst)
}

// Fill writes w's values, merged when the set changes it, into dst.
func (s *Source) Fill(w weights.Weight, dst []byte) error {
	if !s.Set.Touches(w) {
		return s.Inner.Fill(w, dst)
	}
	n := int(weights.Spec{Shape: w.Shape}.Numel())
	f := make([]float32, n)
	wf := w
	wf.DType, wf.Round = tensor.F32, tensor.Invalid
	if err := s.Inner.Fill(wf, unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(f))), 4*n)); err != nil {
		return err
	}
	off := 0
	for _, p := range w.Parts {
		m := int(p.Numel())
		if len(p.Shape) == 2 {
			s.Set.Apply(p.Name, f[off:off+m], p.Shape[1])
		}
		off += m
	}
	return storeAs(dst, w.DType, w.Round, f)
}

// storeAs writes f into dst as dtype dt, rounded through round first.
func storeAs(dst []byte, dt, round tensor.DType, f []float32) error {
	switch round {
	case tensor.BF16:
		for i, v := range f {
			f[i] = tensor.RoundBF16(v)
		}
	case tensor.F16:
		for i, v := range f {
			f[i] = tensor.RoundF16(v)
		}
	}
	switch dt {
	case tensor.F32:
		copy(dst, unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(f))), 4*len(f)))
	case tensor.BF16:
		u := unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(dst))), len(f))
		for i, v := range f {
			u[i] = tensor.BF16FromF32(v)
		}
	case tensor.F16:
		u := unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(dst))), len(f))
		tensor.NarrowF16(u, f)
	default:
		return fmt.Errorf("lora: cannot merge into a %s weight", dt)
	}
	return nil
}

// TouchesAny reports whether any of ws is changed.
func (s *Set) TouchesAny(ws []weights.Weight) bool {
	for _, w := range ws {
		if s.Touches(w) {
			return true
		}
	}
	return false
}
