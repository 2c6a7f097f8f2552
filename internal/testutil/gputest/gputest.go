// Package gputest gives the vendor-library tests (packages rocblas and
// miopen) a device, memory and a stream without the engine's hip package:
// the CUDA driver (libcuda.so.1) or the HIP runtime (libamdhip64), loaded
// with dlopen. It is test support only; engine code uses package hip.
package gputest

import (
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/framepack-go/framepack/internal/dynlib"
	"github.com/framepack-go/framepack/tensor"
)

// Device is the first GPU of the platform found.
type Device struct {
	Platform string // "cuda" or "hip"
	Name     string
	Stream   uintptr
	rt       runtimeAPI
}

type runtimeAPI interface {
	bind() error
	malloc(n int64) (uintptr, error)
	free(p uintptr)
	htod(dst uintptr, src []byte) error
	dtoh(dst []byte, src uintptr) error
	memset(p uintptr, b byte, n int64) error
	newStream() (uintptr, error)
	sync(stream uintptr) error
}

var (
	dev    *Device
	devErr error
	opened bool
)

// Open finds the GPU once per process and binds it to the calling thread,
// which it locks (GPU contexts are per OS thread). Tests call it at their
// start; it skips the test with the reason when there is no GPU.
func Open(t testing.TB) *Device {
	t.Helper()
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
	if !opened {
		opened = true
		dev, devErr = open()
	}
	if devErr != nil {
		t.Skipf("no GPU: %v", devErr)
	}
	if err := dev.rt.bind(); err != nil {
		t.Fatalf("gputest: bind device: %v", err)
	}
	return dev
}

// Vendor is the library family of the device's platform.
func (d *Device) Vendor() dynlib.Vendor {
	if d.Platform == "cuda" {
		return dynlib.NVIDIA
	}
	return dynlib.AMD
}

// OpenHandle gives the device (skipping without one) and a handle that
// newHandle makes from the device's library of the kind what names ("BLAS",
// say), opened by open; the test skips, with the reason, when that library
// is absent. The handle is closed when the test ends.
func OpenHandle[L fmt.Stringer, H io.Closer](t testing.TB, what string, open func(dynlib.Vendor) (L, error),
	newHandle func(*Device, L) (H, error)) (*Device, H) {
	t.Helper()
	dev := Open(t)
	lib, err := open(dev.Vendor())
	if err != nil {
		t.Skipf("GPU %s present but no %s library: %v", dev.Name, what, err)
	}
	h, err := newHandle(dev, lib)
	if err != nil {
		t.Fatalf("%v: NewHandle: %v", lib, err)
	}
	t.Cleanup(func() { h.Close() })
	t.Logf("device %s (%s), %v", dev.Name, dev.Platform, lib)
	return dev, h
}

// Bind makes the device current on the calling goroutine's thread, which
// it locks; sub-tests and sub-benchmarks run on goroutines of their own.
func (d *Device) Bind(t testing.TB) {
	t.Helper()
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
	if err := d.rt.bind(); err != nil {
		t.Fatalf("gputest: bind device: %v", err)
	}
}

// Alloc allocates n bytes, freed when the test ends.
func (d *Device) Alloc(t testing.TB, n int64) uintptr {
	t.Helper()
	p, err := d.rt.malloc(max(n, 1))
	if err != nil {
		t.Fatalf("gputest: alloc %d bytes: %v", n, err)
	}
	t.Cleanup(func() { d.rt.free(p) })
	return p
}

// Upload allocates device memory holding b.
func (d *Device) Upload(t testing.TB, b []byte) uintptr {
	t.Helper()
	p := d.Alloc(t, int64(len(b)))
	if err := d.rt.htod(p, b); err != nil {
		t.Fatalf("gputest: upload: %v", err)
	}
	return p
}

// Write copies b to p.
func (d *Device) Write(t testing.TB, p uintptr, b []byte) {
	t.Helper()
	if err := d.rt.htod(p, b); err != nil {
		t.Fatalf("gputest: upload: %v", err)
	}
}

// Download copies n bytes at p to the host, after the stream finishes.
func (d *Device) Download(t testing.TB, p uintptr, n int) []byte {
	t.Helper()
	d.Sync(t)
	b := make([]byte, n)
	if err := d.rt.dtoh(b, p); err != nil {
		t.Fatalf("gputest: download: %v", err)
	}
	return b
}

// Poison fills n bytes at p with 0xFF, a NaN in f32, f16 and bf16, so an
// element a kernel failed to write shows up.
func (d *Device) Poison(t testing.TB, p uintptr, n int64) {
	t.Helper()
	if err := d.rt.memset(p, 0xFF, n); err != nil {
		t.Fatalf("gputest: memset: %v", err)
	}
}

// Sync waits for the device's stream.
func (d *Device) Sync(t testing.TB) {
	t.Helper()
	if err := d.rt.sync(d.Stream); err != nil {
		t.Fatalf("gputest: stream sync: %v", err)
	}
}

func open() (*Device, error) {
	var errs []string
	for _, p := range []struct {
		name string
		open func() (runtimeAPI, string, error)
	}{{"cuda", openCUDA}, {"hip", openHIP}} {
		rt, name, err := p.open()
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", p.name, err))
			continue
		}
		if err := rt.bind(); err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", p.name, err))
			continue
		}
		s, err := rt.newStream()
		if err != nil {
			return nil, fmt.Errorf("%s: create stream: %v", p.name, err)
		}
		return &Device{Platform: p.name, Name: name, Stream: s, rt: rt}, nil
	}
	return nil, fmt.Errorf("%v", errs)
}

