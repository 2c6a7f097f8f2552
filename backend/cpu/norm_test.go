package cpu

import (
	"math"
	"testing"

	"github.com/framepack-go/framepack/tensor"
)

func meanVar64(x []float32) (float64, float64) {
	var s float64
	for _, v := range x {
		s += float64(v)
	}
	m := s / float64(len(x))
	var q float64
	for _, v := range x {
		q += (float64(v) - m) * (float64(v) - m)
	}
	return m, q / float64(len(x))
}

// roundOut rounds a float64 reference value to dt, for references whose
// intermediate values the kernel rounds as the PyTorch reference does.
func roundOut(dt tensor.DType, v float64) float64 { return float64(tensor.Rounder(dt)(float32(v))) }

// normSiLU, expf written out in its loop (and in vector code where the
// CPU has it), gives siluf's values bit for bit, at the edges of expf's
// range and beyond it too, with such values alone and among others in a
// vector block; and the vector loop takes the blocks without them.
func TestNormSiLUIsSiluf(t *testing.T) {
	r := rng(21)
	xs := []float32{0, -0, 1, -1, 88.9, 89, 89.1, 103.9, 104, 104.1, -89, -104.1, 1e30, -1e30,
		float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), math.SmallestNonzeroFloat32, math.MaxFloat32}
	for range 10000 {
		xs = append(xs, float32(r.NormFloat64()*20))
	}
	for range 200000 { // expf's whole range, evenly
		xs = append(xs, float32(r.Float64()*210-105))
	}
	if haveAVX2 {
		in := make([]float32, 64)
		for i := range in {
			in[i] = float32(i)/8 - 4
		}
		if n := normSiLU8(make([]float32, 64), in, 0, 1, 0, &expTable); n != 64 {
			t.Fatalf("the vector loop did %d of 64 values inside expf's range", n)
		}
	}
	ys := make([]float32, len(xs))
	const m, sc, h = 0.25, 1.5, -0.125
	normSiLU(ys, xs, m, sc, h)
	for i, v := range xs {
		want := siluf(float32((v-m)*sc) + h)
		if math.Float32bits(ys[i]) != math.Float32bits(want) && !(ys[i] != ys[i] && want != want) {
			t.Fatalf("x %v: normSiLU %v, siluf %v", v, ys[i], want)
		}
	}
}

func TestGroupNorm(t *testing.T) {
	_, s := scope(t)
	r := rng(20)
	shapes := [][]int{{1, 4, 3, 5, 7}, {2, 6, 17}, {3, 8}, {1, 32, 2, 3, 3}}
	for _, shape := range shapes {
		for _, groups := range []int{1, 2} {
			for _, dt := range floatTypes {
				for _, affine := range []bool{false, true} {
					for _, silu := range []bool{false, true} {
						B, C := shape[0], shape[1]
						S := tensor.Numel(shape) / (B * C)
						// An offset mean tests the two-pass statistics.
						xv := randVals(r, dt, tensor.Numel(shape), 2, 5)
						wv, bv := randVals(r, dt, C, 0.5, 1.5), randVals(r, dt, C, -1, 1)
						var w, b *tensor.Tensor
						if affine {
							w, b = input(s, dt, wv, C), input(s, dt, bv, C)
						}
						x := input(s, dt, xv, shape...)
						var y *tensor.Tensor
						must(t, func() {
							if silu {
								y = s.GroupNormSiLU(x, w, b, groups, 1e-6)
							} else {
								y = s.GroupNorm(x, w, b, groups, 1e-6)
							}
						})
						want := make([]float64, len(xv))
						scale := make([]float64, len(xv)) // |x|·rstd·|w|: f32 rounds x − mean on that scale
						cg := C / groups
						for bi := 0; bi < B; bi++ {
							for g := 0; g < groups; g++ {
								lo := (bi*C + g*cg) * S
								m, v := meanVar64(xv[lo : lo+cg*S])
								for i := lo; i < lo+cg*S; i++ {
									c := (i / S) % C
									y := (float64(xv[i]) - m) / math.Sqrt(v+1e-6)
									scale[i] = math.Abs(float64(xv[i])) / math.Sqrt(v+1e-6)
									if affine {
										y = y*float64(wv[c]) + float64(bv[c])
										scale[i] = scale[i]*float64(wv[c]) + math.Abs(float64(bv[c]))
									}
									if silu {
										y = roundOut(dt, y) // the reference's GroupNorm output
										y = y / (1 + math.Exp(-y))
									}
									want[i] = y
								}
							}
						}
						compare(t, name("group_norm ", dt, shape, " groups ", groups, " affine ", affine, " silu ", silu),
							values(s, y), want, within(dt, scale))
					}
				}
			}
		}
	}
}

