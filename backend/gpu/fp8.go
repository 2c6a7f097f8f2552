package gpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/framepack-go/framepack/hip"
	"github.com/framepack-go/framepack/rocblas"
	"github.com/framepack-go/framepack/tensor"
)

// FP8 compute (tensor.FP8Compute): the input quantized per row by a kernel
// of the norm module, the product on FP8 tensor cores through cuBLASLt /
// hipBLASLt with one scale per token and one per output channel. On a GPU
// without FP8 (or a library without outer-vector scales) the codes are
// widened into the compute dtype and multiplied by the plain GEMM: the same
// function, not a fast path.

// QuantizeRowsFP8 is tensor.QuantizeF8E4M3Rows on the device, bit for bit.
func (b *Backend) QuantizeRowsFP8(q, scale, x *tensor.Tensor) error {
	s := floatSuffix(x.DType())
	if s == "" || q.DType() != tensor.F8E4M3 || scale.DType() != tensor.F32 {
		return fmt.Errorf("gpu: quantize_rows_fp8 of %s into %s, %s: %w", x.DType(), q.DType(), scale.DType(), tensor.ErrUnsupported)
	}
	if x.Rank() != 2 || q.Rank() != 2 || q.Dim(0) != x.Dim(0) || q.Dim(1) != x.Dim(1) || scale.Numel() != x.Dim(0) {
		return fmt.Errorf("gpu: quantize_rows_fp8 of %v into %v, %v", x, q, scale)
	}
	M, K := x.Dim(0), x.Dim(1)
	if M == 0 || K == 0 {
		return nil
	}
	ps, err := b.ptrs(q, scale, x)
	if err != nil {
		return err
	}
	vec := int32(0)
	if K%(16/x.DType().Size()) == 0 && ps[0]%16 == 0 && ps[2]%16 == 0 {
		vec = 1
	}
	a := (&hip.Args{}).Ptr(ps[0]).Ptr(ps[1]).Ptr(ps[2]).I64(int64(K)).I32(vec)
	return b.rowLaunch("quant_rows_fp8_"+s, M, a)
}

// LinearScaledFP8 runs on FP8 tensor cores where NativeFP8 holds and the
// shape suits them (K and N multiples of 16, a 16-bit output), else on
// the plain GEMM over the widened codes.
func (b *Backend) LinearScaledFP8(dst, xq, xs, wq, ws, bias *tensor.Tensor) error {
	dt := dst.DType()
	if floatSuffix(dt) == "" || (bias != nil && bias.DType() != dt) {
		return unsupported("linear_scaled_fp8", dt)
	}
	if xq.DType() != tensor.F8E4M3 || wq.DType() != tensor.F8E4M3 || xs.DType() != tensor.F32 || ws.DType() != tensor.F32 ||
		xq.Rank() != 2 || wq.Rank() != 2 || dst.Rank() != 2 {
		return fmt.Errorf("gpu: linear_scaled_fp8 of %v (scales %v) by %v (scales %v) into %v: %w", xq, xs, wq, ws, dst, tensor.ErrUnsupported)
	}
	M, K, N := xq.Dim(0), xq.Dim(1), wq.Dim(0)
	if wq.Dim(1) != K || dst.Dim(0) != M || dst.Dim(1) != N || xs.Numel() != M || ws.Numel() != N || (bias != nil && bias.Numel() != N) {
		return fmt.Errorf("gpu: linear_scaled_fp8 of %v (scales %v) by %v (scales %v, bias %v) into %v", xq, xs, wq, ws, bias, dst)
	}
	if M == 0 || N == 0 {
		return nil
	}
	ps, err := b.ptrs(dst, xq, xs, wq, ws, bias)
	if err != nil {
		return err
	}
	if K == 0 {
		return b.linearNoK(dst, bias, M, N)
	}
	if dt != tensor.F32 && K%16 == 0 && N%16 == 0 && b.NativeFP8() {
		g := rocblas.LtLinear{M: M, N: N, K: K, X: ps[1], W: ps[3], D: ps[0], XType: rocblas.LtF8E4M3, WType: rocblas.LtF8E4M3,
			DType: ltType(dt), XScale: ps[2], WScale: ps[4], RowScales: true}
		if bias != nil {
			g.Bias, g.Epilogue = ps[5], rocblas.EpilogueBias
		}
		b.blasMu.Lock()
		defer b.blasMu.Unlock()
		return b.blasCall(func() error { return b.lt.Linear(g) })
	}
	// Widen both operands into dt (one f32 product code·scale, rounded once)
	// and multiply them on the plain GEMM.
	xd, err := b.dequantized(dt, ps[1], ps[2], M, K)
	if err != nil {
		return err
	}
	defer b.alloc.free(xd)
	wd, err := b.dequantized(dt, ps[3], ps[4], N, K)
	if err != nil {
		return err
	}
	defer b.alloc.free(wd)
	return b.gemm(dt, ps[0], xd.ptr, wd.ptr, ps[5], 1, M, N, K, false, true, false, false, 1)
}

