package cpu

import (
	"slices"
	"testing"

	"github.com/framepack-go/framepack/tensor"
)

// padRef pads trailing axes of x in float64 by index arithmetic.
func padRef(x []float32, shape, before, after []int, replicate bool) ([]float64, []int) {
	r := len(shape)
	bf, out := make([]int, r), append([]int(nil), shape...)
	for i := range before {
		ax := r - len(before) + i
		bf[ax] = before[i]
		out[ax] += before[i] + after[i]
	}
	n := tensor.Numel(out)
	want := make([]float64, n)
	st := tensor.ContiguousStrides(shape)
	for i := 0; i < n; i++ {
		rem, off, inside := i, 0, true
		for ax := r - 1; ax >= 0; ax-- {
			j := rem%out[ax] - bf[ax]
			rem /= out[ax]
			if j < 0 || j >= shape[ax] {
				inside = false
				j = min(max(j, 0), shape[ax]-1)
			}
			off += j * st[ax]
		}
		if inside || replicate {
			want[i] = float64(x[off])
		}
	}
	return want, out
}

func TestPad(t *testing.T) {
	_, s := scope(t)
	r := rng(40)
	cases := []struct {
		shape, before, after []int
	}{
		{[]int{2, 3, 4}, []int{1}, []int{2}},
		{[]int{2, 3, 4}, []int{0, 1}, []int{2, 0}},
		{[]int{1, 2, 3, 5, 7}, []int{2, 1, 1}, []int{0, 1, 1}}, // causal-conv style time padding
		{[]int{3, 1}, []int{3, 0}, []int{1, 4}},
		{[]int{4}, []int{}, []int{}},
	}
	for _, c := range cases {
		for _, dt := range []tensor.DType{tensor.F32, tensor.BF16, tensor.I64} {
			for _, mode := range []tensor.PadMode{tensor.PadZeros, tensor.PadReplicate} {
				xv := make([]float32, tensor.Numel(c.shape))
				for i := range xv {
					xv[i] = float32(r.IntN(100) + 1)
				}
				x := s.Cast(input(s, tensor.F32, xv, c.shape...), dt)
				var y *tensor.Tensor
				must(t, func() { y = s.Pad(x, c.before, c.after, mode) })
				want, shape := padRef(xv, c.shape, c.before, c.after, mode == tensor.PadReplicate)
				if !slices.Equal(y.Shape(), shape) {
					t.Fatalf("pad shape %v, want %v", y.Shape(), shape)
				}
				compare(t, name("pad ", dt, c, mode), values(s, s.Cast(y, tensor.F32)), want, exact)
			}
		}
	}
	// Zero-padding an empty axis is zeros; replicate-padding it is an error.
	e := s.Zeros(tensor.F32, 2, 0)
	y := s.Pad(e, []int{1}, []int{1}, tensor.PadZeros)
	compare(t, "pad empty", y.Float32s(), make([]float64, 4), exact)
	if err := tensor.Catch(func() { s.Pad(e, []int{1}, []int{1}, tensor.PadReplicate) }); err == nil {
		t.Error("replicate-padding an empty axis succeeded")
	}
}

func TestUpsampleNearest(t *testing.T) {
	_, s := scope(t)
	r := rng(41)
	for _, c := range []struct {
		shape []int
		scale [3]int
	}{
		{[]int{2, 3, 2, 3, 4}, [3]int{1, 2, 2}},
		{[]int{1, 2, 3, 1, 5}, [3]int{2, 3, 1}},
		{[]int{2, 1, 1}, [3]int{3, 1, 2}},
	} {
		for _, dt := range []tensor.DType{tensor.F32, tensor.F16, tensor.U8} {
			xv := make([]float32, tensor.Numel(c.shape))
			for i := range xv {
				xv[i] = float32(r.IntN(200))
			}
			x := s.Cast(input(s, tensor.F32, xv, c.shape...), dt)
			var y *tensor.Tensor
			must(t, func() { y = s.UpsampleNearest(x, c.scale) })
			out := y.Shape()
			r := len(out)
			st := tensor.ContiguousStrides(c.shape)
			want := make([]float64, tensor.Numel(out))
			for i := range want {
				rem, off := i, 0
				for ax := r - 1; ax >= 0; ax-- {
					j := rem % out[ax]
					rem /= out[ax]
					if ax >= r-3 {
						j /= c.scale[ax-(r-3)]
					}
					off += j * st[ax]
				}
				want[i] = float64(xv[off])
			}
			compare(t, name("upsample ", dt, c), values(s, s.Cast(y, tensor.F32)), want, exact)
		}
	}
}

