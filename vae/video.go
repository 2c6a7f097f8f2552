package vae

import (
	"math"
	"runtime"
	"sync"

	"github.com/framepack-go/framepack/tensor"
)

// video is a host (B, C, T, H, W) f32 array: decoded tiles and their
// assembly. Values are representable in the compute dtype. The visible
// frames are t0 … t0+t−1 of the tt stored ones (dropping a first frame is
// free).
type video struct {
	b, c, t, h, w int
	t0, tt        int
	data          []float32
}

func newVideo(b, c, t, h, w int) *video {
	return &video{b: b, c: c, t: t, h: h, w: w, tt: t, data: make([]float32, b*c*t*h*w)}
}

// videoOf copies a (B, C, T, H, W) tensor to the host as f32.
func videoOf(x *tensor.Tensor) *video {
	v := &video{b: x.Dim(0), c: x.Dim(1), t: x.Dim(2), h: x.Dim(3), w: x.Dim(4), tt: x.Dim(2)}
	v.data = tensor.Float32s(x)
	if x.DType() == tensor.F32 && x.OnHost() {
		// The values are the backend's own storage: copy them out.
		v.data = append([]float32(nil), v.data...)
	}
	return v
}

func (v *video) idx(b, c, t, y, x int) int {
	return (((b*v.c+c)*v.tt+v.t0+t)*v.h+y)*v.w + x
}

// frame is the h·w plane of (b, c, t).
func (v *video) frame(b, c, t int) []float32 {
	i := v.idx(b, c, t, 0, 0)
	return v.data[i : i+v.h*v.w]
}

// dropFirst hides the first frame.
func (v *video) dropFirst() *video {
	d := *v
	if d.t > 0 {
		d.t0++
		d.t--
	}
	return &d
}

// tensor is the video as a host tensor (a copy when frames are hidden).
func (v *video) tensor() *tensor.Tensor {
	if v.t0 != 0 || v.t != v.tt {
		c := newVideo(v.b, v.c, v.t, v.h, v.w)
		paste(c, 0, 0, 0, v, 0, 0, 0, v.t, v.h, v.w)
		v = c
	}
	return tensor.FromFloat32(v.data, v.b, v.c, v.t, v.h, v.w)
}

// forPlanes runs fn for every (b, c, t) plane of v, in parallel when the
// work is large.
func forPlanes(v *video, work int, fn func(b, c, t int)) {
	n := v.b * v.c * v.t
	workers := runtime.NumCPU()
	if workers == 1 || n*work < 1<<15 {
		for i := 0; i < n; i++ {
			fn(i/(v.c*v.t), i/v.t%v.c, i%v.t)
		}
		return
	}
	var wg sync.WaitGroup
	next := make(chan int, n)
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	for range min(workers, n) {
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

// paste copies src[.., t0:t0+nt, y0:y0+nh, x0:x0+nw] into dst at (dt, dy, dx).
func paste(dst *video, dt, dy, dx int, src *video, t0, y0, x0, nt, nh, nw int) {
	region := *src
	region.t0, region.t = src.t0+t0, nt
	forPlanes(&region, nh*nw, func(b, c, t int) {
		for y := 0; y < nh; y++ {
			d := dst.idx(b, c, dt+t, dy+y, dx)
			s := region.idx(b, c, t, y0+y, x0)
			copy(dst.data[d:d+nw], region.data[s:s+nw])
		}
	})
}

// blender blends as diffusers does, a·(1−k/e) + b·(k/e), with torch's
// arithmetic in the compute dtype: each product rounded to it, then the sum.
type blender struct{ dt tensor.DType }

func roundTo(dt tensor.DType) blender { return blender{dt} }

// weights of position k of an extent e: 1 − k/e and k/e (computed in double
// by Python, used as f32 by torch's kernels).
func blendWeights(e int) (wa, wb []float32) {
	wa, wb = make([]float32, e), make([]float32, e)
	for k := range wa {
		wa[k] = float32(1 - float64(k)/float64(e))
		wb[k] = float32(float64(k) / float64(e))
	}
	return
}

// mix sets b[i] = blend(a[i], b[i]) with weights wa, wb (one each, or one
// per element when the slices are as long as b).
func (r blender) mix(a, b, wa, wb []float32) {
	per := len(wa) > 1
	ka, kb := wa[0], wb[0]
	switch r.dt {
	case tensor.F16:
		for i := range b {
			if per {
				ka, kb = wa[i], wb[i]
			}
			b[i] = roundF16(roundF16(a[i]*ka) + roundF16(b[i]*kb))
		}
	case tensor.BF16:
		for i := range b {
			if per {
				ka, kb = wa[i], wb[i]
			}
			b[i] = tensor.RoundBF16(tensor.RoundBF16(a[i]*ka) + tensor.RoundBF16(b[i]*kb))
		}
	default:
		for i := range b {
			if per {
				ka, kb = wa[i], wb[i]
			}
			b[i] = float32(a[i]*ka) + float32(b[i]*kb)
		}
	}
}

// roundF16 rounds to the nearest half (ties to even), as a float32.
func roundF16(f float32) float32 {
	u := math.Float32bits(f)
	if e := u >> 23 & 0xff; e-113 < 29 { // 2⁻¹⁴ ≤ |f| < 2¹⁵: stays a normal half
		u += 0xfff + (u>>13)&1
		return math.Float32frombits(u &^ 0x1fff)
	}
	return tensor.RoundF16(f)
}

// blendT, blendV and blendH are diffusers' blend_t / blend_v / blend_h: the
// last e frames (rows, columns) of a fade into the first e of b, in place on
// b, for e = min(a's, b's, extent).
func (r blender) blendT(a, b *video, extent int) {
	e := min(a.t, b.t, extent)
	wa, wb := blendWeights(e)
	forPlanes(&video{b: b.b, c: b.c, t: e}, b.h*b.w, func(bi, c, k int) {
		r.mix(a.frame(bi, c, a.t-e+k), b.frame(bi, c, k), wa[k:k+1], wb[k:k+1])
	})
}

func (r blender) blendV(a, b *video, extent int) {
	e := min(a.h, b.h, extent)
	wa, wb := blendWeights(e)
	forPlanes(b, e*b.w, func(bi, c, t int) {
		fa, fb := a.frame(bi, c, t), b.frame(bi, c, t)
		for k := 0; k < e; k++ {
			ra := (a.h - e + k) * a.w
			r.mix(fa[ra:ra+b.w], fb[k*b.w:(k+1)*b.w], wa[k:k+1], wb[k:k+1])
		}
	})
}

func (r blender) blendH(a, b *video, extent int) {
	e := min(a.w, b.w, extent)
	if e == 0 {
		return
	}
	wa, wb := blendWeights(e)
	forPlanes(b, b.h*e, func(bi, c, t int) {
		fa, fb := a.frame(bi, c, t), b.frame(bi, c, t)
		for y := 0; y < b.h; y++ {
			ra := y*a.w + a.w - e
			r.mix(fa[ra:ra+e], fb[y*b.w:y*b.w+e], wa, wb)
		}
	})
}
