package randmodel

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/framepack-go/framepack/tensor"
)

// chunkElems is how many values one job generates and writes. The values
// of a chunk depend only on the seed, the tensor's name and the chunk's
// index, so the output does not depend on the number of workers; 2 Mi
// values (4 MiB of bf16/f16) keep each worker's buffer small and each
// write large.
const chunkElems = 1 << 21

// shardFile is one safetensors file being written.
type shardFile struct {
	path    string // final path
	dtype   string // "BF16" or "F16"
	tensors []tensorSpec
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
	var groups [][]tensorSpec
	if c.maxShard <= 0 {
		groups = [][]tensorSpec{c.tensors}
	} else {
		var cur []tensorSpec
		var size int64
		for _, t := range c.tensors {
			b := t.numel() * elemSize
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
	sort.Slice(f.tensors, func(i, j int) bool { return f.tensors[i].name < f.tensors[j].name })
	type entry struct {
		DType   string  `json:"dtype"`
		Shape   []int   `json:"shape"`
		Offsets []int64 `json:"data_offsets"`
	}
	hdr := map[string]any{"__metadata__": map[string]string{"format": "pt"}}
	var off int64
	f.offsets = make([]int64, len(f.tensors))
	for i, t := range f.tensors {
		n := t.numel() * 2
		f.offsets[i] = off
		hdr[t.name] = entry{DType: f.dtype, Shape: t.shape, Offsets: []int64{off, off + n}}
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
			for c, from := int64(0), int64(0); from < t.numel(); c, from = c+1, from+chunkElems {
				jobs = append(jobs, job{f: f, t: i, chunk: c, from: from, to: min(from+chunkElems, t.numel())})
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
func fill(b []byte, dtype string, t tensorSpec, seed uint64, c int64) {
	n := len(b) / 2
	bf16 := dtype == "BF16"
	half := halfBF16
	if !bf16 {
		half = halfF16
	}
	switch t.init {
	case initZeros:
		clear(b)
		return
	case initOnes:
		binary.LittleEndian.PutUint16(b, half(1))
		for i := 1; i < n; i++ {
			copy(b[2*i:2*i+2], b[:2])
		}
		return
	}
	h := fnv.New64a()
	h.Write([]byte(t.name))
	x := seed ^ h.Sum64() ^ uint64(c)*0xd1342543de82ef95
	// The loops below are written out per case (splitmix64 inline, the
	// dtype chosen outside the loop): the writer must generate at disk speed.
	const golden = 0x9e3779b97f4a7c15
	switch {
	case t.init == initNormal:
		// The sum of four 16-bit uniforms (Irwin–Hall): mean 2, variance
		// 1/3, so (sum − 2)·√3 has the normal's mean and variance, with
		// its tails cut at ±3.46σ; one random word per value.
		k := float32(math.Sqrt(3)) * t.scale / 65536
		for i := 0; i < n; i++ {
			x += golden
			z := x
			z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
			z = (z ^ z>>27) * 0x94d049bb133111eb
			z ^= z >> 31
			s := int64(z&0xffff) + int64(z>>16&0xffff) + int64(z>>32&0xffff) + int64(z>>48) - 2*65535
			v := float32(s) * k
			if bf16 {
				binary.LittleEndian.PutUint16(b[2*i:], halfBF16(v))
			} else {
				binary.LittleEndian.PutUint16(b[2*i:], halfF16(v))
			}
		}
	case t.init == initUniform:
		k := t.scale / (1 << 23)
		for i := 0; i < n; i++ {
			x += golden
			z := x
			z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
			z = (z ^ z>>27) * 0x94d049bb133111eb
			z ^= z >> 31
			v := float32(int64(z>>40)-(1<<23)) * k
			if bf16 {
				binary.LittleEndian.PutUint16(b[2*i:], halfBF16(v))
			} else {
				binary.LittleEndian.PutUint16(b[2*i:], halfF16(v))
			}
		}
	}
}

// halfBF16 rounds a finite f32 to bfloat16 (nearest even).
func halfBF16(f float32) uint16 {
	b := math.Float32bits(f)
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}

// halfF16 rounds f to IEEE half (nearest even): the normal range by bit
// arithmetic, the rest (subnormals, overflow) through the exact converter.
func halfF16(f float32) uint16 {
	b := math.Float32bits(f)
	a := b & 0x7fffffff
	if a < 0x38800000 || a >= 0x477ff000 { // below 2⁻¹⁴, or rounds to ∞
		return tensor.F16FromF32(f)
	}
	a -= 112 << 23 // rebias the exponent from 127 to 15
	return uint16(b>>16)&0x8000 | uint16((a+0xfff+(a>>13)&1)>>13)
}
