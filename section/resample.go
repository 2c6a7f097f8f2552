package section

import (
	"fmt"
	"math"
)

// Filter is a resampling kernel as Pillow defines it.
type Filter int

const (
	Lanczos Filter = iota // Pillow's LANCZOS: sinc windowed by sinc(x/3), support 3
	Bicubic               // Pillow's BICUBIC: cubic convolution with a = −0.5, support 2
	// TorchBicubic is torch's antialiased bicubic on uint8 images (what
	// torchvision's resize runs on the CPU): the same kernel and taps as
	// Pillow's BICUBIC, but the weights are rounded to int16 with a
	// per-axis precision instead of 22 bits, so a few pixels land one level
	// apart.
	TorchBicubic
)

func (f Filter) support() float64 {
	if f == Lanczos {
		return 3
	}
	return 2
}

func (f Filter) eval(x float64) float64 {
	switch f {
	case Lanczos:
		if -3 <= x && x < 3 {
			return sinc(x) * sinc(x/3)
		}
		return 0
	case TorchBicubic:
		const a = -0.5
		x = math.Abs(x)
		if x < 1 {
			return ((a+2)*x-(a+3))*x*x + 1
		}
		if x < 2 {
			return ((a*x-5*a)*x+8*a)*x - 4*a // torch's operation order
		}
		return 0
	default:
		const a = -0.5
		x = math.Abs(x)
		if x < 1 {
			return ((a+2)*x-(a+3))*x*x + 1
		}
		if x < 2 {
			return (((x-5)*x+8)*x - 4) * a
		}
		return 0
	}
}

func sinc(x float64) float64 {
	if x == 0 {
		return 1
	}
	x *= math.Pi
	return math.Sin(x) / x
}

// Pillow keeps 8-bit resampling in fixed point: coefficients scaled by 2^22,
// leaving headroom for negative lobes and sums above 1.
const precisionBits = 32 - 8 - 2

// coeffs are one axis's resampling weights: output position i reads the
// taps k[i] starting at input start[i]; sums are shifted right by prec.
type coeffs struct {
	start []int
	k     [][]int32
	prec  uint
}

// precompute derives the fixed-point weights for resizing inSize samples to
// outSize, as Pillow's precompute_coeffs and normalize_coeffs_8bpc do: the
// filter is stretched when downscaling, the weights of each output are
// normalised to sum 1 in float64, then rounded half away from zero to 22-bit
// fixed point. For TorchBicubic the precision is instead the largest (up to
// 22 bits) that keeps the largest weight within int16, as torch's
// _compute_index_ranges_int16_weights chooses it.
func precompute(inSize, outSize int, f Filter) coeffs {
	scale := float64(inSize) / float64(outSize)
	filterscale := math.Max(scale, 1)
	support := f.support() * filterscale
	inv := 1 / filterscale
	ksize := int(math.Ceil(support))*2 + 1
	c := coeffs{start: make([]int, outSize), k: make([][]int32, outSize), prec: precisionBits}
	ws := make([][]float64, outSize)
	wmax := 0.0
	for xx := 0; xx < outSize; xx++ {
		center := (float64(xx) + 0.5) * scale
		xmin := max(int(center-support+0.5), 0) // C casts truncate toward zero
		xmax := min(min(int(center+support+0.5), inSize)-xmin, ksize)
		w := make([]float64, max(xmax, 0))
		ww := 0.0
		for x := range w {
			w[x] = f.eval((float64(x+xmin) - center + 0.5) * inv)
			ww += w[x]
		}
		if ww != 0 {
			for x := range w {
				w[x] /= ww
				wmax = math.Max(wmax, w[x])
			}
		}
		c.start[xx], ws[xx] = xmin, w
	}
	if f == TorchBicubic {
		c.prec = 0
		for ; c.prec < 22; c.prec++ {
			if int(0.5+wmax*float64(int(1)<<(c.prec+1))) >= 1<<15 {
				break
			}
		}
	}
	scaleK := float64(int(1) << c.prec)
	for xx, w := range ws {
		k := make([]int32, len(w))
		for x, v := range w {
			if v *= scaleK; v < 0 {
				k[x] = int32(-0.5 + v)
			} else {
				k[x] = int32(0.5 + v)
			}
		}
		c.k[xx] = k
	}
	return c
}

// clip8 turns a fixed-point sum (with its rounding half already added) into
// a byte.
func clip8(ss int32, prec uint) uint8 {
	v := ss >> prec
	if v < 0 {
		return 0
	}
	if v > 255 {
		return 255
	}
	return uint8(v)
}

// Resize resamples an RGB image to w×h exactly as Pillow's Image.resize does
// for 8-bit images (or torch's uint8 antialiased interpolation, for
// TorchBicubic): a horizontal pass, then a vertical one, each in fixed point
// with rounding to bytes in between. A pass whose size does not change is
// skipped, as in both.
func Resize(im *RGB, w, h int, f Filter) (*RGB, error) {
	if w <= 0 || h <= 0 {
		return nil, fmt.Errorf("resize to %d×%d", w, h)
	}
	if im.W <= 0 || im.H <= 0 {
		return nil, fmt.Errorf("resize of an empty image")
	}
	out := im
	if w != im.W {
		c := precompute(im.W, w, f)
		tmp := NewRGB(w, im.H)
		for y := 0; y < im.H; y++ {
			in := im.Pix[y*im.W*3 : (y+1)*im.W*3]
			row := tmp.Pix[y*w*3 : (y+1)*w*3]
			for xx := 0; xx < w; xx++ {
				half := int32(1) << (c.prec - 1)
				s0, s1, s2 := half, half, half
				base := c.start[xx] * 3
				for x, k := range c.k[xx] {
					p := in[base+3*x : base+3*x+3]
					s0 += int32(p[0]) * k
					s1 += int32(p[1]) * k
					s2 += int32(p[2]) * k
				}
				row[3*xx], row[3*xx+1], row[3*xx+2] = clip8(s0, c.prec), clip8(s1, c.prec), clip8(s2, c.prec)
			}
		}
		out = tmp
	}
	if h != im.H {
		c := precompute(im.H, h, f)
		src := out
		dst := NewRGB(src.W, h)
		stride := src.W * 3
		for yy := 0; yy < h; yy++ {
			row := dst.Pix[yy*stride : (yy+1)*stride]
			for i := range row {
				s := int32(1) << (c.prec - 1)
				for y, k := range c.k[yy] {
					s += int32(src.Pix[(c.start[yy]+y)*stride+i]) * k
				}
				row[i] = clip8(s, c.prec)
			}
		}
		out = dst
	}
	if out == im {
		out = im.Clone()
	}
	return out, nil
}