func TestLayerNorm(t *testing.T) {
	_, s := scope(t)
	r := rng(21)
	for _, shape := range [][]int{{1, 1}, {3, 7}, {2, 5, 33}, {4, 1000}} {
		for _, dt := range floatTypes {
			for _, affine := range []bool{false, true} {
				d := shape[len(shape)-1]
				xv := randVals(r, dt, tensor.Numel(shape), -3, 5)
				wv, bv := randVals(r, dt, d, 0.5, 1.5), randVals(r, dt, d, -1, 1)
				var w, b *tensor.Tensor
				if affine {
					w, b = input(s, dt, wv, d), input(s, dt, bv, d)
				}
				var y *tensor.Tensor
				must(t, func() { y = s.LayerNorm(input(s, dt, xv, shape...), w, b, 1e-5) })
				want := make([]float64, len(xv))
				scale := make([]float64, len(xv))
				for row := 0; row < len(xv)/d; row++ {
					m, v := meanVar64(xv[row*d : (row+1)*d])
					for j := 0; j < d; j++ {
						i := row*d + j
						y := (float64(xv[i]) - m) / math.Sqrt(v+1e-5)
						scale[i] = (math.Abs(float64(xv[i])) + math.Abs(m)) / math.Sqrt(v+1e-5)
						if affine {
							y = y*float64(wv[j]) + float64(bv[j])
							scale[i] = scale[i]*float64(wv[j]) + math.Abs(float64(bv[j]))
						}
						want[i] = y
					}
				}
				compare(t, name("layer_norm ", dt, shape, " affine ", affine), values(s, y), want, within(dt, scale))
			}
		}
	}
}

func TestRMSNorm(t *testing.T) {
	_, s := scope(t)
	r := rng(22)
	for _, shape := range [][]int{{1, 1}, {3, 7}, {2, 5, 128}} {
		for _, dt := range floatTypes {
			for _, withW := range []bool{false, true} {
				d := shape[len(shape)-1]
				xv := randVals(r, dt, tensor.Numel(shape), -3, 3)
				wv := randVals(r, dt, d, 0.5, 3)
				var w *tensor.Tensor
				if withW {
					w = input(s, dt, wv, d)
				}
				var y *tensor.Tensor
				must(t, func() { y = s.RMSNorm(input(s, dt, xv, shape...), w, 1e-6) })
				want := make([]float64, len(xv))
				for row := 0; row < len(xv)/d; row++ {
					var q float64
					for _, v := range xv[row*d : (row+1)*d] {
						q += float64(v) * float64(v)
					}
					rs := 1 / math.Sqrt(q/float64(d)+1e-6)
					for j := 0; j < d; j++ {
						n := float64(xv[row*d+j]) * rs
						if withW {
							// normalised value rounded to the dtype first
							n = roundOut(dt, n) * float64(wv[j])
						}
						want[row*d+j] = n
					}
				}
				compare(t, name("rms_norm ", dt, shape, " weight ", withW), values(s, y), want, within(dt, nil))
			}
		}
	}
}

// TestRMSNormRoundingOrder pins the order: with bf16, rounding the
// normalised value before the weight multiply gives a different (the
// reference's) answer from rounding once at the end.
func TestRMSNormRoundingOrder(t *testing.T) {
	_, s := scope(t)
	// x = 1 + 2^-7·k values: x/rms differs from a bf16 value, and the
	// weight 1.5 (exact in bf16) moves the product's rounding point.
	xv := []float32{1, 1.0078125, 1.015625, 1.0234375, 1.03125, 1.0390625, 1.046875, 1.0546875}
	wv := []float32{1.5, 1.5, 1.5, 1.5, 1.5, 1.5, 1.5, 1.5}
	y := values(s, s.RMSNorm(input(s, tensor.BF16, xv, 1, 8), input(s, tensor.BF16, wv, 8), 1e-6))
	var q float64
	for _, v := range xv {
		q += float64(v) * float64(v)
	}
	rs := 1 / math.Sqrt(q/8+1e-6)
	differs := false
	for j, v := range xv {
		twice := roundOut(tensor.BF16, roundOut(tensor.BF16, float64(v)*rs)*1.5)
		once := roundOut(tensor.BF16, float64(v)*rs*1.5)
		if float64(y[j]) != twice {
			t.Errorf("[%d] = %v, want %v (rounded before the weight)", j, y[j], twice)
		}
		differs = differs || once != twice
	}
	if !differs {
		t.Fatal("test data does not tell the rounding orders apart")
	}
}

