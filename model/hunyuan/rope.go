package hunyuan

import (
	"fmt"
	"math"
	"strings"

	"github.com/framepack-go/framepack/tensor"
)

// ropeGrid holds the RoPE cos and sin tables of a (t, h, w) token grid,
// (t, h, w, head_dim) row-major, in float32. The channels of a head are
// [T axis | Y axis | X axis]; channel pairs (2k, 2k+1) share frequency k of
// their axis (repeat_interleave(2)).
type ropeGrid struct {
	t, h, w, d int
	cos, sin   []float32
}

// ropeFreqs is f_k = 1 / θ^(2k/dim), k < dim/2, in float32 as the reference.
func ropeFreqs(theta float64, dim int) []float32 {
	f := make([]float32, dim/2)
	for k := range f {
		e := float32(2*k) / float32(dim)
		f[k] = 1 / float32(math.Pow(theta, float64(e)))
	}
	return f
}

// newRopeGrid computes the tables of the grid (frames[i], y, x) for y < h,
// x < w (FramePack's HunyuanVideoRotaryPosEmbed.forward_inner). Angles are
// float32 products, as torch.outer in float32. Each axis depends on one
// coordinate, so its cos and sin are computed once per coordinate value and
// the rows are assembled from them.
func newRopeGrid(cfg Config, frames []int64, h, w int) *ropeGrid {
	d := cfg.AttentionHeadDim
	g := &ropeGrid{t: len(frames), h: h, w: w, d: d}
	pos := [3][]float32{make([]float32, len(frames)), make([]float32, h), make([]float32, w)}
	for i, f := range frames {
		pos[0][i] = float32(f)
	}
	for i := range pos[1] {
		pos[1][i] = float32(i)
	}
	for i := range pos[2] {
		pos[2][i] = float32(i)
	}
	// axis[a] holds, per coordinate value, that axis's channels of cos and sin.
	var axCos, axSin [3][]float32
	for a := range pos {
		dim := cfg.RopeAxesDim[a]
		fs := ropeFreqs(cfg.RopeTheta, dim)
		axCos[a] = make([]float32, len(pos[a])*dim)
		axSin[a] = make([]float32, len(pos[a])*dim)
		for i, p := range pos[a] {
			for k, f := range fs {
				ang := float64(p * f)
				c, s := float32(math.Cos(ang)), float32(math.Sin(ang))
				axCos[a][i*dim+2*k], axCos[a][i*dim+2*k+1] = c, c
				axSin[a][i*dim+2*k], axSin[a][i*dim+2*k+1] = s, s
			}
		}
	}
	n := g.t * h * w
	g.cos = make([]float32, 0, n*d)
	g.sin = make([]float32, 0, n*d)
	dt, dy, dx := cfg.RopeAxesDim[0], cfg.RopeAxesDim[1], cfg.RopeAxesDim[2]
	for t := 0; t < g.t; t++ {
		for y := 0; y < h; y++ {
			for x := 0; x < w; x++ {
				g.cos = append(g.cos, axCos[0][t*dt:(t+1)*dt]...)
				g.cos = append(g.cos, axCos[1][y*dy:(y+1)*dy]...)
				g.cos = append(g.cos, axCos[2][x*dx:(x+1)*dx]...)
				g.sin = append(g.sin, axSin[0][t*dt:(t+1)*dt]...)
				g.sin = append(g.sin, axSin[1][y*dy:(y+1)*dy]...)
				g.sin = append(g.sin, axSin[2][x*dx:(x+1)*dx]...)
			}
		}
	}
	return g
}

// pooled replicate-pads the grid at the end of t, h and w to multiples of k
// and averages k×k×k cells of every cos and sin channel (FramePack's
// pad_for_3d_conv + avg_pool3d on the tables of its 2x and 4x tokens). The
// averages are not unit rotations; the reference uses them as they are.
// Sums run in float32 in (t, y, x) order, as torch's CPU avg_pool3d.
func (g *ropeGrid) pooled(k int) *ropeGrid {
	ceil := func(n int) int { return (n + k - 1) / k }
	p := &ropeGrid{t: ceil(g.t), h: ceil(g.h), w: ceil(g.w), d: g.d}
	n := p.t * p.h * p.w
	p.cos = make([]float32, n*g.d)
	p.sin = make([]float32, n*g.d)
	at := func(t, y, x int) int { // replicate padding: clamp to the last index
		return ((min(t, g.t-1)*g.h+min(y, g.h-1))*g.w + min(x, g.w-1)) * g.d
	}
	div := float32(k * k * k)
	o := 0
	for t := 0; t < p.t; t++ {
		for y := 0; y < p.h; y++ {
			for x := 0; x < p.w; x++ {
				for c := 0; c < g.d; c++ {
					var sc, ss float32
					for dt := 0; dt < k; dt++ {
						for dy := 0; dy < k; dy++ {
							for dx := 0; dx < k; dx++ {
								j := at(t*k+dt, y*k+dy, x*k+dx) + c
								sc += g.cos[j]
								ss += g.sin[j]
							}
						}
					}
					p.cos[o+c] = sc / div
					p.sin[o+c] = ss / div
				}
				o += g.d
			}
		}
	}
	return p
}

// tokens is the number of grid positions.
func (g *ropeGrid) tokens() int { return g.t * g.h * g.w }

// joinRopeGrids joins grids in sequence order and appends nText identity rows
// (cos 1, sin 0) for the text tokens, which the reference leaves unrotated:
// rotating by the identity is exact, so one table serves the joint sequence.
// It returns host (L, head_dim) f32 tensors.
func joinRopeGrids(nText int, grids ...*ropeGrid) (cos, sin *tensor.Tensor) {
	d := grids[0].d
	n := nText
	for _, g := range grids {
		n += g.tokens()
	}
	c := make([]float32, 0, n*d)
	s := make([]float32, 0, n*d)
	for _, g := range grids {
		c = append(c, g.cos...)
		s = append(s, g.sin...)
	}
	for len(c) < n*d {
		c = append(c, 1)
		s = append(s, 0)
	}
	return tensor.FromFloat32(c, n, d), tensor.FromFloat32(s, n, d)
}

// ropeStream is one image stream's RoPE input: its frame indices, and the
// pooling of its tokens (1, 2 or 4).
type ropeStream struct {
	frames []int64
	pool   int
}

// ropeSpec is everything the joint RoPE tables depend on: the noisy grid's
// post-patch size, the streams of each batch row (one row when shared) and
// the number of unrotated text tokens.
type ropeSpec struct {
	h, w, nText int
	rows        [][]ropeStream
}

func (r ropeSpec) key() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d %d %d", r.h, r.w, r.nText)
	for _, row := range r.rows {
		b.WriteString(";")
		for _, st := range row {
			fmt.Fprintf(&b, " %d:%v", st.pool, st.frames)
		}
	}
	return b.String()
}
