package gpuconv

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/framepack-go/framepack/hip"
	"github.com/framepack-go/framepack/internal/atomicfile"
	"github.com/framepack-go/framepack/kernels"
	"github.com/framepack-go/framepack/tensor"
)

// layoutKernels are kernels/convlayout.hip on one device, compiled at run
// time (cached on disk next to the GPU backend's kernels).
type layoutKernels struct {
	dev    *hip.Device
	stream hip.Stream
	once   sync.Once
	err    error
	fns    map[string]*hip.Function
}

const layoutModule = "convlayout"

func (l *layoutKernels) load() error {
	l.once.Do(func() {
		code, err := codeObject(l.dev, layoutModule)
		if err != nil {
			l.err = err
			return
		}
		m, err := l.dev.LoadModule(code)
		if err != nil {
			l.err = fmt.Errorf("gpuconv: load kernels %s: %w", layoutModule, err)
			return
		}
		l.fns = map[string]*hip.Function{}
		for _, dt := range []string{"f32", "f16", "bf16"} {
			for _, k := range []string{"pack_", "unpack_", "packpad_"} {
				for _, v := range []string{"", "_v"} {
					name := k + dt + v
					f, err := m.Function(name)
					if err != nil {
						l.err = fmt.Errorf("gpuconv: %w", err)
						return
					}
					l.fns[name] = f
				}
			}
		}
	})
	return l.err
}

// codeObject compiles a kernels module for dev, or reads it from the disk
// cache (os.UserCacheDir()/framepack/kernels; a file starts with the
// SHA-256 of its contents, so a torn write is ignored).
func codeObject(dev *hip.Device, name string) ([]byte, error) {
	src, err := kernels.Source(name)
	if err != nil {
		return nil, fmt.Errorf("gpuconv: kernels %s: %w", name, err)
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00%s", src, dev.Vendor, dev.Arch, dev.CompilerVersion())
	key := hex.EncodeToString(h.Sum(nil))[:32]
	var path string
	if dir, err := os.UserCacheDir(); err == nil {
		path = filepath.Join(dir, "framepack", "kernels", "gpuconv-"+name+"-"+key+".co")
		if data, err := os.ReadFile(path); err == nil && len(data) > sha256.Size {
			sum := sha256.Sum256(data[sha256.Size:])
			if bytes.Equal(sum[:], data[:sha256.Size]) {
				return data[sha256.Size:], nil
			}
		}
	}
	code, err := dev.Compile(src, name+".hip", nil)
	if err != nil {
		return nil, fmt.Errorf("gpuconv: %w", err)
	}
	if path != "" {
		sum := sha256.Sum256(code)
		// Best effort: without the cache the next run compiles again.
		if os.MkdirAll(filepath.Dir(path), 0o755) == nil {
			atomicfile.WriteFile(path, append(sum[:], code...), 0o600)
		}
	}
	return code, nil
}

func dtSuffix(dt tensor.DType) string {
	switch dt {
	case tensor.F32:
		return "f32"
	case tensor.F16:
		return "f16"
	case tensor.BF16:
		return "bf16"
	}
	return ""
}

const tileEdge = 64 // LT in convlayout.hip

func tiles(n int64) uint32 { return uint32((n + tileEdge - 1) / tileEdge) }

// pack queues dst (N, tc, S, C) = src (N, C, T, S) frames t0 … t0+tc−1
// (zeros outside [0, T)).
func (l *layoutKernels) pack(dt tensor.DType, dst, src uintptr, N, C, T, S, t0, tc int) error {
	if err := l.load(); err != nil {
		return err
	}
	name := "pack_" + dtSuffix(dt)
	if S%2 == 0 && C%2 == 0 {
		name += "_v"
	}
	if int64(N)*int64(tc) > 65535 {
		return fmt.Errorf("gpuconv: pack of %d×%d frames exceeds one launch", N, tc)
	}
	a := (&hip.Args{}).Ptr(dst).Ptr(src).I64(int64(C)).I64(int64(T)).I64(int64(S)).I64(int64(t0)).I64(int64(tc))
	return l.fns[name].Launch(hip.Dim3{tiles(int64(S)), tiles(int64(C)), uint32(N * tc)}, hip.Dim3{256}, 0, l.stream, a)
}

// unpack queues dst (N, K, To, S) frames t0 … t0+tc−1 = src (N, tc, S, K)
// + bias (0: none).
func (l *layoutKernels) unpack(dt tensor.DType, dst, src, bias uintptr, N, K, To, S, t0, tc int) error {
	if err := l.load(); err != nil {
		return err
	}
	name := "unpack_" + dtSuffix(dt)
	if S%2 == 0 && K%2 == 0 {
		name += "_v"
	}
	if int64(N)*int64(tc) > 65535 {
		return fmt.Errorf("gpuconv: unpack of %d×%d frames exceeds one launch", N, tc)
	}
	a := (&hip.Args{}).Ptr(dst).Ptr(src).Ptr(bias).I64(int64(K)).I64(int64(To)).I64(int64(S)).I64(int64(t0)).I64(int64(tc))
	return l.fns[name].Launch(hip.Dim3{tiles(int64(S)), tiles(int64(K)), uint32(N * tc)}, hip.Dim3{256}, 0, l.stream, a)
}

// padGeom is packpad's view of a padded input: x (N, C, T, H, W) repeated
// by up (causal: frame 0 once) to Tu×Hu×Wu, padded by before (replicate
// or zeros) to Tp×Hp×Wp, then zt zero frames each side.
type padGeom struct {
	N, C, T, H, W int
	Tu, Hu, Wu    int
	up            [3]int
	causal        bool
	Tp, Hp, Wp    int
	before        [3]int
	zt            int
	replicate     bool
}

// packpad queues dst (N, tc, Hp, Wp, C) = frames tf0 … tf0+tc−1 of the
// padded input.
func (l *layoutKernels) packpad(dt tensor.DType, dst, src uintptr, g padGeom, tf0, tc int) error {
	if err := l.load(); err != nil {
		return err
	}
	name := "packpad_" + dtSuffix(dt)
	if g.C%2 == 0 {
		name += "_v"
	}
	if int64(g.N)*int64(tc) > 65535 {
		return fmt.Errorf("gpuconv: pack of %d×%d frames exceeds one launch", g.N, tc)
	}
	mode := int32(0)
	if g.replicate {
		mode = 1
	}
	var b []byte
	for _, v := range []int64{int64(g.C), int64(g.T), int64(g.H), int64(g.W), int64(tc), int64(tf0)} {
		b = binary.LittleEndian.AppendUint64(b, uint64(v))
	}
	causal := int32(0)
	if g.causal {
		causal = 1
	}
	for _, v := range []int32{int32(g.Tp), int32(g.Hp), int32(g.Wp), int32(g.before[0]), int32(g.before[1]), int32(g.before[2]), int32(g.zt), mode,
		int32(g.Tu), int32(g.Hu), int32(g.Wu), int32(max(g.up[0], 1)), int32(max(g.up[1], 1)), int32(max(g.up[2], 1)), causal} {
		b = binary.LittleEndian.AppendUint32(b, uint32(v))
	}
	for len(b)%8 != 0 { // the struct's size, a multiple of its alignment
		b = append(b, 0)
	}
	S := int64(g.Hp) * int64(g.Wp)
	a := (&hip.Args{}).Ptr(dst).Ptr(src).Struct(b, 8)
	return l.fns[name].Launch(hip.Dim3{tiles(S), tiles(int64(g.C)), uint32(g.N * tc)}, hip.Dim3{256}, 0, l.stream, a)
}
