//go:build cgo

package miopen

import "fmt"

// cuDNN graph-API enums for the FP8 attention graph (cudnn_graph.h, cuDNN 9).
const (
	bePointwise, beOpPointwise, beMatmul, beOpMatmul, beReduction, beOpReduction = 0, 13, 18, 19, 21, 22

	attrPointwiseMode, attrPointwiseMathPrec                                  = 0, 1
	attrOpPointwiseDesc, attrOpPointwiseX, attrOpPointwiseB, attrOpPointwiseY = 750, 751, 752, 753
	attrMatmulCompType                                                        = 1500
	attrOpMatmulA, attrOpMatmulB, attrOpMatmulC, attrOpMatmulD                = 1520, 1521, 1522, 1523
	attrReductionOperator, attrReductionCompType                              = 1600, 1601
	attrOpReductionX, attrOpReductionY, attrOpReductionDesc                   = 1610, 1611, 1612

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
	g.ops = append(g.ops, g.graphBuild.pointwise(mode, x, b, y))
}

// reduce adds y = op over the axes where y has extent 1.
func (g *fp8Graph) reduce(mode int, x, y uintptr) {
	g.ops = append(g.ops, g.op(fmt.Sprintf("reduction %d", mode), beReduction,
		[][3]int{{attrReductionOperator, typeReductionOp, mode}, {attrReductionCompType, typeDataType, cdFloat}},
		beOpReduction, attrOpReductionDesc, link{attrOpReductionX, x}, link{attrOpReductionY, y}))
}

// matmul adds c = a·b over the last two axes, f32 accumulation.
func (g *fp8Graph) matmul(a, b, c uintptr) {
	g.ops = append(g.ops, g.op("matmul", beMatmul, [][3]int{{attrMatmulCompType, typeDataType, cdFloat}},
		beOpMatmul, attrOpMatmulD, link{attrOpMatmulA, a}, link{attrOpMatmulB, b}, link{attrOpMatmulC, c}))
}

// pointwiseTo, reduceTo and matmulTo add the operation into a new f32
// intermediate of dims and return it.
func (g *fp8Graph) pointwiseTo(mode int, x, b uintptr, dims []int64) uintptr {
	y := g.virtual(cdFloat, dims...)
	g.pointwise(mode, x, b, y)
	return y
}

func (g *fp8Graph) reduceTo(mode int, x uintptr, dims []int64) uintptr {
	y := g.virtual(cdFloat, dims...)
	g.reduce(mode, x, y)
	return y
}

func (g *fp8Graph) matmulTo(a, b uintptr, dims []int64) uintptr {
	c := g.virtual(cdFloat, dims...)
	g.matmul(a, b, c)
	return c
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

	scores, rows, outs := []int64{B, H, Lq, Lk}, []int64{B, H, Lq, 1}, []int64{B, H, Lq, D}
	sc := g.matmulTo(q, kt, scores)
	sc = g.pointwiseTo(pwMul, sc, attnScale, scores)
	sc = g.pointwiseTo(pwMul, sc, dq, scores)
	sc = g.pointwiseTo(pwMul, sc, dk, scores)
	// softmax
	m := g.reduceTo(redMax, sc, rows)
	e := g.pointwiseTo(pwExp, g.pointwiseTo(pwSub, sc, m, scores), 0, scores)
	l := g.reduceTo(redAdd, e, rows)
	g.pointwiseTo(pwAdd, m, g.pointwiseTo(pwLog, l, 0, rows), rows) // the stats
	p := g.pointwiseTo(pwDiv, e, l, scores)
	g.reduce(redAmax, p, amaxS)
	p8 := g.virtual(cdFP8E4M3, scores...)
	g.pointwise(pwMul, p, ss, p8)
	// P₈·v
	o2 := g.pointwiseTo(pwMul, g.pointwiseTo(pwMul, g.matmulTo(p8, v, outs), ds, outs), dv, outs)
	g.pointwise(pwMul, o2, so, o)
	g.reduce(redAmax, o2, amaxO)

	graph := g.create(beOperationGraph)
	g.linkAll(graph, attrGraphOps, g.ops)
	return h.planGraph(d, g.graphBuild, graph)
}
