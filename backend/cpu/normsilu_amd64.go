package cpu

import "golang.org/x/sys/cpu"

// haveAVX2 selects normSiLU's vector loop (AVX2 with its gathers).
var haveAVX2 = cpu.X86.HasAVX2

// normSiLU8 computes normSiLU's values eight at a time, from the start of
// xs up to its last whole block of eight or to the first block holding an
// argument of expf outside [−104, 89] (or a NaN), which it leaves to the
// caller; it returns how many values it wrote. Every step is normSiLU's
// own float32 or float64 operation, so the values are bit for bit the same.
//
//go:noescape
func normSiLU8(ys, xs []float32, m, s, h float32, table *[64]float64) int