func TestSoftmax(t *testing.T) {
	_, s := scope(t)
	r := rng(23)
	for _, shape := range [][]int{{1, 1}, {3, 7}, {2, 4, 33}, {5, 3000}} {
		for _, dt := range floatTypes {
			d := shape[len(shape)-1]
			xv := randVals(r, dt, tensor.Numel(shape), -8, 8)
			// Large offsets must not overflow: softmax is shift-invariant.
			for i := range xv {
				if (i/d)%2 == 1 {
					xv[i] = tensor.Rounder(dt)(xv[i] + 1e4)
				}
			}
			var y *tensor.Tensor
			must(t, func() { y = s.Softmax(input(s, dt, xv, shape...)) })
			want := make([]float64, len(xv))
			for row := 0; row < len(xv)/d; row++ {
				x := xv[row*d : (row+1)*d]
				m := math.Inf(-1)
				for _, v := range x {
					m = math.Max(m, float64(v))
				}
				var sum float64
				for _, v := range x {
					sum += math.Exp(float64(v) - m)
				}
				for j, v := range x {
					want[row*d+j] = math.Exp(float64(v)-m) / sum
				}
			}
			compare(t, name("softmax ", dt, shape), values(s, y), want, within(dt, constant(len(want), 1e-6)))
		}
	}
	// Extreme values stay finite, and -Inf entries get zero weight.
	x := s.To(tensor.FromFloat32([]float32{3e38, -3e38, float32(math.Inf(-1)), 3e38}, 1, 4))
	compare(t, "softmax extremes", s.Softmax(x).Float32s(), []float64{0.5, 0, 0, 0.5}, exact)
}

func TestReduce(t *testing.T) {
	_, s := scope(t)
	r := rng(24)
	ops := []tensor.ReduceOp{tensor.ReduceSum, tensor.ReduceMean, tensor.ReduceMax, tensor.ReduceVar, tensor.ReduceVarU, tensor.ReduceAbsMean}
	for _, shape := range [][]int{{1, 2}, {3, 7}, {2, 3, 33}, {2, 5000}} {
		for _, dt := range floatTypes {
			k := shape[len(shape)-1]
			xv := randVals(r, dt, tensor.Numel(shape), -2, 3)
			x := input(s, dt, xv, shape...)
			for _, op := range ops {
				var y *tensor.Tensor
				must(t, func() { y = s.ReduceLast(op, x) })
				want := make([]float64, len(xv)/k)
				scale := make([]float64, len(want))
				for row := range want {
					v := xv[row*k : (row+1)*k]
					m, variance := meanVar64(v)
					var sa float64
					for _, e := range v {
						sa += math.Abs(float64(e))
					}
					switch op {
					case tensor.ReduceSum:
						want[row], scale[row] = m*float64(k), sa
					case tensor.ReduceMean:
						want[row], scale[row] = m, sa/float64(k)
					case tensor.ReduceMax:
						want[row] = math.Inf(-1)
						for _, e := range v {
							want[row] = math.Max(want[row], float64(e))
						}
					case tensor.ReduceVar:
						want[row] = variance
					case tensor.ReduceVarU:
						want[row] = variance * float64(k) / float64(k-1)
					case tensor.ReduceAbsMean:
						want[row] = sa / float64(k)
					}
				}
				compare(t, name("reduce ", op, " ", dt, shape), values(s, y), want, within(dt, scale))
			}
		}
	}
	// torch's unbiased variance of one value is NaN; max propagates NaN.
	one := s.To(tensor.FromFloat32([]float32{3}, 1, 1))
	if v := s.ReduceLast(tensor.ReduceVarU, one).Float32s()[0]; !math.IsNaN(float64(v)) {
		t.Errorf("var(unbiased) of one value = %v, want NaN", v)
	}
	nan := s.To(tensor.FromFloat32([]float32{1, float32(math.NaN()), 2}, 1, 3))
	if v := s.Max(nan).Float32s()[0]; !math.IsNaN(float64(v)) {
		t.Errorf("max with NaN = %v", v)
	}
	if v := s.Std(s.To(tensor.FromFloat32([]float32{1, 2, 3, 4}, 4))).Float32s()[0]; math.Abs(float64(v)-math.Sqrt(5.0/3)) > 1e-6 {
		t.Errorf("std = %v", v)
	}
	if v := s.MeanAll(s.To(tensor.FromFloat32([]float32{1, 2, 3, 4, 5, 6}, 2, 3))); v != 3.5 {
		t.Errorf("mean of all = %v", v)
	}
}
