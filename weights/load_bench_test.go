package weights

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/framepack-go/framepack/internal/testutil/testdevice"
	"github.com/framepack-go/framepack/tensor"
)

// BenchmarkLoad times loading a checkpoint of 64 MiB tensors (1 GiB by
// default; FRAMEPACK_BENCH_LOAD_MIB sets the size) onto the test device
// (FRAMEPACK_TEST_DEVICE), page-cached after the first run: one weight at a
// time (the sequential path) and with the parallel loader, without and
// with a dtype conversion. MB/s is the file's bytes over the time.
func BenchmarkLoad(b *testing.B) {
	mib := 1024
	if v, err := strconv.Atoi(os.Getenv("FRAMEPACK_BENCH_LOAD_MIB")); err == nil && v > 0 {
		mib = v
	}
	be := testdevice.Backend(b)
	for _, stored := range []tensor.DType{tensor.BF16, tensor.F32} {
		const rows, cols = 4096, 4096
		n := max(1, mib<<20/(rows*cols*stored.Size()))
		dir := b.TempDir()
		ts := map[string]*tensor.Tensor{}
		for i := range n {
			t := tensor.New(stored, rows, cols)
			d := t.HostBytes()
			for j := range d {
				d[j] = byte(j*7+i) & 0x3f // finite values in every dtype
			}
			ts[fmt.Sprintf("w%03d", i)] = t
		}
		if err := Save(filepath.Join(dir, "model.safetensors"), ts, nil); err != nil {
			b.Fatal(err)
		}
		ts = nil
		construct := func(bl *Builder) {
			for i := range n {
				bl.Get(fmt.Sprintf("w%03d", i), rows, cols)
			}
		}
		size := int64(n) * rows * cols * int64(stored.Size())
		for _, par := range []bool{false, true} {
			name := fmt.Sprintf("%s-file/bf16/sequential", stored)
			if par {
				name = fmt.Sprintf("%s-file/bf16/parallel", stored)
			}
			b.Run(name, func(b *testing.B) {
				ck, err := Open(dir)
				if err != nil {
					b.Fatal(err)
				}
				defer ck.Close()
				b.SetBytes(size)
				for range b.N {
					var bl *Builder
					if par {
						bl = Build(&CheckpointSource{Ck: ck, Be: be}, be, tensor.BF16, LoadOptions{}, construct)
					} else {
						bl = FromCheckpoint(ck, be, tensor.BF16)
						construct(bl)
					}
					if err := bl.Err(); err != nil {
						b.Fatal(err)
					}
					if err := be.Sync(); err != nil {
						b.Fatal(err)
					}
					bl.Release()
				}
			})
		}
	}
}