// Host-side data for tests: random values already rounded to the dtype, as
// bytes to upload and as float64 for the reference.

// DType is the element type of the packages under test.
type DType = dynlib.DType

const (
	F32  = dynlib.F32
	F16  = dynlib.F16
	BF16 = dynlib.BF16
)

// Tolerance is the relative L2 error allowed against float64 math on the
// same (rounded) inputs: the output's rounding for bf16 and f16, TF32's
// for f32 in fast mode, else f32, the error of the library's own f32
// accumulation (which grows with the length of its sums).
func Tolerance(out DType, fast bool, f32 float64) float64 {
	switch {
	case out == BF16:
		return 1e-2
	case out == F16:
		return 2e-3
	case fast:
		return 3e-3
	}
	return f32
}

// Random returns n values uniform in [-1, 1) rounded to dt, and their bytes.
func Random(rng *rand.Rand, dt DType, n int) ([]float64, []byte) {
	v := make([]float64, n)
	for i := range v {
		v[i] = rng.Float64()*2 - 1
	}
	return v, Encode(dt, v)
}

// Tiled returns n values of dt for benchmarks: a block of random values
// repeated (fast to make for large buffers, and never zeros, which run
// faster than real data on some GPUs).
func Tiled(dt DType, n int) []byte {
	rng := rand.New(rand.NewPCG(3, 4))
	_, blk := Random(rng, dt, 1<<16+7)
	b := make([]byte, n*dt.Size())
	for i := 0; i < len(b); i += len(blk) {
		copy(b[i:], blk)
	}
	return b
}

// Encode rounds v to dt (round to nearest even) and returns the bytes; v is
// updated to the rounded values.
func Encode(dt DType, v []float64) []byte {
	b := make([]byte, len(v)*dt.Size())
	for i, x := range v {
		f := float32(x)
		switch dt {
		case F32:
			putU32(b[4*i:], math.Float32bits(f))
			v[i] = float64(f)
		case F16:
			h := f32ToF16(f)
			putU16(b[2*i:], h)
			v[i] = float64(f16ToF32(h))
		case BF16:
			h := f32ToBF16(f)
			putU16(b[2*i:], h)
			v[i] = float64(math.Float32frombits(uint32(h) << 16))
		}
	}
	return b
}

// Decode reads n values of dt.
func Decode(dt DType, b []byte) []float64 {
	n := len(b) / dt.Size()
	v := make([]float64, n)
	for i := range v {
		switch dt {
		case F32:
			v[i] = float64(math.Float32frombits(getU32(b[4*i:])))
		case F16:
			v[i] = float64(f16ToF32(getU16(b[2*i:])))
		case BF16:
			v[i] = float64(math.Float32frombits(uint32(getU16(b[2*i:])) << 16))
		}
	}
	return v
}

// RelL2 is ‖got − want‖ / ‖want‖; NaN or Inf anywhere in got gives +Inf.
func RelL2(got, want []float64) float64 {
	if len(got) != len(want) {
		return math.Inf(1)
	}
	var num, den float64
	for i := range got {
		if math.IsNaN(got[i]) || math.IsInf(got[i], 0) {
			return math.Inf(1)
		}
		d := got[i] - want[i]
		num += d * d
		den += want[i] * want[i]
	}
	if den == 0 {
		return math.Sqrt(num)
	}
	return math.Sqrt(num / den)
}

func putU16(b []byte, v uint16) { b[0], b[1] = byte(v), byte(v>>8) }
func getU16(b []byte) uint16    { return uint16(b[0]) | uint16(b[1])<<8 }
func putU32(b []byte, v uint32) {
	b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
}
func getU32(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}

func f32ToF16(f float32) uint16  { return tensor.F16FromF32(f) }
func f16ToF32(h uint16) float32  { return tensor.F32FromF16(h) }
func f32ToBF16(f float32) uint16 { return tensor.BF16FromF32(f) }

// AttnShape is an attention's (B, L, H, D) q/o and k/v layout: Hq a
// multiple of Hkv.
type AttnShape struct{ B, Lq, Lk, Hq, Hkv, D int }

// Attention is softmax(scale·q·kᵀ)·v in float64 on (B, L, H, D) arrays.
// With round set, each term exp(s − max) is passed through it before the
// product with v, and the row's sum of the unrounded terms divides after
// (how a flash kernel rounds its probabilities to a narrower type).
func Attention(d AttnShape, q, k, v []float64, scale float64, round func(float64) float64) []float64 {
	out := make([]float64, d.B*d.Lq*d.Hq*d.D)
	s := make([]float64, d.Lk)
	group := d.Hq / d.Hkv
	for b := range d.B {
		for h := range d.Hq {
			hk := h / group
			for i := range d.Lq {
				qr := q[((b*d.Lq+i)*d.Hq+h)*d.D:][:d.D]
				m := math.Inf(-1)
				for j := range d.Lk {
					kr := k[((b*d.Lk+j)*d.Hkv+hk)*d.D:][:d.D]
					var dot float64
					for x := range d.D {
						dot += qr[x] * kr[x]
					}
					s[j] = dot * scale
					m = max(m, s[j])
				}
				var sum float64
				for j := range s {
					s[j] = math.Exp(s[j] - m)
					sum += s[j]
				}
				or := out[((b*d.Lq+i)*d.Hq+h)*d.D:][:d.D]
				for j := range d.Lk {
					p := s[j]
					if round != nil {
						p = round(p)
					}
					vr := v[((b*d.Lk+j)*d.Hkv+hk)*d.D:][:d.D]
					for x := range d.D {
						or[x] += p / sum * vr[x]
					}
				}
			}
		}
	}
	return out
}
