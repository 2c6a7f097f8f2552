package tensor

import (
	"reflect"
	"testing"
)

func TestCollapseAxes(t *testing.T) {
	// A contiguous (2, 3, 4) view is one row of 24; a permuted one is not.
	sh, st := CollapseAxes([]int{2, 3, 4}, []int{12, 4, 1})
	if !reflect.DeepEqual(sh, []int{24}) || !reflect.DeepEqual(st, [][]int{{1}}) {
		t.Errorf("contiguous: %v %v", sh, st)
	}
	sh, st = CollapseAxes([]int{2, 1, 3, 4}, []int{12, 12, 1, 3}, []int{12, 12, 4, 1})
	if !reflect.DeepEqual(sh, []int{2, 3, 4}) || !reflect.DeepEqual(st, [][]int{{12, 1, 3}, {12, 4, 1}}) {
		t.Errorf("transposed: %v %v", sh, st)
	}
	sh, st = CollapseAxes([]int{1, 1}, []int{5, 7})
	if !reflect.DeepEqual(sh, []int{1}) || !reflect.DeepEqual(st, [][]int{{1}}) {
		t.Errorf("one element: %v %v", sh, st)
	}
}

func TestCheckView(t *testing.T) {
	for _, c := range []struct {
		off            int
		strides, shape []int
		n              int
		ok             bool
	}{
		{0, []int{4, 1}, []int{3, 4}, 12, true},
		{1, []int{4, 1}, []int{3, 4}, 12, false},
		{11, []int{-4, -1}, []int{3, 4}, 12, true},
		{10, []int{-4, -1}, []int{3, 4}, 12, false},
		{0, []int{0, 1}, []int{100, 4}, 4, true},
		{50, []int{1}, []int{0}, 4, true},
		{0, []int{1}, []int{2, 2}, 4, false},
	} {
		if err := CheckView(c.off, c.strides, c.shape, c.n); (err == nil) != c.ok {
			t.Errorf("CheckView(%d, %v, %v, %d) = %v, want ok %v", c.off, c.strides, c.shape, c.n, err, c.ok)
		}
	}
}
