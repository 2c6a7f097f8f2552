package weights

import (
	"strings"
	"testing"

	st "github.com/nlpodyssey/safetensors"
)

// FuzzParseHeader feeds arbitrary files to the header parser. It must never
// panic; what it accepts must be safe to slice; and a file that the
// reference-following nlpodyssey parser accepts must be accepted with the
// same tensors.
func FuzzParseHeader(f *testing.F) {
	f.Add(goodFile())
	f.Add(rawFile(`{"__metadata__":{"format":"pt"},"b":{"dtype":"BF16","shape":[2,0],"data_offsets":[0,0]}}`, nil))
	f.Add(rawFile(`{"q":{"dtype":"F8_E5M2","shape":[4],"data_offsets":[0,4]}}`, make([]byte, 4)))
	f.Add(rawFile(`{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}}`, make([]byte, 24)))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := parseHeader(b)
		if err == nil {
			for name, e := range h.entries {
				if e.begin < h.dataAt || e.end < e.begin || e.end > int64(len(b)) {
					t.Fatalf("%q: range [%d, %d) outside data [%d, %d)", name, e.begin, e.end, h.dataAt, len(b))
				}
				_ = b[e.begin:e.end]
				if e.problem == "" {
					n := int64(e.dt.Size())
					for _, d := range e.shape {
						n *= int64(d)
					}
					if n != e.end-e.begin {
						t.Fatalf("%q: %d bytes for %s %v", name, e.end-e.begin, e.dtype, e.shape)
					}
				}
			}
		}
		ref, rerr := st.Deserialize(b)
		if rerr != nil {
			return
		}
		if err != nil {
			// Dimensions beyond 2³¹ (with a zero elsewhere) are refused on
			// purpose; integral floats like 2.0 are not integers to us.
			if strings.Contains(err.Error(), "absurdly large") || strings.Contains(err.Error(), "bad header entry") {
				return
			}
			t.Fatalf("nlpodyssey accepts, parseHeader refuses: %v", err)
		}
		if len(ref.Names()) != len(h.entries) {
			t.Fatalf("%d tensors, nlpodyssey %d", len(h.entries), len(ref.Names()))
		}
		for _, v := range ref.Tensors() {
			e := h.entries[v.Name]
			if e == nil {
				t.Fatalf("%q missing", v.Name)
			}
			if e.dtype != v.TensorView.DType().String() || int64(len(v.TensorView.Data())) != e.end-e.begin {
				t.Fatalf("%q: %s %d bytes, nlpodyssey %s %d", v.Name, e.dtype, e.end-e.begin, v.TensorView.DType(), len(v.TensorView.Data()))
			}
			if shape := v.TensorView.Shape(); len(shape) != len(e.shape) {
				t.Fatalf("%q: shape %v, nlpodyssey %v", v.Name, e.shape, shape)
			} else {
				for i, d := range shape {
					if uint64(e.shape[i]) != d {
						t.Fatalf("%q: shape %v, nlpodyssey %v", v.Name, e.shape, shape)
					}
				}
			}
			if len(v.TensorView.Data()) > 0 && &v.TensorView.Data()[0] != &b[e.begin] {
				t.Fatalf("%q: data at a different offset", v.Name)
			}
		}
	})
}
