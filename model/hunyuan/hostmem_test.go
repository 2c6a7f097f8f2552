package hunyuan

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"testing"

	"github.com/framepack-go/framepack/backend/cpu"
	"github.com/framepack-go/framepack/internal/numcmp"
	"github.com/framepack-go/framepack/internal/testmode"
	"github.com/framepack-go/framepack/internal/testutil/golden"
	"github.com/framepack-go/framepack/internal/testutil/testdevice"
	"github.com/framepack-go/framepack/memory"
	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/weights"
)

// deviceForStreaming is the test device, or the fake device where the test
// device computes on host memory (nothing streams there).
func deviceForStreaming(t *testing.T) tensor.Backend {
	be := testdevice.Backend(t)
	if tensor.IsHostBacked(be) {
		return testdevice.NewFake()
	}
	return be
}

// TestStreamFromFileExact streams every block from the mapped checkpoint
// (no host copy): the output must be the resident model's, bit for bit on
// a device with the CPU's kernels, for the stored dtype (uploaded straight
// from the mapping) and for bf16 (converted in chunks), over two passes
// (the second reads the released pages back).
func TestStreamFromFileExact(t *testing.T) {
	c := golden.Cases(t, "transformer")[0]
	be := deviceForStreaming(t)
	in := caseInputs(c)
	for _, dt := range []tensor.DType{tensor.F32, tensor.BF16} {
		t.Run(dt.String(), func(t *testing.T) {
			m0, err := Load(c.ModelDir, be, Options{DType: dt})
			if err != nil {
				t.Fatal(err)
			}
			want := forward(t, m0, in).Float32s()
			m0.Close()

			m, err := Load(c.ModelDir, be, Options{DType: dt, HostBlocks: true, StreamFromFile: true})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			_, host := m.WeightBytes()
			if !m.StreamsFromFile() || m.StreamedBlocks() != m.numBlocks() || host != 0 {
				t.Fatalf("from file %v, %d of %d blocks streamed, %d B on the host; want every block from the file and no host copy",
					m.StreamsFromFile(), m.StreamedBlocks(), m.numBlocks(), host)
			}
			for pass := 1; pass <= 2; pass++ {
				got := forward(t, m, in).Float32s()
				diff := 0
				for i := range got {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						diff++
					}
				}
				exact := be.Name() == "fake-device" || be.Name() == cpu.New().Name()
				if r := numcmp.RelL2(got, want); diff > 0 && (exact || r > 1e-6) {
					t.Errorf("pass %d: %d of %d values differ from the resident model (rel_l2 %.3g)", pass, diff, len(got), r)
				}
			}
		})
	}
}

// writeSynthetic writes a random transformer checkpoint of about 300 MB in
// bf16 (4 double and 8 single blocks of width 768) and returns its folder
// and file size.
func writeSynthetic(t *testing.T) (string, int64) {
	t.Helper()
	cfg := FramePackI2V()
	cfg.NumAttentionHeads, cfg.NumLayers, cfg.NumSingleLayers = 6, 4, 8
	specs, err := Plan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := map[string]*tensor.Tensor{}
	for _, sp := range specs {
		h := tensor.New(tensor.BF16, sp.Shape...)
		b := h.HostBytes()
		for c := 0; c*weights.RandomChunk < h.Numel(); c++ {
			lo, hi := c*weights.RandomChunk, min(h.Numel(), (c+1)*weights.RandomChunk)
			weights.FillRandom(b[2*lo:2*hi], tensor.BF16, sp, 7, int64(c))
		}
		ts[sp.Name] = h
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "diffusion_pytorch_model.safetensors")
	if err := weights.Save(file, ts, nil); err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	return dir, st.Size()
}

// peakRSSDuring is how far the resident set rose above its level before
// fn: VmHWM after resetting it (clear_refs 5), else VmRSS sampled around
// fn. The Go heap is collected and returned to the OS first, so earlier
// garbage does not count.
func peakRSSDuring(t *testing.T, fn func()) int64 {
	t.Helper()
	runtime.GC()
	debug.FreeOSMemory()
	before, _ := memory.ReadRSS()
	if before < 0 {
		t.Skip("no /proc/self/status: the resident set cannot be measured")
	}
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Skipf("cannot reset the peak resident set: %v", err)
	}
	fn()
	_, peak := memory.ReadRSS()
	return peak - before
}

// TestLoadHoldsModelOnce loads a ~300 MB checkpoint with its blocks kept in
// host memory for streaming (the fake device: "pinned" and "device" memory
// are both this process's memory) and checks that the resident set rises
// by at most what the model holds, plus the loader's planned host memory
// (its staging and read buffers, which grow with the readers, one a CPU),
// plus a tenth of the file: the copy, not the copy plus the file's mapped
// pages (another whole file). Streaming from the file instead holds about
// nothing beyond the non-block weights. It runs with 2 readers, and in the
// full suite (testmode) with 16 too: the same loader with more of its
// buffers in flight, which the bound grows with.
func TestLoadHoldsModelOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("writes and loads a 300 MB checkpoint")
	}
	dir, size := writeSynthetic(t)
	be := testdevice.NewFake()
	readerCounts := []int{2}
	if testmode.Full() {
		readerCounts = append(readerCounts, 16)
	}
	for _, readers := range readerCounts {
		for _, c := range []struct {
			name string
			opts Options
		}{
			{"pinned", Options{DType: tensor.BF16, HostBlocks: true}},
			{"resident", Options{DType: tensor.BF16}},
			{"from-file", Options{DType: tensor.BF16, HostBlocks: true, StreamFromFile: true}},
		} {
			t.Run(fmt.Sprintf("%s/%d-readers", c.name, readers), func(t *testing.T) {
				defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(readers)) // the loader's readers, one a CPU
				loader := weights.LoadOptions{}.HostBytes()
				var m *Model
				var err error
				rise := peakRSSDuring(t, func() { m, err = Load(dir, be, c.opts) })
				if err != nil {
					t.Fatal(err)
				}
				dev, host := m.WeightBytes()
				m.Close()
				bound := dev + host + loader + size/10
				t.Logf("%s: file %s; held %s on the device, %s on the host; loader %s; peak RSS rose %s (%.2f× the file), bound %s",
					c.name, memory.FormatBytes(size), memory.FormatBytes(dev), memory.FormatBytes(host), memory.FormatBytes(loader),
					memory.FormatBytes(rise), float64(rise)/float64(size), memory.FormatBytes(bound))
				if rise > bound {
					t.Errorf("peak RSS rose %s, want ≤ %s: what the model holds, the loader's %s and a tenth of the file (a model held twice is another whole file)",
						memory.FormatBytes(rise), memory.FormatBytes(bound), memory.FormatBytes(loader))
				}
			})
		}
	}
}
