package weights

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"

	"github.com/framepack-go/framepack/tensor"
)

// vmStatus reads a "VmXXX: N kB" field of /proc/self/status (-1: none).
func vmStatus(key string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			f := strings.Fields(v)
			if n, err := strconv.ParseInt(f[0], 10, 64); err == nil {
				return n << 10
			}
		}
	}
	return -1
}

// TestLoadReleasesMappedPages loads every tensor of a 256 MiB checkpoint
// onto a device-like backend (whose memory is this process's) and checks
// the peak resident set: the device copies and little else, where keeping
// the file's mapped pages until Close would be twice the file. As bf16 the
// conversion is chunked: no whole-tensor staging copy either.
func TestLoadReleasesMappedPages(t *testing.T) {
	if testing.Short() {
		t.Skip("writes a 256 MiB checkpoint")
	}
	const n, rows, cols = 16, 1024, 4096 // 16 f32 tensors of 16 MiB
	ts := map[string]*tensor.Tensor{}
	for i := 0; i < n; i++ {
		v := make([]float32, rows*cols)
		for j := range v {
			v[j] = float32(i*j%1000) / 1000
		}
		ts[fmt.Sprintf("w%02d", i)] = tensor.FromFloat32(v, rows, cols)
	}
	path := filepath.Join(t.TempDir(), "model.safetensors")
	if err := Save(path, ts, nil); err != nil {
		t.Fatal(err)
	}
	ts = nil
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	size := st.Size()
	for _, c := range []struct {
		dt    tensor.DType
		bound float64 // of the file size; holding the file twice is ≥ 2 (f32) or ≥ 1.5 (bf16)
	}{{tensor.F32, 1.3}, {tensor.BF16, 0.8}} {
		t.Run(c.dt.String(), func(t *testing.T) {
			ck, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			be := &devBE{}
			var held []*tensor.Tensor
			runtime.GC()
			debug.FreeOSMemory()
			before := vmStatus("VmRSS")
			if before < 0 || os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) != nil {
				t.Skip("the peak resident set cannot be measured here")
			}
			for _, name := range ck.Names() {
				x, err := ck.Load(be, name, c.dt)
				if err != nil {
					t.Fatal(err)
				}
				held = append(held, x)
			}
			rise := vmStatus("VmHWM") - before
			var dev int64
			for _, x := range held {
				dev += x.Bytes()
			}
			ratio := float64(rise) / float64(size)
			t.Logf("%s: file %d MiB, device copies %d MiB, peak RSS rose %d MiB (%.2f× the file)", c.dt, size>>20, dev>>20, rise>>20, ratio)
			if ratio > c.bound {
				t.Errorf("peak RSS rose %.2f× the file, want ≤ %.2f×: the mapped pages or a staging copy were held beside the device copy", ratio, c.bound)
			}
			// The values arrived: w01[999] = 0.999.
			if c.dt == tensor.F32 {
				got := make([]byte, 4)
				be.Download(got, held[1].Buffer(), 4*999)
				if v := math.Float32frombits(binary.LittleEndian.Uint32(got)); v != float32(999)/1000 {
					t.Errorf("w01[999] = %g, want 0.999", v)
				}
			}
		})
	}
}
