package randmodel

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/weights"
)

// chunkElems is how many values one job generates and writes: one chunk of
// weights.FillRandom, whose values depend only on the seed, the tensor's
// name and the chunk's index, so the output does not depend on the number
// of workers; 2 Mi values (4 MiB of bf16/f16) keep each worker's buffer
// small and each write large.
const chunkElems = weights.RandomChunk

// shardFile is one safetensors file being written.
type shardFile struct {
	path    string // final path
	dtype   string // "BF16" or "F16"
	tensors []weights.Spec
	offsets []int64 // data offset of each tensor
	header  []byte  // the 8-byte length, the JSON header, padding
	size    int64   // the whole file

	tmp     *os.File
	pending atomic.Int64 // chunks not yet written
}

// job is one chunk of one tensor.
type job struct {
	f        *shardFile
	t        int   // tensor index in f
	chunk    int64 // chunk index in the tensor
	from, to int64 // element range
}

// plan lays out a component's tensors in files: one file, or HF sharding
// (a tensor goes to the next shard when the current one would exceed
// maxShard; one larger than maxShard gets a shard of its own).
func plan(dir string, c *component) ([]*shardFile, error) {
	elemSize := int64(2)
	var groups [][]weights.Spec
	if c.maxShard <= 0 {
		groups = [][]weights.Spec{c.tensors}
	} else {
		var cur []weights.Spec
		var size int64
		for _, t := range c.tensors {
			b := t.Numel() * elemSize
			if len(cur) > 0 && size+b > c.maxShard {
				groups = append(groups, cur)
				cur, size = nil, 0
			}
			cur = append(cur, t)
			size += b
		}
		if len(cur) > 0 {
			groups = append(groups, cur)
		}
	}
	var files []*shardFile
	for i, g := range groups {
		name := c.weightsName + ".safetensors"
		if c.maxShard > 0 {
			name = fmt.Sprintf("%s-%05d-of-%05d.safetensors", c.weightsName, i+1, len(groups))
		}
		f := &shardFile{path: filepath.Join(dir, c.folder, name), dtype: c.dtype, tensors: g}
		if err := f.layout(); err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	return files, nil
}

// layout computes the header and the tensor offsets: tensors in name order,
// each aligned as written (2-byte values, so no gaps), the header padded
// with spaces to 8 bytes so the data can be mapped in place.
func (f *shardFile) layout() error {
	sort.Slice(f.tensors, func(i, j int) bool { return f.tensors[i].Name < f.tensors[j].Name })
	type entry struct {
		DType   string  `json:"dtype"`
		Shape   []int   `json:"shape"`
		Offsets []int64 `json:"data_offsets"`
	}
	hdr := map[string]any{"__metadata__": map[string]string{"format": "pt"}}
	var off int64
	f.offsets = make([]int64, len(f.tensors))
	for i, t := range f.tensors {
		n := t.Numel() * 2
		f.offsets[i] = off
		hdr[t.Name] = entry{DType: f.dtype, Shape: t.Shape, Offsets: []int64{off, off + n}}
		off += n
	}
	js, err := json.Marshal(hdr)
	if err != nil {
		return fmt.Errorf("%s: header: %w", f.path, err)
	}
	for len(js)%8 != 0 {
		js = append(js, ' ')
	}
	f.header = binary.LittleEndian.AppendUint64(nil, uint64(len(js)))
	f.header = append(f.header, js...)
	f.size = int64(len(f.header)) + off
	return nil
}

// writeShards writes every file's tensors with workers goroutines, each
// generating one chunk at a time into its own buffer and writing it at its
// offset (pwrite), so a shard never sits in memory. Each file is written
// under a temporary name and renamed when its last chunk is written; on an
// error or a cancelled ctx the temporary files are removed.
func writeShards(ctx context.Context, files []*shardFile, seed uint64, workers int, progress func(int64)) (err error) {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	defer func() {
		for _, f := range files {
			if f.tmp != nil {
				f.tmp.Close()
				os.Remove(f.tmp.Name())
				f.tmp = nil
			}
		}
	}()
	var jobs []job
	for _, f := range files {
		tmp, err := os.CreateTemp(filepath.Dir(f.path), "."+filepath.Base(f.path)+".tmp-*")
		if err != nil {
			return fmt.Errorf("creating %s: %w", f.path, err)
		}
		f.tmp = tmp
		if err := tmp.Chmod(0o644); err != nil { // CreateTemp's 0600
			return fmt.Errorf("writing %s: %w", f.path, err)
		}
		if _, err := tmp.WriteAt(f.header, 0); err != nil {
			return fmt.Errorf("writing %s: %w", f.path, err)
		}
		if err := tmp.Truncate(f.size); err != nil {
			return fmt.Errorf("writing %s: %w", f.path, err)
		}
		n := int64(0)
		for i, t := range f.tensors {
			for c, from := int64(0), int64(0); from < t.Numel(); c, from = c+1, from+chunkElems {
				jobs = append(jobs, job{f: f, t: i, chunk: c, from: from, to: min(from+chunkElems, t.Numel())})
				n++
			}
		}
		if n == 0 {
			if err := f.finish(); err != nil {
				return err
			}
		}
		f.pending.Store(n)
	}

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	next := make(chan job)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 2*chunkElems)
			for j := range next {
				if ctx.Err() != nil {
					continue
				}
				t := j.f.tensors[j.t]
				b := buf[:2*(j.to-j.from)]
				fill(b, j.f.dtype, t, seed, j.chunk)
				if _, err := j.f.tmp.WriteAt(b, int64(len(j.f.header))+j.f.offsets[j.t]+2*j.from); err != nil {
					cancel(fmt.Errorf("writing %s: %w", j.f.path, err))
					continue
				}
				if progress != nil {
					progress(int64(len(b)))
				}
				if j.f.pending.Add(-1) == 0 {
					if err := j.f.finish(); err != nil {
						cancel(err)
					}
				}
			}
		}()
	}
	for _, j := range jobs {
		if ctx.Err() != nil {
			break
		}
		next <- j
	}
	close(next)
	wg.Wait()
	if cause := context.Cause(ctx); cause != nil {
		return cause
	}
	return nil
}

// finish closes a file's temporary and renames it into place.
func (f *shardFile) finish() error {
	tmp := f.tmp
	f.tmp = nil
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("writing %s: %w", f.path, err)
	}
	if err := os.Rename(tmp.Name(), f.path); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("writing %s: %w", f.path, err)
	}
	return nil
}

// fill writes the values of chunk c of tensor t into b (2-byte values).
func fill(b []byte, dtype string, t weights.Spec, seed uint64, c int64) {
	dt := tensor.BF16
	if dtype == "F16" {
		dt = tensor.F16
	}
	weights.FillRandom(b, dt, t, seed, c)
}