// LinearFP8 is the weight-only FP8 Linear (tensor.FP8Weights): the weight
// widened into the compute dtype by one kernel, then the plain Linear; the
// widened copy lives for the call.
func (b *Backend) LinearFP8(dst, x, w, scale, bias *tensor.Tensor) error {
	dt := dst.DType()
	if floatSuffix(dt) == "" || x.DType() != dt || (bias != nil && bias.DType() != dt) || w.DType() != tensor.F8E4M3 || scale.DType() != tensor.F32 {
		return unsupported("linear_fp8", dt)
	}
	if w.Rank() != 2 || scale.Numel() != w.Dim(0) {
		return fmt.Errorf("gpu: linear_fp8 weight %v with scale %v", w, scale)
	}
	M, K, N, err := tensor.CheckLinear(dst, x, w, bias)
	if err != nil {
		return fmt.Errorf("gpu: %w", err)
	}
	if M == 0 || N == 0 {
		return nil
	}
	ps, err := b.ptrs(dst, x, w, scale, bias)
	if err != nil {
		return err
	}
	if K == 0 {
		return b.linearNoK(dst, bias, M, N)
	}
	wd, err := b.dequantized(dt, ps[2], ps[3], N, K)
	if err != nil {
		return err
	}
	defer b.alloc.free(wd)
	return b.gemm(dt, ps[0], ps[1], wd.ptr, ps[4], 1, M, N, K, false, true, false, false, 1)
}

// dequantized is a temporary of rows·K values code·scale[row] in dt: the
// codes q (rows, K) widened by their row scales. The caller frees it.
func (b *Backend) dequantized(dt tensor.DType, q, scale uintptr, rows, K int) (*Buffer, error) {
	n := int64(rows) * int64(K)
	y, err := b.alloc.alloc(n * int64(dt.Size()))
	if err != nil {
		return nil, err
	}
	a := (&hip.Args{}).Ptr(y.ptr).Ptr(q).Ptr(scale).I64(int64(K)).I64(n)
	if err := b.launchLinear("norm", "dequant_rows_fp8_"+floatSuffix(dt), n, 256, 1, a); err != nil {
		b.alloc.free(y)
		return nil, err
	}
	return y, nil
}

func ltType(dt tensor.DType) rocblas.LtType {
	switch dt {
	case tensor.F16:
		return rocblas.LtF16
	case tensor.BF16:
		return rocblas.LtBF16
	}
	return rocblas.LtF32
}

// NativeFP8 tells whether LinearScaledFP8 runs on FP8 tensor cores: the GPU
// has OCP FP8 (NVIDIA sm_89 and later; AMD gfx950 and RDNA4) and the Lt
// library multiplies with outer-vector scales, as a probe GEMM at first use
// shows. The first call opens the Lt library if Options.Lt did not.
func (b *Backend) NativeFP8() bool {
	b.fp8Once.Do(func() {
		if b.opts.NoBLAS || !archHasFP8(b.dev.Vendor, b.dev.Arch) {
			return
		}
		b.blasMu.Lock()
		if b.lt == nil {
			b.openLt()
		}
		b.blasMu.Unlock()
		if b.lt == nil {
			return
		}
		if err := b.probeFP8(); err != nil {
			b.log.Info("gpu: no FP8 GEMM with per-row scales; FP8 compute widens to the compute dtype", "why", err)
			return
		}
		b.fp8 = true
	})
	return b.fp8
}

// archHasFP8 tells whether the architecture has OCP E4M3 tensor-core
// math (MI300's gfx942 has the FNUZ variant, a different format).
func archHasFP8(v hip.Vendor, arch string) bool {
	if v == hip.NVIDIA {
		n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(arch, "sm_"), "a"))
		return err == nil && n >= 89
	}
	arch = strings.SplitN(arch, ":", 2)[0]
	return arch == "gfx950" || strings.HasPrefix(arch, "gfx12")
}

// probeFP8 runs a 16×16×16 FP8 GEMM with per-row scales and checks it: each
// output is Σ 1·1 · xs·ws = 16·2·3 = 96.
func (b *Backend) probeFP8() error {
	const n = 16
	buf, err := b.alloc.alloc(2*n*n + 2*4*n + 2*n*n)
	if err != nil {
		return err
	}
	defer b.alloc.free(buf)
	codes, xs, ws, out := buf.ptr, buf.ptr+2*n*n, buf.ptr+2*n*n+4*n, buf.ptr+2*n*n+8*n
	host := make([]byte, 2*n*n+8*n)
	for i := range 2 * n * n {
		host[i] = 0x38 // 1.0
	}
	for i := range n {
		binary.LittleEndian.PutUint32(host[2*n*n+4*i:], math.Float32bits(2))
		binary.LittleEndian.PutUint32(host[2*n*n+4*n+4*i:], math.Float32bits(3))
	}
	if err := b.stage.upload(codes, host); err != nil {
		return err
	}
	g := rocblas.LtLinear{M: n, N: n, K: n, X: codes, W: codes + n*n, D: out, XType: rocblas.LtF8E4M3, WType: rocblas.LtF8E4M3,
		DType: rocblas.LtBF16, XScale: xs, WScale: ws, RowScales: true}
	b.blasMu.Lock()
	err = b.blasCall(func() error { return b.lt.Linear(g) })
	b.blasMu.Unlock()
	if err != nil {
		return err
	}
	got := make([]byte, 2*n*n)
	if err := b.stage.download(got, out, b.idle.waiting); err != nil {
		return err
	}
	for i := 0; i < n*n; i++ {
		if v := tensor.F32FromBF16(binary.LittleEndian.Uint16(got[2*i:])); v != 96 {
			return fmt.Errorf("probe GEMM gave %v at %d, want 96", v, i)
		}
	}
	return nil
}
