package gpu

import (
	"encoding/binary"
	"fmt"

	"github.com/framepack-go/framepack/hip"
	"github.com/framepack-go/framepack/tensor"
)

// layoutKernels are kernels/convlayout.hip on the backend: loaded as every
// other module (precompiled, or compiled at run time and cached).
type layoutKernels struct{ b *Backend }

const layoutModule = "convlayout"

func (l *layoutKernels) launch(name string, grid hip.Dim3, a *hip.Args) error {
	return l.b.launch(layoutModule, name, grid, hip.Dim3{256}, 0, a)
}

const tileEdge = 64 // LT in convlayout.hip

func tiles(n int64) uint32 { return uint32((n + tileEdge - 1) / tileEdge) }

// pack queues dst (N, tc, S, C) = src (N, C, T, S) frames t0 … t0+tc−1
// (zeros outside [0, T)).
func (l *layoutKernels) pack(dt tensor.DType, dst, src uintptr, N, C, T, S, t0, tc int) error {
	name := "pack_" + floatSuffix(dt)
	if S%2 == 0 && C%2 == 0 {
		name += "_v"
	}
	if int64(N)*int64(tc) > 65535 {
		return fmt.Errorf("gpu: pack of %d×%d frames exceeds one launch", N, tc)
	}
	a := (&hip.Args{}).Ptr(dst).Ptr(src).I64(int64(C)).I64(int64(T)).I64(int64(S)).I64(int64(t0)).I64(int64(tc))
	return l.launch(name, hip.Dim3{tiles(int64(S)), tiles(int64(C)), uint32(N * tc)}, a)
}

// unpack queues dst (N, K, To, S) frames t0 … t0+tc−1 = src (N, tc, S, K)
// + bias (0: none).
func (l *layoutKernels) unpack(dt tensor.DType, dst, src, bias uintptr, N, K, To, S, t0, tc int) error {
	name := "unpack_" + floatSuffix(dt)
	if S%2 == 0 && K%2 == 0 {
		name += "_v"
	}
	if int64(N)*int64(tc) > 65535 {
		return fmt.Errorf("gpu: unpack of %d×%d frames exceeds one launch", N, tc)
	}
	a := (&hip.Args{}).Ptr(dst).Ptr(src).Ptr(bias).I64(int64(K)).I64(int64(To)).I64(int64(S)).I64(int64(t0)).I64(int64(tc))
	return l.launch(name, hip.Dim3{tiles(int64(S)), tiles(int64(K)), uint32(N * tc)}, a)
}

// padGeom is packpad's view of a padded input: x (N, C, T, H, W) repeated
// by up (causal: frame 0 once) to Tu×Hu×Wu, padded by before (replicate
// or zeros) to Tp×Hp×Wp, then zt zero frames each side.
type padGeom struct {
	N, C, T, H, W int
	Tu, Hu, Wu    int
	up            [3]int
	causal        bool
	Tp, Hp, Wp    int
	before        [3]int
	zt            int
	replicate     bool
}

// packpad queues dst (N, tc, Hp, Wp, C) = frames tf0 … tf0+tc−1 of the
// padded input.
func (l *layoutKernels) packpad(dt tensor.DType, dst, src uintptr, g padGeom, tf0, tc int) error {
	name := "packpad_" + floatSuffix(dt)
	if g.C%2 == 0 {
		name += "_v"
	}
	if int64(g.N)*int64(tc) > 65535 {
		return fmt.Errorf("gpu: pack of %d×%d frames exceeds one launch", g.N, tc)
	}
	mode := int32(0)
	if g.replicate {
		mode = 1
	}
	var b []byte
	for _, v := range []int64{int64(g.C), int64(g.T), int64(g.H), int64(g.W), int64(tc), int64(tf0)} {
		b = binary.LittleEndian.AppendUint64(b, uint64(v))
	}
	causal := int32(0)
	if g.causal {
		causal = 1
	}
	for _, v := range []int32{int32(g.Tp), int32(g.Hp), int32(g.Wp), int32(g.before[0]), int32(g.before[1]), int32(g.before[2]), int32(g.zt), mode,
		int32(g.Tu), int32(g.Hu), int32(g.Wu), int32(max(g.up[0], 1)), int32(max(g.up[1], 1)), int32(max(g.up[2], 1)), causal} {
		b = binary.LittleEndian.AppendUint32(b, uint32(v))
	}
	for len(b)%8 != 0 { // the struct's size, a multiple of its alignment
		b = append(b, 0)
	}
	S := int64(g.Hp) * int64(g.Wp)
	a := (&hip.Args{}).Ptr(dst).Ptr(src).Struct(b, 8)
	return l.launch(name, hip.Dim3{tiles(S), tiles(int64(g.C)), uint32(g.N * tc)}, a)
}
