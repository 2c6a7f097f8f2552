// Package tiles is the host side of a tiled VAE decode or encode, the same
// for HunyuanVideo's VAE (package vae) and Wan's (vae/wan): the f32 array
// tiles are assembled in, diffusers' blends in the compute dtype, its
// spatial and temporal tile loops, the retry at a smaller tiling after an
// out-of-memory failure, and the scope helpers that cut a tile's input.
package tiles

import (
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"github.com/framepack-go/framepack/tensor"
)

// Video is a host (B, C, T, H, W) f32 array: decoded tiles and their
// assembly. Values are representable in the compute dtype. The visible
// frames are t0 … t0+T−1 of the tt stored ones (dropping a first frame is
// free).
type Video struct {
	B, C, T, H, W int
	t0, tt        int
	data          []float32
}

// New is a zero video.
func New(b, c, t, h, w int) *Video {
	return &Video{B: b, C: c, T: t, H: h, W: w, tt: t, data: make([]float32, b*c*t*h*w)}
}

// NewTouched is New with every page of its memory written once, so that
// the page faults of a large video are taken here (on a goroutine of the
// caller's choosing) and not by the copies that fill it.
func NewTouched(b, c, t, h, w int) *Video {
	v := New(b, c, t, h, w)
	for i := 0; i < len(v.data); i += 1024 { // 4 KiB of float32
		v.data[i] = 0
	}
	return v
}

// Of copies a (B, C, T, H, W) tensor to the host as f32.
func Of(x *tensor.Tensor) *Video {
	v := &Video{B: x.Dim(0), C: x.Dim(1), T: x.Dim(2), H: x.Dim(3), W: x.Dim(4), tt: x.Dim(2)}
	v.data = tensor.Float32s(x)
	if x.DType() == tensor.F32 && x.OnHost() {
		// The values are the backend's own storage: copy them out.
		v.data = append([]float32(nil), v.data...)
	}
	return v
}

func (v *Video) idx(b, c, t, y, x int) int {
	return (((b*v.C+c)*v.tt+v.t0+t)*v.H+y)*v.W + x
}

// Frame is the H·W plane of (b, c, t).
func (v *Video) Frame(b, c, t int) []float32 {
	i := v.idx(b, c, t, 0, 0)
	return v.data[i : i+v.H*v.W]
}

// DropFirst hides the first frame.
func (v *Video) DropFirst() *Video {
	d := *v
	if d.T > 0 {
		d.t0++
		d.T--
	}
	return &d
}

// compact is v with no hidden frames (a copy when it has some).
func (v *Video) compact() *Video {
	if v.t0 == 0 && v.T == v.tt {
		return v
	}
	c := New(v.B, v.C, v.T, v.H, v.W)
	Paste(c, 0, 0, 0, v, 0, 0, 0, v.T, v.H, v.W)
	return c
}

// Tensor is the video as a host tensor (sharing its values unless frames
// are hidden).
func (v *Video) Tensor() *tensor.Tensor {
	v = v.compact()
	return tensor.FromFloat32(v.data, v.B, v.C, v.T, v.H, v.W)
}

