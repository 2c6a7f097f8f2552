package tensor

import (
	"slices"
	"strings"
	"testing"
)

// Each check accepts a good call and names the problem of a bad one.
func TestOperandChecks(t *testing.T) {
	f32 := func(shape ...int) *Tensor { return New(F32, shape...) }
	f16 := func(shape ...int) *Tensor { return New(F16, shape...) }
	attn := func(q, k, v *Tensor, p AttnParams) error {
		_, err := CheckAttention(f32(q.Shape()...), q, k, v, p)
		return err
	}
	rows := func(dst, x *Tensor, params ...*Tensor) error {
		_, _, err := Rows("layer_norm", dst, x, params...)
		return err
	}
	matmul := func(p MatMulParams, dst, a, b *Tensor) error {
		_, _, err := p.Strides(dst, a, b)
		return err
	}
	embedding := func(dst, table, ids *Tensor) error {
		_, _, err := CheckEmbedding(dst, table, ids)
		return err
	}
	binary := func(op BinaryOp, dst, a *Tensor, aSt []int, b *Tensor, bSt []int) error {
		_, _, _, err := CheckBinary(op, dst, a, aSt, b, bSt)
		return err
	}
	pad := func(dst, src *Tensor, before []int, mode PadMode) error {
		_, err := CheckPad(dst, src, before, mode)
		return err
	}
	linear := func(dst, x, w, bias *Tensor) error {
		_, _, _, err := CheckLinear(dst, x, w, bias)
		return err
	}
	for _, c := range []struct {
		name string
		err  error
		want string // "" for no error
	}{
		{"affine ok", CheckAffine("op", F32, 3, f32(3), nil), ""},
		{"affine dtype", CheckAffine("op", F32, 3, f16(3)), "op: parameter"},
		{"affine size", CheckAffine("op", F32, 3, f32(4)), "for 3 channels"},
		{"group norm ok", CheckGroupNorm(f32(2, 4, 5), f32(2, 4, 5), f32(4), f32(4), 2), ""},
		{"group norm groups", CheckGroupNorm(f32(2, 4, 5), f32(2, 4, 5), nil, nil, 3), "in 3 groups"},
		{"group norm weight", CheckGroupNorm(f32(2, 4, 5), f32(2, 4, 5), f32(5), nil, 2), "for 4 channels"},
		{"rows ok", rows(f32(2, 3), f32(2, 3), f32(3)), ""},
		{"rows size", rows(f32(2, 4), f32(2, 3)), "layer_norm of"},
		{"rows weight", rows(f32(2, 3), f32(2, 3), f32(2)), "for 3 channels"},
		{"copy ok", CheckCopy(f32(6), 0, []int{1}, f32(6), 0, []int{1}, []int{6}), ""},
		{"copy dtype", CheckCopy(f32(6), 0, []int{1}, f16(6), 0, []int{1}, []int{6}), "copy of f16 into f32"},
		{"copy empty", CheckCopy(f32(1), 5, []int{1}, f32(1), 9, []int{1}, []int{0}), ""},
		{"copy outside", CheckCopy(f32(6), 1, []int{1}, f32(6), 0, []int{1}, []int{6}), "view"},
		{"upsample ok", CheckUpsample(f32(2, 2, 4, 6), f32(2, 1, 2, 3), [3]int{2, 2, 2}), ""},
		{"upsample rank", CheckUpsample(f32(2, 4, 6), f32(2, 1, 2, 3), [3]int{2, 2, 2}), "upsample of"},
		{"upsample factor", CheckUpsample(f32(2, 2, 4, 7), f32(2, 1, 2, 3), [3]int{2, 2, 2}), "by [2 2 2]"},
		{"upsample dtype", CheckUpsample(f16(2, 2, 4, 6), f32(2, 1, 2, 3), [3]int{2, 2, 2}), "upsample of"},
		{"pad ok", pad(f32(2, 5, 6), f32(2, 3, 3), []int{1, 2}, PadReplicate), ""},
		{"pad rank", pad(f32(5, 6), f32(2, 3, 3), []int{1, 2}, PadZeros), "pad of"},
		{"pad mode", pad(f32(2, 5, 6), f32(2, 3, 3), []int{1, 2}, PadMode(9)), "pad mode 9"},
		{"pad too small", pad(f32(2, 4, 6), f32(2, 3, 3), []int{2, 2}, PadZeros), "with [2 2] in front"},
		{"pad replicate empty", pad(f32(2, 1, 6), f32(2, 0, 3), []int{1, 2}, PadReplicate), "in front"},
		{"avg pool ok", CheckAvgPool3d(f32(1, 1, 2, 3), f32(1, 2, 4, 3), [3]int{2, 2, 1}), ""},
		{"avg pool zero kernel", CheckAvgPool3d(f32(1, 1, 2, 3), f32(1, 2, 4, 3), [3]int{2, 2, 0}), "by [2 2 0]"},
		{"attention ok", attn(f32(1, 5, 4, 8), f32(1, 7, 2, 8), f32(1, 7, 2, 8), AttnParams{Mask: f32(1, 5, 7)}), ""},
		{"attention heads", attn(f32(1, 5, 4, 8), f32(1, 7, 3, 8), f32(1, 7, 3, 8), AttnParams{}), "with k"},
		{"attention key mask", attn(f32(1, 5, 4, 8), f32(1, 7, 2, 8), f32(1, 7, 2, 8), AttnParams{KeyMask: f32(1, 6)}), "key mask"},
		{"attention mask", attn(f32(1, 5, 4, 8), f32(1, 7, 2, 8), f32(1, 7, 2, 8), AttnParams{Mask: f32(2, 5, 7)}), "want f32 (B|1, 5, 7)"},
		{"matmul ok", matmul(MatMulParams{Batch: 2, M: 2, N: 3, K: 4}, f32(2, 2, 3), f32(2, 4), f32(2, 4, 3)), ""},
		{"matmul dst", matmul(MatMulParams{Batch: 2, M: 2, N: 3, K: 4}, f32(2, 3), f32(2, 4), f32(4, 3)), "into"},
		{"embedding ok", embedding(f32(3, 4), f32(10, 4), New(I32, 3)), ""},
		{"embedding size", embedding(f32(3, 5), f32(10, 4), New(I64, 3)), "3 ids"},
		{"embedding ids", embedding(f32(3, 4), f32(10, 4), f32(3)), "ids of f32"},
		{"binary ok", binary(OpAdd, f32(2, 3), f32(3), []int{0, 1}, f32(2, 3), []int{3, 1}), ""},
		{"binary dtype", binary(OpAdd, f32(2, 3), f16(3), []int{0, 1}, f32(2, 3), []int{3, 1}), "of f16 and f32"},
		{"binary view", binary(OpAdd, f32(2, 3), f32(3), []int{1, 1}, f32(2, 3), []int{3, 1}), "view"},
		{"linear ok", linear(f32(2, 3), f32(2, 4), f32(3, 4), f32(3)), ""},
		{"linear bias", linear(f32(2, 3), f32(2, 4), f32(3, 4), f32(4)), "linear of"},
		{"linear rank", linear(f32(2, 3), f32(8), f32(3, 4), nil), "2-D"},
		{"matmul operand", matmul(MatMulParams{Batch: 2, M: 2, N: 3, K: 4}, f32(2, 2, 3), f32(3, 4), f32(4, 3)), "operand"},
	} {
		switch {
		case c.want == "" && c.err != nil:
			t.Errorf("%s: %v", c.name, c.err)
		case c.want != "" && (c.err == nil || !strings.Contains(c.err.Error(), c.want)):
			t.Errorf("%s: error %v, want one saying %q", c.name, c.err, c.want)
		}
	}
}

