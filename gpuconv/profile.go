package gpuconv

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/framepack-go/framepack/convchain"
	"github.com/framepack-go/framepack/tensor"
)

// Profile accumulates the time of kernel classes. Timing waits for the
// device before and after each timed call, so a profiled run is slower than
// a plain one (nothing overlaps) but says where the device time goes. A nil
// *Profile times nothing.
type Profile struct {
	mu    sync.Mutex
	stats map[string]*profStat
}

type profStat struct {
	n     int
	d     time.Duration
	flops float64
}

// NewProfile returns an empty profile.
func NewProfile() *Profile { return &Profile{stats: map[string]*profStat{}} }

// time runs fn between two waits for be and adds its time (and flops) to
// class.
func (p *Profile) time(class string, be tensor.Backend, flops float64, fn func() error) error {
	if p == nil {
		return fn()
	}
	if err := be.Sync(); err != nil {
		return err
	}
	start := time.Now()
	err := fn()
	if err == nil {
		err = be.Sync()
	}
	d := time.Since(start)
	p.mu.Lock()
	s := p.stats[class]
	if s == nil {
		s = &profStat{}
		p.stats[class] = s
	}
	s.n++
	s.d += d
	s.flops += flops
	p.mu.Unlock()
	return err
}

// Reset forgets what was timed so far.
func (p *Profile) Reset() {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.stats = map[string]*profStat{}
	p.mu.Unlock()
}

// ProfileLine is one kernel class of a Profile.
type ProfileLine struct {
	Class   string  `json:"class"`
	Calls   int     `json:"calls"`
	Seconds float64 `json:"seconds"`
	// TFLOPS is the arithmetic rate, for classes that count operations.
	TFLOPS float64 `json:"tflops,omitempty"`
}

func (l ProfileLine) String() string {
	s := fmt.Sprintf("%-34s %6d calls %9.3f s", l.Class, l.Calls, l.Seconds)
	if l.TFLOPS > 0 {
		s += fmt.Sprintf(" %7.1f TFLOP/s", l.TFLOPS)
	}
	return s
}

// Lines lists the classes, most time first.
func (p *Profile) Lines() []ProfileLine {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []ProfileLine
	for c, s := range p.stats {
		l := ProfileLine{Class: c, Calls: s.n, Seconds: s.d.Seconds()}
		if s.flops > 0 && s.d > 0 {
			l.TFLOPS = s.flops / s.d.Seconds() / 1e12
		}
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b ProfileLine) int {
		if a.Seconds != b.Seconds {
			if a.Seconds > b.Seconds {
				return -1
			}
			return 1
		}
		return 0
	})
	return out
}

// Profiled wraps be so that every kernel is timed into p by class (the op,
// with the convolution's channels and kernel size). Put it outside the
// conv3d chain to see the chain's convolutions whole; the optimized tier
// adds its own phases (conv3d.pack, conv3d.library, conv3d.unpack) when
// Options.Profile is set.
func Profiled(be tensor.Backend, p *Profile) *ProfiledBackend {
	return &ProfiledBackend{Backend: be, p: p}
}

// ProfiledBackend is a backend whose kernels are timed.
type ProfiledBackend struct {
	tensor.Backend
	p *Profile
}

// Unwrap is the inner backend.
func (b *ProfiledBackend) Unwrap() tensor.Backend { return b.Backend }

// HostBacked forwards the inner backend's answer.
func (b *ProfiledBackend) HostBacked() bool {
	hb, ok := b.Backend.(tensor.HostBacked)
	return ok && hb.HostBacked()
}

// Trim forwards to the inner backend when it has pools.
func (b *ProfiledBackend) Trim() error {
	if t, ok := b.Backend.(interface{ Trim() error }); ok {
		return t.Trim()
	}
	return nil
}

func (b *ProfiledBackend) t(class string, fn func() error) error {
	return b.p.time(class, b.Backend, 0, fn)
}

