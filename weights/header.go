package weights

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/bits"
	"sort"

	"github.com/framepack-go/framepack/tensor"
)

// maxHeaderLen bounds the JSON header (the reference implementation's limit):
// a larger length is a corrupt file, not a big checkpoint.
const maxHeaderLen = 100 << 20

// fileDType describes one safetensors dtype name: its element size and the
// tensor.DType it loads as (Invalid: known to the format, but not loadable).
type fileDType struct {
	size int
	dt   tensor.DType
}

var fileDTypes = map[string]fileDType{
	"F64":     {8, tensor.F64},
	"F32":     {4, tensor.F32},
	"F16":     {2, tensor.F16},
	"BF16":    {2, tensor.BF16},
	"I64":     {8, tensor.I64},
	"I32":     {4, tensor.I32},
	"U8":      {1, tensor.U8},
	"BOOL":    {1, tensor.Bool},
	"U64":     {8, tensor.Invalid},
	"U32":     {4, tensor.Invalid},
	"I16":     {2, tensor.Invalid},
	"U16":     {2, tensor.Invalid},
	"I8":      {1, tensor.Invalid},
	"F8_E4M3": {1, tensor.F8E4M3},
	"F8_E5M2": {1, tensor.Invalid},
	"F8_E8M0": {1, tensor.Invalid},
}

// fileDTypeName is the safetensors name of a loadable dtype (for Save):
// fileDTypes read backwards, where each loadable dtype has one name.
func fileDTypeName(dt tensor.DType) (string, bool) {
	for name, f := range fileDTypes {
		if f.dt == dt && dt != tensor.Invalid {
			return name, true
		}
	}
	return "", false
}

// entry is one tensor of a parsed header.
type entry struct {
	name    string
	dtype   string       // as written in the file
	dt      tensor.DType // Invalid when the dtype is not loadable
	shape   []int
	begin   int64 // absolute byte offsets in the file
	end     int64
	problem string // why the tensor cannot be loaded ("" if it can)
}

// header is the parsed JSON header of a safetensors file.
type header struct {
	entries  map[string]*entry
	metadata map[string]string
	dataAt   int64 // offset of the data section
}

// parseHeader parses and validates the header of a safetensors file whose
// whole content is b. Every tensor's byte range is checked against the file
// and the others, so any entry it returns can be sliced out of b safely.
// Tensors of a dtype framepack cannot load are kept, with a problem that is
// reported when they are requested.
func parseHeader(b []byte) (*header, error) {
	if len(b) < 8 {
		return nil, fmt.Errorf("file is %d bytes, too short for a safetensors header (truncated?)", len(b))
	}
	n := binary.LittleEndian.Uint64(b[:8])
	if n > maxHeaderLen {
		return nil, fmt.Errorf("header length %d is larger than the %d-byte limit (not a safetensors file?)", n, maxHeaderLen)
	}
	if n > uint64(len(b)-8) {
		return nil, fmt.Errorf("header length %d is larger than the file (%d bytes; truncated?)", n, len(b))
	}
	raw := b[8 : 8+n]
	dataAt := int64(8 + n)
	dataLen := int64(len(b)) - dataAt

	// Readers pad the header with spaces; a header must be a JSON object.
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, fmt.Errorf("header is not a JSON object")
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		return nil, fmt.Errorf("header JSON is invalid: %v", err)
	}

	h := &header{entries: make(map[string]*entry, len(top)), dataAt: dataAt}
	for name, msg := range top {
		if name == "__metadata__" {
			if err := json.Unmarshal(msg, &h.metadata); err != nil {
				return nil, fmt.Errorf("header __metadata__ is not a map of strings: %v", err)
			}
			continue
		}
		e, err := parseEntry(name, msg, dataLen)
		if err != nil {
			return nil, err
		}
		e.begin += dataAt
		e.end += dataAt
		h.entries[name] = e
	}

	// No two tensors may share bytes.
	list := make([]*entry, 0, len(h.entries))
	for _, e := range h.entries {
		if e.end > e.begin {
			list = append(list, e)
		}
	}
	sort.Slice(list, func(i, j int) bool { return list[i].begin < list[j].begin })
	for i := 1; i < len(list); i++ {
		if list[i].begin < list[i-1].end {
			return nil, fmt.Errorf("tensors %q and %q overlap (data_offsets [%d, %d] and [%d, %d])",
				list[i-1].name, list[i].name, list[i-1].begin-dataAt, list[i-1].end-dataAt, list[i].begin-dataAt, list[i].end-dataAt)
		}
	}
	return h, nil
}

func parseEntry(name string, msg json.RawMessage, dataLen int64) (*entry, error) {
	var js struct {
		DType   *string  `json:"dtype"`
		Shape   *[]int64 `json:"shape"`
		Offsets *[]int64 `json:"data_offsets"`
	}
	if err := json.Unmarshal(msg, &js); err != nil {
		return nil, fmt.Errorf("tensor %q: bad header entry: %v", name, err)
	}
	switch {
	case js.DType == nil:
		return nil, fmt.Errorf("tensor %q: header entry has no dtype", name)
	case js.Shape == nil:
		return nil, fmt.Errorf("tensor %q: header entry has no shape", name)
	case js.Offsets == nil:
		return nil, fmt.Errorf("tensor %q: header entry has no data_offsets", name)
	case len(*js.Offsets) != 2:
		return nil, fmt.Errorf("tensor %q: data_offsets has %d values, want 2", name, len(*js.Offsets))
	}
	e := &entry{name: name, dtype: *js.DType}
	begin, end := (*js.Offsets)[0], (*js.Offsets)[1]
	if begin < 0 || end < begin || end > dataLen {
		return nil, fmt.Errorf("tensor %q: data_offsets [%d, %d] out of range (data section is %d bytes; truncated?)", name, begin, end, dataLen)
	}
	e.begin, e.end = begin, end

	// Element count with overflow checks: a shape is trusted no more than
	// the offsets are.
	numel := uint64(1)
	e.shape = make([]int, len(*js.Shape))
	for i, d := range *js.Shape {
		if d < 0 {
			return nil, fmt.Errorf("tensor %q: negative dimension in shape %v", name, *js.Shape)
		}
		hi, lo := bits.Mul64(numel, uint64(d))
		if hi != 0 || lo > math.MaxInt64 || d > math.MaxInt32 {
			return nil, fmt.Errorf("tensor %q: shape %v is absurdly large", name, *js.Shape)
		}
		numel = lo
		e.shape[i] = int(d)
	}

	fd, known := fileDTypes[e.dtype]
	if !known {
		// The size is unknown, so the size check cannot be done; the
		// range is still checked, and loading it fails with this problem.
		e.problem = fmt.Sprintf("unknown dtype %q", e.dtype)
		return e, nil
	}
	e.dt = fd.dt
	hi, nbytes := bits.Mul64(numel, uint64(fd.size))
	if hi != 0 || nbytes != uint64(end-begin) {
		return nil, fmt.Errorf("tensor %q: %s %v needs %d bytes but data_offsets [%d, %d] hold %d",
			name, e.dtype, *js.Shape, nbytes, begin, end, end-begin)
	}
	if fd.dt == tensor.Invalid {
		e.problem = fmt.Sprintf("dtype %s is not supported by framepack (it loads F32, F16, BF16, F64, F8_E4M3, I64, I32, U8 and BOOL)", e.dtype)
	}
	return e, nil
}