func TestAvgPool3d(t *testing.T) {
	_, s := scope(t)
	r := rng(42)
	for _, c := range []struct {
		shape []int
		k     [3]int
	}{
		{[]int{2, 3, 4, 6, 6}, [3]int{2, 2, 2}},
		{[]int{1, 2, 3, 4, 5}, [3]int{3, 1, 5}},
		{[]int{2, 1, 1}, [3]int{1, 1, 1}},
	} {
		for _, dt := range floatTypes {
			xv := randVals(r, dt, tensor.Numel(c.shape), -1, 2)
			var y *tensor.Tensor
			must(t, func() { y = s.AvgPool3d(input(s, dt, xv, c.shape...), c.k) })
			out := y.Shape()
			rk := len(out)
			st := tensor.ContiguousStrides(c.shape)
			want, scale := make([]float64, tensor.Numel(out)), make([]float64, tensor.Numel(out))
			n := float64(c.k[0] * c.k[1] * c.k[2])
			for i := range want {
				rem, base := i, 0
				var idx [3]int
				for ax := rk - 1; ax >= 0; ax-- {
					j := rem % out[ax]
					rem /= out[ax]
					if ax >= rk-3 {
						idx[ax-(rk-3)] = j * c.k[ax-(rk-3)]
						j *= c.k[ax-(rk-3)]
					}
					base += j * st[ax]
				}
				for a := 0; a < c.k[0]; a++ {
					for b := 0; b < c.k[1]; b++ {
						for d := 0; d < c.k[2]; d++ {
							v := float64(xv[base+a*st[rk-3]+b*st[rk-2]+d])
							want[i] += v / n
							scale[i] += max(v, -v) / n
						}
					}
				}
			}
			compare(t, name("avg_pool3d ", dt, c), values(s, y), want, within(dt, scale))
		}
	}
}

func TestEmbedding(t *testing.T) {
	be, s := scope(t)
	r := rng(43)
	V, D := 11, 7
	for _, dt := range []tensor.DType{tensor.F32, tensor.BF16} {
		tv := randVals(r, dt, V*D, -1, 1)
		table := input(s, dt, tv, V, D)
		ids := []int64{3, 0, 10, 3, 5, 1}
		for _, idt := range []tensor.DType{tensor.I64, tensor.I32} {
			idT := s.Cast(s.To(tensor.FromInt64(ids, 2, 3)), idt)
			var y *tensor.Tensor
			must(t, func() { y = s.Embedding(table, idT) })
			if !slices.Equal(y.Shape(), []int{2, 3, D}) {
				t.Fatalf("embedding shape %v", y.Shape())
			}
			want := make([]float64, 0, len(ids)*D)
			for _, id := range ids {
				want = append(want, f64s(tv[int(id)*D:(int(id)+1)*D])...)
			}
			compare(t, name("embedding ", dt, idt), values(s, y), want, exact)
		}
	}
	// An id outside the table is an error.
	out := s.Empty(tensor.F32, 1, D)
	bad := s.To(tensor.FromInt64([]int64{int64(V)}, 1))
	if err := be.Embedding(out, s.Zeros(tensor.F32, V, D), bad); err == nil {
		t.Error("id outside the table accepted")
	}
}
