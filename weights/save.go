package weights

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"sort"

	"github.com/framepack-go/framepack/internal/atomicfile"
	"github.com/framepack-go/framepack/tensor"
)

// Save writes tensors (host or device) and string metadata to a safetensors
// file. The file is written under a temporary name and renamed into place,
// so path holds either its old content or the complete new file.
func Save(path string, tensors map[string]*tensor.Tensor, metadata map[string]string) (err error) {
	names := make([]string, 0, len(tensors))
	for name := range tensors {
		if name == "" || name == "__metadata__" {
			return fmt.Errorf("weights: save %s: invalid tensor name %q", path, name)
		}
		names = append(names, name)
	}
	sort.Strings(names)

	type hdrEntry struct {
		DType   string  `json:"dtype"`
		Shape   []int   `json:"shape"`
		Offsets []int64 `json:"data_offsets"`
	}
	hdr := make(map[string]any, len(names)+1)
	if len(metadata) > 0 {
		hdr["__metadata__"] = metadata
	}
	hosts := make([]*tensor.Tensor, len(names))
	var off int64
	for i, name := range names {
		t := tensors[name]
		if t == nil {
			return fmt.Errorf("weights: save %s: tensor %q is nil", path, name)
		}
		dtName, ok := fileDTypeName(t.DType())
		if !ok {
			return fmt.Errorf("weights: save %s: tensor %q has dtype %s, which safetensors files here do not hold", path, name, t.DType())
		}
		if err := tensor.Catch(func() { hosts[i] = tensor.ToHost(t) }); err != nil {
			return fmt.Errorf("weights: save %s: tensor %q: %w", path, name, err)
		}
		n := t.Bytes()
		hdr[name] = hdrEntry{DType: dtName, Shape: append([]int{}, t.Shape()...), Offsets: []int64{off, off + n}}
		off += n
	}
	js, err := json.Marshal(hdr)
	if err != nil {
		return fmt.Errorf("weights: save %s: %v", path, err)
	}
	// Pad the header with spaces so the data starts 8-byte aligned, which
	// lets readers use mapped tensors in place.
	for len(js)%8 != 0 {
		js = append(js, ' ')
	}

	err = atomicfile.Write(path, 0o644, func(f *os.File) error { // a saved output is an ordinary file
		w := bufio.NewWriterSize(f, 1<<20)
		var lenBuf [8]byte
		binary.LittleEndian.PutUint64(lenBuf[:], uint64(len(js)))
		w.Write(lenBuf[:])
		w.Write(js)
		for _, t := range hosts {
			w.Write(t.HostBytes())
		}
		return w.Flush()
	})
	if err != nil {
		return fmt.Errorf("weights: save %s: %v", path, err)
	}
	return nil
}
