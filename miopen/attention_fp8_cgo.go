//go:build cgo

package miopen

import "fmt"

// cuDNN graph-API enums for the FP8 attention graph (cudnn_graph.h, cuDNN 9).
const (
	bePointwise, beOpPointwise   = 0, 13
	beMatmul, beOpMatmul         = 18, 19
	beReduction, beOpReduction   = 21, 22
	attrPointwiseMode            = 0
	attrPointwiseMathPrec        = 1
	attrOpPointwiseDesc          = 750
	attrOpPointwiseX             = 751
	attrOpPointwiseB             = 752
	attrOpPointwiseY             = 753
	attrMatmulCompType           = 1500
	attrOpMatmulA, attrOpMatmulB = 1520, 1521
	attrOpMatmulC, attrOpMatmulD = 1522, 1523
	attrReductionOperator        = 1600
	attrReductionCompType        = 1601
	attrOpReductionX             = 1610
	attrOpReductionY             = 1611
	attrOpReductionDesc          = 1612

	typeDataType, typePointwiseMode, typeReductionOp = 1, 14, 18

	pwAdd, pwMul, pwDiv, pwSub, pwExp, pwLog = 0, 1, 6, 9, 13, 15
	redAdd, redMax, redAmax                  = 0, 3, 4

	cdFP8E4M3 = 12
)

// fp8Graph builds the FP8 attention's operation graph: descriptors made
// through a graphBuild, virtual tensors numbered from 100.
type fp8Graph struct {
	*graphBuild
	ops  []uintptr
	next int64
}

// virtual is a new intermediate of type dt and dims, contiguous.
func (g *fp8Graph) virtual(dt int, dims ...int64) uintptr {
	st := make([]int64, len(dims))
	n := int64(1)
	for i := len(dims) - 1; i >= 0; i-- {
		st[i] = n
		n *= dims[i]
	}
	g.next++
	return g.tensorND(99+g.next, dt, dims, st, true)
}

// pointwise adds y = mode(x, b) (b 0 for a unary mode).
func (g *fp8Graph) pointwise(mode int, x, b, y uintptr) {
	pw := g.create(bePointwise)
	g.setEnum(pw, attrPointwiseMode, typePointwiseMode, mode)
	g.setEnum(pw, attrPointwiseMathPrec, typeDataType, cdFloat)
	g.finalize(pw, "pointwise descriptor")
	op := g.create(beOpPointwise)
	g.link(op, attrOpPointwiseDesc, pw)
	g.link(op, attrOpPointwiseX, x)
	if b != 0 {
		g.link(op, attrOpPointwiseB, b)
	}
	g.link(op, attrOpPointwiseY, y)
	g.finalize(op, fmt.Sprintf("pointwise %d", mode))
	g.ops = append(g.ops, op)
}

// reduce adds y = op over the axes where y has extent 1.
func (g *fp8Graph) reduce(mode int, x, y uintptr) {
	rd := g.create(beReduction)
	g.setEnum(rd, attrReductionOperator, typeReductionOp, mode)
	g.setEnum(rd, attrReductionCompType, typeDataType, cdFloat)
	g.finalize(rd, "reduction descriptor")
	op := g.create(beOpReduction)
	g.link(op, attrOpReductionDesc, rd)
	g.link(op, attrOpReductionX, x)
	g.link(op, attrOpReductionY, y)
	g.finalize(op, fmt.Sprintf("reduction %d", mode))
	g.ops = append(g.ops, op)
}

// matmul adds c = a·b over the last two axes, f32 accumulation.
func (g *fp8Graph) matmul(a, b, c uintptr) {
	mm := g.create(beMatmul)
	g.setEnum(mm, attrMatmulCompType, typeDataType, cdFloat)
	g.finalize(mm, "matmul descriptor")
	op := g.create(beOpMatmul)
	g.link(op, attrOpMatmulD, mm)
	g.link(op, attrOpMatmulA, a)
	g.link(op, attrOpMatmulB, b)
	g.link(op, attrOpMatmulC, c)
	g.finalize(op, "matmul")
	g.ops = append(g.ops, op)
}