// SetFrames copies y (B, C, n, H, W), any dtype on any backend, into frames
// t0 … t0+n−1.
func (v *Video) SetFrames(t0 int, y *tensor.Tensor) {
	if y.Rank() != 5 || y.Dim(0) != v.B || y.Dim(1) != v.C || y.Dim(3) != v.H || y.Dim(4) != v.W || t0 < 0 || t0+y.Dim(2) > v.T {
		// Checked here: the device path downloads straight into v's memory.
		panic(&tensor.OpError{Op: "set frames", Err: fmt.Errorf("frames %v at frame %d of a video (%d, %d, %d, %d, %d)",
			y.Shape(), t0, v.B, v.C, v.T, v.H, v.W)})
	}
	n, hw := y.Dim(2), v.H*v.W
	if be := y.Backend(); !y.OnHost() && y.DType() == tensor.F32 && be != nil {
		// Each channel's frames straight into their place: no host copy.
		if err := be.Sync(); err != nil {
			panic(&tensor.OpError{Op: "download", Err: err})
		}
		for b := 0; b < v.B; b++ {
			for c := 0; c < v.C; c++ {
				d := v.idx(b, c, t0, 0, 0)
				dst := unsafe.Slice((*byte)(unsafe.Pointer(&v.data[d])), 4*n*hw)
				if err := be.Download(dst, y.Buffer(), int64(4*(b*v.C+c)*n*hw)); err != nil {
					panic(&tensor.OpError{Op: "download", Err: err})
				}
			}
		}
		return
	}
	src := tensor.Float32s(y)
	for b := 0; b < v.B; b++ {
		for c := 0; c < v.C; c++ {
			d := v.idx(b, c, t0, 0, 0)
			copy(v.data[d:d+n*hw], src[(b*v.C+c)*n*hw:(b*v.C+c+1)*n*hw])
		}
	}
}

// Clamp limits every value to [lo, hi] (NaN stays NaN), over the cores
// for a long video: a decode waits for it.
func (v *Video) Clamp(lo, hi float32) {
	clamp := func(d []float32) {
		for i, x := range d {
			if x == x {
				d[i] = min(max(x, lo), hi)
			}
		}
	}
	const chunk = 1 << 20
	parts := min(runtime.GOMAXPROCS(0), (len(v.data)+chunk-1)/chunk)
	if parts <= 1 {
		clamp(v.data)
		return
	}
	var wg sync.WaitGroup
	for i := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			clamp(v.data[i*len(v.data)/parts : (i+1)*len(v.data)/parts])
		}()
	}
	wg.Wait()
}

// Posterior cuts moments (B, 2·C, …) into the mean and the logvar, logvar
// clamped to [−30, 20] as diffusers' DiagonalGaussianDistribution does, as
// host tensors.
func Posterior(mom *Video) (mean, logvar *tensor.Tensor) {
	mom = mom.compact()
	lc := mom.C / 2
	m, lv := New(mom.B, lc, mom.T, mom.H, mom.W), New(mom.B, lc, mom.T, mom.H, mom.W)
	n := mom.T * mom.H * mom.W
	for b := 0; b < mom.B; b++ {
		for c := 0; c < lc; c++ {
			copy(m.data[(b*lc+c)*n:(b*lc+c+1)*n], mom.data[(b*mom.C+c)*n:])
			src := mom.data[(b*mom.C+lc+c)*n : (b*mom.C+lc+c+1)*n]
			dst := lv.data[(b*lc+c)*n : (b*lc+c+1)*n]
			for i := range dst {
				dst[i] = min(max(src[i], -30), 20)
			}
		}
	}
	return m.Tensor(), lv.Tensor()
}

// forPlanes runs fn for every (b, c, t) plane of v, in parallel when the
// work is large.
func forPlanes(v *Video, work int, fn func(b, c, t int)) {
	n := v.B * v.C * v.T
	workers := runtime.NumCPU()
	if workers == 1 || n*work < 1<<15 {
		for i := 0; i < n; i++ {
			fn(i/(v.C*v.T), i/v.T%v.C, i%v.T)
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
				fn(i/(v.C*v.T), i/v.T%v.C, i%v.T)
			}
		}()
	}
	wg.Wait()
}

// Paste copies src[.., t0:t0+nt, y0:y0+nh, x0:x0+nw] into dst at (dt, dy, dx).
func Paste(dst *Video, dt, dy, dx int, src *Video, t0, y0, x0, nt, nh, nw int) {
	region := *src
	region.t0, region.T = src.t0+t0, nt
	forPlanes(&region, nh*nw, func(b, c, t int) {
		for y := 0; y < nh; y++ {
			d := dst.idx(b, c, dt+t, dy+y, dx)
			s := region.idx(b, c, t, y0+y, x0)
			copy(dst.data[d:d+nw], region.data[s:s+nw])
		}
	})
}
