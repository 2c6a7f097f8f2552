package tensor

import "fmt"

// CollapseAxes drops unit axes of a strided view and merges adjacent axes
// that are contiguous in every stride set, so a kernel runs over as few and
// as long rows as possible. A view of one element comes back as shape [1].
func CollapseAxes(shape []int, strides ...[]int) ([]int, [][]int) {
	var sh []int
	st := make([][]int, len(strides))
	for ax, n := range shape {
		if n == 1 {
			continue
		}
		if len(sh) > 0 {
			last := len(sh) - 1
			merge := true
			for k := range strides {
				if st[k][last] != strides[k][ax]*n {
					merge = false
					break
				}
			}
			if merge {
				sh[last] *= n
				for k := range strides {
					st[k][last] = strides[k][ax]
				}
				continue
			}
		}
		sh = append(sh, n)
		for k := range strides {
			st[k] = append(st[k], strides[k][ax])
		}
	}
	if len(sh) == 0 {
		sh = []int{1}
		for k := range strides {
			st[k] = []int{1}
		}
	}
	return sh, st
}

// CheckView reports an error when a strided view (offset and strides in
// elements) reaches outside a tensor of n elements.
func CheckView(off int, strides, shape []int, n int) error {
	if len(strides) != len(shape) {
		return fmt.Errorf("%d strides for shape %v", len(strides), shape)
	}
	lo, hi := off, off
	for i, d := range shape {
		if d == 0 {
			return nil
		}
		if s := strides[i] * (d - 1); s > 0 {
			hi += s
		} else {
			lo += s
		}
	}
	if lo < 0 || hi >= n {
		return fmt.Errorf("view at %d with strides %v over %v leaves the %d elements of its tensor", off, strides, shape, n)
	}
	return nil
}
