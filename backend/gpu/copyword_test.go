package gpu

import "testing"

// The word a strided copy moves at once divides every run, address and
// outer stride, and never exceeds 16 bytes.
func TestCopyWord(t *testing.T) {
	for _, c := range []struct {
		name       string
		es         int
		pd, ps     uintptr
		dOff, sOff int
		sh         []int
		st         [][]int
		want       int
	}{
		{"head split bf16", 2, 0x1000, 0x2000, 0, 32, []int{10, 4, 16}, [][]int{{64, 16, 1}, {128, 16, 1}}, 16},
		{"odd column offset", 2, 0x1000, 0x2000, 1, 0, []int{3, 6}, [][]int{{10, 1}, {6, 1}}, 2},
		{"8-byte run f32", 4, 0x1000, 0x2000, 2, 0, []int{3, 6}, [][]int{{10, 1}, {6, 1}}, 8},
		{"misaligned base", 2, 0x1002, 0x2000, 0, 0, []int{4, 64}, [][]int{{64, 1}, {64, 1}}, 2},
		{"base and offset misaligned alike", 2, 0x1008, 0x2000, 4, 0, []int{4, 64}, [][]int{{64, 1}, {64, 1}}, 8},
		{"transpose", 2, 0x1000, 0x2000, 0, 0, []int{8, 8}, [][]int{{8, 1}, {1, 8}}, 2},
		{"broadcast row", 1, 0x1000, 0x2000, 0, 0, []int{7, 32}, [][]int{{32, 1}, {0, 1}}, 16},
		{"wide u8 run", 1, 0x1000, 0x2000, 0, 0, []int{2, 64}, [][]int{{64, 1}, {64, 1}}, 16},
	} {
		if got := copyWord(c.es, c.pd, c.ps, c.dOff, c.sOff, c.sh, c.st); got != c.want {
			t.Errorf("%s: %d-byte words, want %d", c.name, got, c.want)
		}
	}
}