// buildAttentionFP8 describes d as cuDNN's FP8 flash attention: S = q·kᵀ
// times the scale and the descales of q and k; P = softmax(S) (its row max
// and sum, and the stats a training graph would keep, as the fused engine
// expects them); amax(P); P scaled to E4M3; o = (P₈·v) times the descales
// of P and v and o's scale; amax of o before that scale.
func (h *Handle) buildAttentionFP8(d AttnDesc) *attnPlan {
	g := &fp8Graph{graphBuild: &graphBuild{l: h.lib}}
	B, H, Lq, Lk, D := int64(d.B), int64(d.Hq), int64(d.Lq), int64(d.Lk), int64(d.D)
	one := []int64{1, 1, 1, 1}
	scalar := func(uid int64) uintptr { return g.tensorND(uid, cdFloat, one, one, false) }
	q := g.tensorND(1, cdFP8E4M3, []int64{B, H, Lq, D}, []int64{Lq * H * D, D, H * D, 1}, false)
	// kᵀ: (B, H, D, Lk) over k's (B, Lk, H, D) memory.
	kt := g.tensorND(2, cdFP8E4M3, []int64{B, H, D, Lk}, []int64{Lk * H * D, D, 1, H * D}, false)
	v := g.tensorND(3, cdFP8E4M3, []int64{B, H, Lk, D}, []int64{Lk * H * D, D, H * D, 1}, false)
	o := g.tensorND(4, cdFP8E4M3, []int64{B, H, Lq, D}, []int64{Lq * H * D, D, H * D, 1}, false)
	attnScale := g.scalarByValue(5)
	dq, dk, dv, ds, ss, so := scalar(6), scalar(7), scalar(8), scalar(9), scalar(10), scalar(11)
	amaxS, amaxO := scalar(12), scalar(13)

	s0 := g.virtual(cdFloat, B, H, Lq, Lk)
	g.matmul(q, kt, s0)
	s1 := g.virtual(cdFloat, B, H, Lq, Lk)
	g.pointwise(pwMul, s0, attnScale, s1)
	s2 := g.virtual(cdFloat, B, H, Lq, Lk)
	g.pointwise(pwMul, s1, dq, s2)
	s3 := g.virtual(cdFloat, B, H, Lq, Lk)
	g.pointwise(pwMul, s2, dk, s3)
	// softmax
	m := g.virtual(cdFloat, B, H, Lq, 1)
	g.reduce(redMax, s3, m)
	z := g.virtual(cdFloat, B, H, Lq, Lk)
	g.pointwise(pwSub, s3, m, z)
	e := g.virtual(cdFloat, B, H, Lq, Lk)
	g.pointwise(pwExp, z, 0, e)
	l := g.virtual(cdFloat, B, H, Lq, 1)
	g.reduce(redAdd, e, l)
	logL := g.virtual(cdFloat, B, H, Lq, 1)
	g.pointwise(pwLog, l, 0, logL)
	stats := g.virtual(cdFloat, B, H, Lq, 1)
	g.pointwise(pwAdd, m, logL, stats)
	p := g.virtual(cdFloat, B, H, Lq, Lk)
	g.pointwise(pwDiv, e, l, p)
	g.reduce(redAmax, p, amaxS)
	p8 := g.virtual(cdFP8E4M3, B, H, Lq, Lk)
	g.pointwise(pwMul, p, ss, p8)
	// P₈·v
	o0 := g.virtual(cdFloat, B, H, Lq, D)
	g.matmul(p8, v, o0)
	o1 := g.virtual(cdFloat, B, H, Lq, D)
	g.pointwise(pwMul, o0, ds, o1)
	o2 := g.virtual(cdFloat, B, H, Lq, D)
	g.pointwise(pwMul, o1, dv, o2)
	g.pointwise(pwMul, o2, so, o)
	g.reduce(redAmax, o2, amaxO)

	graph := g.create(beOperationGraph)
	g.linkAll(graph, attrGraphOps, g.ops)
	return h.planGraph(d, g.graphBuild, graph)
}