// Strides says which operand every batch shares; MaskStride which mask is
// per batch; Scale defaults to 1.
func TestCheckResults(t *testing.T) {
	p := MatMulParams{Batch: 3, M: 2, N: 5, K: 4}
	sa, sb, err := p.Strides(New(F32, 3, 2, 5), New(F32, 2, 4), New(F32, 3, 4, 5))
	if err != nil || sa != 0 || sb != 20 {
		t.Errorf("strides %d, %d, %v; want 0, 20", sa, sb, err)
	}
	if p.Scale() != 1 || (MatMulParams{Alpha: 0.5}).Scale() != 0.5 {
		t.Error("Scale")
	}
	q, kv := New(F32, 2, 5, 4, 8), New(F32, 2, 7, 2, 8)
	d, err := CheckAttention(New(F32, 2, 5, 4, 8), q, kv, kv, AttnParams{Mask: New(F32, 2, 5, 7)})
	if err != nil || d != (AttnDims{B: 2, Lq: 5, Lk: 7, Hq: 4, Hkv: 2, D: 8, MaskStride: 35}) {
		t.Errorf("dims %+v, %v", d, err)
	}
	d, _ = CheckAttention(New(F32, 2, 5, 4, 8), q, kv, kv, AttnParams{Mask: New(F32, 1, 5, 7)})
	if d.MaskStride != 0 {
		t.Errorf("a shared mask has stride %d", d.MaskStride)
	}
	if bf, err := CheckPad(New(F32, 2, 5, 6), New(F32, 2, 3, 3), []int{1, 2}, PadZeros); err != nil || !slices.Equal(bf, []int{0, 1, 2}) {
		t.Errorf("pad in front %v, %v; want [0 1 2]", bf, err)
	}
}