func (b *ProfiledBackend) Fill(dst *tensor.Tensor, v float64) error {
	return b.t("fill", func() error { return b.Backend.Fill(dst, v) })
}
func (b *ProfiledBackend) Cast(dst, src *tensor.Tensor) error {
	return b.t("cast", func() error { return b.Backend.Cast(dst, src) })
}
func (b *ProfiledBackend) Copy(dst *tensor.Tensor, dOff int, dSt []int, src *tensor.Tensor, sOff int, sSt []int, shape []int) error {
	return b.t("copy", func() error { return b.Backend.Copy(dst, dOff, dSt, src, sOff, sSt, shape) })
}
func (b *ProfiledBackend) Unary(op tensor.UnaryOp, dst, src *tensor.Tensor, x, y float32) error {
	return b.t("unary "+op.String(), func() error { return b.Backend.Unary(op, dst, src, x, y) })
}
func (b *ProfiledBackend) Binary(op tensor.BinaryOp, dst, x *tensor.Tensor, xSt []int, y *tensor.Tensor, ySt []int) error {
	return b.t("binary "+op.String(), func() error { return b.Backend.Binary(op, dst, x, xSt, y, ySt) })
}
func (b *ProfiledBackend) MatMul(dst, x, y *tensor.Tensor, p tensor.MatMulParams) error {
	f := 2 * float64(max(p.Batch, 1)) * float64(p.M) * float64(p.N) * float64(p.K)
	return b.p.time("matmul", b.Backend, f, func() error { return b.Backend.MatMul(dst, x, y, p) })
}
func (b *ProfiledBackend) Linear(dst, x, w, bias *tensor.Tensor) error {
	f := 2 * float64(dst.Numel()) * float64(w.Dim(1))
	return b.p.time("linear", b.Backend, f, func() error { return b.Backend.Linear(dst, x, w, bias) })
}
func (b *ProfiledBackend) Conv3d(dst, x, w, bias *tensor.Tensor, p tensor.ConvParams) error {
	class := fmt.Sprintf("conv3d %d→%d k%d", w.Dim(1), w.Dim(0), w.Dim(2))
	if p.Stride != [3]int{1, 1, 1} && p.Stride != [3]int{} {
		class += fmt.Sprintf(" s%v", p.Stride)
	}
	f := 2 * float64(dst.Numel()) * float64(w.Numel()/max(w.Dim(0), 1))
	return b.p.time(class, b.Backend, f, func() error { return b.Backend.Conv3d(dst, x, w, bias, p) })
}
func (b *ProfiledBackend) GroupNorm(dst, x, w, bias *tensor.Tensor, groups int, eps float32, silu bool) error {
	class := "group_norm"
	if silu {
		class += "+silu"
	}
	return b.t(class, func() error { return b.Backend.GroupNorm(dst, x, w, bias, groups, eps, silu) })
}
func (b *ProfiledBackend) LayerNorm(dst, x, w, bias *tensor.Tensor, eps float32) error {
	return b.t("layer_norm", func() error { return b.Backend.LayerNorm(dst, x, w, bias, eps) })
}
func (b *ProfiledBackend) RMSNorm(dst, x, w *tensor.Tensor, eps float32) error {
	return b.t("rms_norm", func() error { return b.Backend.RMSNorm(dst, x, w, eps) })
}
func (b *ProfiledBackend) Softmax(dst, x *tensor.Tensor) error {
	return b.t("softmax", func() error { return b.Backend.Softmax(dst, x) })
}
func (b *ProfiledBackend) Attention(dst, q, k, v *tensor.Tensor, p tensor.AttnParams) error {
	f := 4 * float64(q.Dim(0)) * float64(q.Dim(1)) * float64(k.Dim(1)) * float64(q.Dim(2)) * float64(q.Dim(3))
	return b.p.time("attention", b.Backend, f, func() error { return b.Backend.Attention(dst, q, k, v, p) })
}
func (b *ProfiledBackend) RoPE(dst, x, cos, sin *tensor.Tensor) error {
	return b.t("rope", func() error { return b.Backend.RoPE(dst, x, cos, sin) })
}
func (b *ProfiledBackend) Reduce(op tensor.ReduceOp, dst, src *tensor.Tensor) error {
	return b.t("reduce", func() error { return b.Backend.Reduce(op, dst, src) })
}
func (b *ProfiledBackend) Pad(dst, src *tensor.Tensor, before []int, mode tensor.PadMode) error {
	return b.t("pad", func() error { return b.Backend.Pad(dst, src, before, mode) })
}
func (b *ProfiledBackend) UpsampleNearest(dst, src *tensor.Tensor, scale [3]int) error {
	return b.t("upsample", func() error { return b.Backend.UpsampleNearest(dst, src, scale) })
}
func (b *ProfiledBackend) AvgPool3d(dst, src *tensor.Tensor, kernel [3]int) error {
	return b.t("avg_pool", func() error { return b.Backend.AvgPool3d(dst, src, kernel) })
}
func (b *ProfiledBackend) Embedding(dst, table, ids *tensor.Tensor) error {
	return b.t("embedding", func() error { return b.Backend.Embedding(dst, table, ids) })
}

type paddedConv interface {
	Conv3dPadded(dst, x, w, bias *tensor.Tensor, p tensor.ConvParams, pad convchain.Padding) error
}

// Conv3dPadded times the inner backend's Conv3dPadded (a padded copy and
// Conv3d when it has none).
func (b *ProfiledBackend) Conv3dPadded(dst, x, w, bias *tensor.Tensor, p tensor.ConvParams, pad convchain.Padding) error {
	class := fmt.Sprintf("conv3d %d→%d k%d", w.Dim(1), w.Dim(0), w.Dim(2))
	if p.Stride != [3]int{1, 1, 1} && p.Stride != [3]int{} {
		class += fmt.Sprintf(" s%v", p.Stride)
	}
	f := 2 * float64(dst.Numel()) * float64(w.Numel()/max(w.Dim(0), 1))
	var pc paddedConv
	for be := b.Backend; be != nil && pc == nil; {
		if c, ok := be.(paddedConv); ok {
			pc = c
			break
		}
		u, ok := be.(interface{ Unwrap() tensor.Backend })
		if !ok {
			break
		}
		be = u.Unwrap()
	}
	return b.p.time(class, b.Backend, f, func() error {
		if pc != nil {
			return pc.Conv3dPadded(dst, x, w, bias, p, pad)
		}
		// No chain below (the CPU): the padded copy, upsample included.
		px, err := pad.Materialize(b.Backend, x)
		if err != nil {
			return err
		}
		defer tensor.Release(px)
		return b.Backend.Conv3d(dst, px, w, bias, p)
	})
}
