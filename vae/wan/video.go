package wan

import (
	"runtime"
	"sync"

	"github.com/framepack-go/framepack/tensor"
)

// vid is a host (B, C, T, H, W) f32 array: decoded chunks and tiles and
// their assembly.
type vid struct {
	b, c, t, h, w int
	data          []float32
}

func newVid(b, c, t, h, w int) *vid {
	return &vid{b: b, c: c, t: t, h: h, w: w, data: make([]float32, b*c*t*h*w)}
}

func (v *vid) plane(b, c, t int) []float32 {
	i := ((b*v.c+c)*v.t + t) * v.h * v.w
	return v.data[i : i+v.h*v.w]
}

// pasteFrames copies y (B, C, n, H, W), any dtype on any backend, into
// frames t0 … t0+n−1.
func (v *vid) pasteFrames(t0 int, y *tensor.Tensor) {
	src := tensor.Float32s(y)
	n, hw := y.Dim(2), v.h*v.w
	for b := 0; b < v.b; b++ {
		for c := 0; c < v.c; c++ {
			s := src[(b*v.c+c)*n*hw : (b*v.c+c+1)*n*hw]
			d := ((b*v.c+c)*v.t + t0) * hw
			copy(v.data[d:d+n*hw], s)
		}
	}
}

func (v *vid) clamp(lo, hi float32) {
	for i, x := range v.data {
		v.data[i] = min(max(x, lo), hi)
	}
}

func (v *vid) tensor() *tensor.Tensor { return tensor.FromFloat32(v.data, v.b, v.c, v.t, v.h, v.w) }

// posterior cuts the moments into mean and logvar, logvar clamped to
// [−30, 20] as DiagonalGaussianDistribution does.
func (v *vid) posterior() (mean, logvar *tensor.Tensor) {
	lc := v.c / 2
	m, lv := newVid(v.b, lc, v.t, v.h, v.w), newVid(v.b, lc, v.t, v.h, v.w)
	n := v.t * v.h * v.w
	for b := 0; b < v.b; b++ {
		for c := 0; c < lc; c++ {
			copy(m.data[(b*lc+c)*n:(b*lc+c+1)*n], v.data[(b*v.c+c)*n:])
			src := v.data[(b*v.c+lc+c)*n : (b*v.c+lc+c+1)*n]
			dst := lv.data[(b*lc+c)*n : (b*lc+c+1)*n]
			for i := range dst {
				dst[i] = min(max(src[i], -30), 20)
			}
		}
	}
	return m.tensor(), lv.tensor()
}

// spatialTiles is diffusers' tiled_decode / tiled_encode: tiles of tinH×tinW
// input pixels every sinH×sinW run through run; each tile is blended with
// the (already blended) tile above over bH rows and the one to its left
// over bW columns, cut to keepH×keepW, and the whole cropped to outH×outW.
// The blend runs in the compute dtype dt, as torch does it.
func spatialTiles(dt tensor.DType, run func(h0, h1, w0, w1 int) *vid, h, w, tinH, tinW, sinH, sinW, bH, bW, keepH, keepW, outH, outW int) *vid {
	var out *vid
	var above []*vid
	y := 0
	for i := 0; i < h; i += sinH {
		var row []*vid
		x, kh := 0, 0
		for j := 0; j < w; j += sinW {
			tile := run(i, min(i+tinH, h), j, min(j+tinW, w))
			if out == nil {
				out = newVid(tile.b, tile.c, tile.t, outH, outW)
			}
			if above != nil {
				blendV(dt, above[len(row)], tile, bH)
			}
			if len(row) > 0 {
				blendH(dt, row[len(row)-1], tile, bW)
			}
			th, tw := min(tile.h, keepH), min(tile.w, keepW)
			if nh, nw := min(th, outH-y), min(tw, outW-x); nh > 0 && nw > 0 {
				forPlanes(tile, func(b, c, t int) {
					src, dst := tile.plane(b, c, t), out.plane(b, c, t)
					for r := 0; r < nh; r++ {
						copy(dst[(y+r)*outW+x:(y+r)*outW+x+nw], src[r*tile.w:r*tile.w+nw])
					}
				})
			}
			x += tw
			kh = th
			row = append(row, tile)
		}
		y += kh
		above = row
	}
	return out
}

// forPlanes runs fn for every (b, c, t) plane of v, in parallel.
func forPlanes(v *vid, fn func(b, c, t int)) {
	n := v.b * v.c * v.t
	var wg sync.WaitGroup
	next := make(chan int, n)
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	for range min(runtime.NumCPU(), n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				fn(i/(v.c*v.t), i/v.t%v.c, i%v.t)
			}
		}()
	}
	wg.Wait()
}

// blend returns a·(1−k/e) + b·(k/e) with torch's arithmetic in dt: the
// weights computed in double and used as f32, each product rounded to dt,
// then the sum.
func blendFn(dt tensor.DType) func(a, b float32, k, e int) float32 {
	round := func(x float32) float32 { return x }
	switch dt {
	case tensor.F16:
		round = tensor.RoundF16
	case tensor.BF16:
		round = tensor.RoundBF16
	}
	return func(a, b float32, k, e int) float32 {
		wa := float32(1 - float64(k)/float64(e))
		wb := float32(float64(k) / float64(e))
		return round(round(float32(a*wa)) + round(float32(b*wb)))
	}
}

// blendV fades the last e rows of a into the first e of b (in place), e =
// min(a's rows, b's rows, extent): diffusers' blend_v.
func blendV(dt tensor.DType, a, b *vid, extent int) {
	e := min(a.h, b.h, extent)
	if e <= 0 {
		return
	}
	mix := blendFn(dt)
	forPlanes(b, func(bi, c, t int) {
		pa, pb := a.plane(bi, c, t), b.plane(bi, c, t)
		for k := 0; k < e; k++ {
			ra := (a.h - e + k) * a.w
			for x := 0; x < b.w; x++ {
				pb[k*b.w+x] = mix(pa[ra+x], pb[k*b.w+x], k, e)
			}
		}
	})
}

// blendH is diffusers' blend_h: columns instead of rows.
func blendH(dt tensor.DType, a, b *vid, extent int) {
	e := min(a.w, b.w, extent)
	if e <= 0 {
		return
	}
	mix := blendFn(dt)
	forPlanes(b, func(bi, c, t int) {
		pa, pb := a.plane(bi, c, t), b.plane(bi, c, t)
		for y := 0; y < b.h; y++ {
			for k := 0; k < e; k++ {
				pb[y*b.w+k] = mix(pa[y*a.w+a.w-e+k], pb[y*b.w+k], k, e)
			}
		}
	})
}
