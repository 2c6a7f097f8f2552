package weights

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/framepack-go/framepack/internal/testutil/errtest"
	"github.com/framepack-go/framepack/tensor"
)

// rawFile builds a safetensors file from a header text and data bytes,
// without any of Save's checks.
func rawFile(header string, data []byte) []byte {
	b := make([]byte, 8, 8+len(header)+len(data))
	binary.LittleEndian.PutUint64(b, uint64(len(header)))
	return append(append(b, header...), data...)
}

func write(t *testing.T, path string, b []byte) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// goodFile holds "a.weight" (f32 [2 2]) and "a.bias" (f32 [2]).
func goodFile() []byte {
	return rawFile(`{"a.weight":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},`+
		`"a.bias":{"dtype":"F32","shape":[2],"data_offsets":[16,24]}}`, make([]byte, 24))
}

// shardedDir writes a two-shard checkpoint with the given index text.
func shardedDir(t *testing.T, index string) string {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "model-00001-of-00002.safetensors"), goodFile())
	write(t, filepath.Join(dir, "model-00002-of-00002.safetensors"),
		rawFile(`{"b":{"dtype":"BF16","shape":[4],"data_offsets":[0,8]}}`, make([]byte, 8)))
	write(t, filepath.Join(dir, "model.safetensors.index.json"), []byte(index))
	return dir
}

// goodDir writes goodFile as the folder's model.safetensors.
func goodDir(t *testing.T) string {
	return write(t, filepath.Join(t.TempDir(), "model.safetensors"), goodFile())
}

// withConfig makes a folder of goodFile and the given config.json.
func withConfig(config string) func(t *testing.T) string {
	return func(t *testing.T) string {
		d := filepath.Join(t.TempDir(), "m")
		write(t, filepath.Join(d, "model.safetensors"), goodFile())
		write(t, filepath.Join(d, "config.json"), []byte(config))
		return d
	}
}

// opened opens p with open and hands the checkpoint to use.
func opened(open func(string) (*Checkpoint, error), use func(c *Checkpoint) error) func(p string) error {
	return func(p string) error {
		c, err := open(p)
		if err != nil {
			return err
		}
		return use(c)
	}
}

// secondShard makes the sharded folder of goodIndex with the second
// shard's header replaced by hdr, followed by n bytes of data.
func secondShard(hdr string, n int) func(t *testing.T) string {
	return func(t *testing.T) string {
		d := shardedDir(t, goodIndex)
		write(t, filepath.Join(d, "model-00002-of-00002.safetensors"), rawFile(hdr, make([]byte, n)))
		return d
	}
}

const goodIndex = `{"metadata": {"total_size": 32}, "weight_map": {
  "a.weight": "model-00001-of-00002.safetensors",
  "a.bias": "model-00001-of-00002.safetensors",
  "b": "model-00002-of-00002.safetensors"}}`

func openAndLoad(path, name string, dt tensor.DType, shape ...int) error {
	c, err := Open(path)
	if err != nil {
		return err
	}
	defer c.Close()
	t, err := c.Load(&hostBE{}, name, dt, shape...)
	tensor.Release(t)
	return err
}

func TestBadInput(t *testing.T) {
	one := func(header string, data []byte) func(t *testing.T) string {
		return func(t *testing.T) string {
			return write(t, filepath.Join(t.TempDir(), "m", "model.safetensors"), rawFile(header, data))
		}
	}
	f32x4 := `"dtype":"F32","shape":[4]`
	rows := []struct {
		name  string
		setup func(t *testing.T) string // returns the path to open
		op    func(path string) error   // nil: Open, then Load "a.weight" as f32
		want  []string                  // fragments of the error
	}{
		{"missing folder", func(t *testing.T) string { return filepath.Join(t.TempDir(), "nope") }, nil,
			[]string{"nope", "does not exist"}},
		{"folder without weights", func(t *testing.T) string { return t.TempDir() }, nil,
			[]string{"no .safetensors file"}},
		{"missing file", func(t *testing.T) string { return filepath.Join(t.TempDir(), "x.safetensors") },
			func(p string) error { _, err := OpenFile(p); return err }, []string{"x.safetensors does not exist"}},
		{"shard absent", func(t *testing.T) string {
			d := shardedDir(t, goodIndex)
			os.Remove(filepath.Join(d, "model-00002-of-00002.safetensors"))
			return d
		}, nil, []string{"model.safetensors.index.json", "shard model-00002-of-00002.safetensors", "missing"}},
		{"broken index JSON", func(t *testing.T) string { return shardedDir(t, "{\n \"weight_map\": {,}}") }, nil,
			[]string{"model.safetensors.index.json", "invalid JSON at line 2"}},
		{"index without weight_map", func(t *testing.T) string { return shardedDir(t, `{"metadata": {}}`) }, nil,
			[]string{"model.safetensors.index.json", "weight_map is missing or empty"}},
		{"index pointing outside", func(t *testing.T) string {
			return shardedDir(t, `{"weight_map": {"a.weight": "../model-00001-of-00002.safetensors"}}`)
		}, nil, []string{"not a file name in the folder"}},
		{"index names a tensor the shard lacks", func(t *testing.T) string {
			return shardedDir(t, `{"weight_map": {"a.weight": "model-00002-of-00002.safetensors"}}`)
		}, nil, []string{"model-00002-of-00002.safetensors", `index puts tensor "a.weight"`, "not there"}},
		{"broken shard", func(t *testing.T) string {
			d := shardedDir(t, goodIndex)
			write(t, filepath.Join(d, "model-00001-of-00002.safetensors"), []byte("garbage!garbage"))
			return d
		}, nil, []string{"model-00001-of-00002.safetensors", "header length"}},
		{"file shorter than 8 bytes", func(t *testing.T) string {
			return write(t, filepath.Join(t.TempDir(), "model.safetensors"), []byte{1, 2, 3})
		}, nil, []string{"model.safetensors", "too short"}},
		{"header length larger than file", func(t *testing.T) string {
			return write(t, filepath.Join(t.TempDir(), "model.safetensors"), goodFile()[:50])
		}, nil, []string{"model.safetensors", "larger than the file"}},
		{"absurd header length", func(t *testing.T) string {
			b := goodFile()
			binary.LittleEndian.PutUint64(b, 1<<60)
			return write(t, filepath.Join(t.TempDir(), "model.safetensors"), b)
		}, nil, []string{"model.safetensors", "limit"}},
		{"truncated data", func(t *testing.T) string {
			b := goodFile()
			return write(t, filepath.Join(t.TempDir(), "model.safetensors"), b[:len(b)-4])
		}, nil, []string{"model.safetensors", `"a.bias"`, "out of range", "truncated"}},
		{"header JSON invalid", one(`{"a.weight": {"dtype": "F32",`, nil), nil,
			[]string{"model.safetensors", "header JSON is invalid"}},
		{"header not an object", one(`[1, 2]`, nil), nil, []string{"not a JSON object"}},
		{"offsets out of range", one(`{"a.weight":{`+f32x4+`,"data_offsets":[0,32]}}`, make([]byte, 16)), nil,
			[]string{`"a.weight"`, "[0, 32] out of range"}},
		{"offsets reversed", one(`{"a.weight":{`+f32x4+`,"data_offsets":[16,0]}}`, make([]byte, 16)), nil,
			[]string{"out of range"}},
		{"offsets overlap", one(`{"a.weight":{`+f32x4+`,"data_offsets":[0,16]},"b":{`+f32x4+`,"data_offsets":[8,24]}}`, make([]byte, 24)), nil,
			[]string{"overlap"}},
		{"size not dtype×shape", one(`{"a.weight":{"dtype":"F16","shape":[4],"data_offsets":[0,16]}}`, make([]byte, 16)), nil,
			[]string{`"a.weight"`, "needs 8 bytes", "hold 16"}},
		{"three offsets", one(`{"a.weight":{`+f32x4+`,"data_offsets":[0,8,16]}}`, make([]byte, 16)), nil,
			[]string{"data_offsets has 3 values"}},
		{"no dtype", one(`{"a.weight":{"shape":[4],"data_offsets":[0,16]}}`, make([]byte, 16)), nil,
			[]string{`"a.weight"`, "no dtype"}},
		{"fractional dimension", one(`{"a.weight":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}}`, make([]byte, 4)), nil,
			[]string{`"a.weight"`, "bad header entry"}},
		{"negative dimension", one(`{"a.weight":{"dtype":"F32","shape":[-4],"data_offsets":[0,16]}}`, make([]byte, 16)), nil,
			[]string{"negative dimension"}},
		{"absurd shape", one(`{"a.weight":{"dtype":"F32","shape":[4294967296,4294967296,0],"data_offsets":[0,0]}}`, nil), nil,
			[]string{"absurdly large"}},
		{"metadata not strings", one(`{"__metadata__":{"n":1}}`, nil), nil, []string{"__metadata__"}},
		{"unknown dtype", one(`{"a.weight":{"dtype":"Q7","shape":[4],"data_offsets":[0,16]}}`, make([]byte, 16)), nil,
			[]string{"model.safetensors", `"a.weight"`, `unknown dtype "Q7"`}},
		{"fp8 requested", one(`{"a.weight":{"dtype":"F8_E5M2","shape":[4],"data_offsets":[0,4]}}`, make([]byte, 4)), nil,
			[]string{"model.safetensors", `"a.weight"`, "F8_E5M2 is not supported"}},
		{"missing tensor", goodDir,
			func(p string) error { return openAndLoad(p, "a.weights", tensor.F32) },
			[]string{"model.safetensors", `no tensor "a.weights"`, `closest: "a.weight"`}},
		{"wrong shape", goodDir,
			func(p string) error { return openAndLoad(p, "a.weight", tensor.F32, 4) },
			[]string{"model.safetensors", `"a.weight" has shape [2 2], want [4]`}},
		{"integer as float", func(t *testing.T) string {
			return write(t, filepath.Join(t.TempDir(), "model.safetensors"),
				rawFile(`{"a.weight":{"dtype":"I64","shape":[2],"data_offsets":[0,16]}}`, make([]byte, 16)))
		}, nil, []string{`"a.weight" is i64 and cannot be loaded as f32`}},
		{"broken config.json", withConfig("{\n  \"hidden_size\": 3,\n  \"layers\": ]\n}"),
			opened(Open, func(c *Checkpoint) error { return c.Config(&map[string]any{}) }),
			[]string{"config.json", "invalid JSON at line 3"}},
		{"config.json of the wrong type", withConfig(`{"hidden_size": "big"}`),
			opened(Open, func(c *Checkpoint) error {
				var cfg struct {
					HiddenSize int `json:"hidden_size"`
				}
				return c.Config(&cfg)
			}), []string{"config.json", `field "hidden_size"`}},
		{"config.json of the wrong type, in an embedded struct", withConfig(`{"rope": {"theta": "big"}}`),
			opened(Open, func(c *Checkpoint) error {
				type dims struct {
					Theta int `json:"theta"`
				}
				var cfg struct {
					Rope struct{ dims } `json:"rope"`
				}
				return c.Config(&cfg)
			}), []string{"config.json", `field "rope.theta"`}},
		{"missing config.json", goodDir,
			opened(OpenFile, func(c *Checkpoint) error { return c.Config(&map[string]any{}) }),
			[]string{"config.json does not exist"}},
		{"closed checkpoint", goodDir,
			opened(OpenFile, func(c *Checkpoint) error {
				c.Close()
				_, err := c.Host("a.weight")
				return err
			}), []string{"closed"}},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			p := r.setup(t)
			op := r.op
			if op == nil {
				op = func(p string) error { return openAndLoad(p, "a.weight", tensor.F32) }
			}
			err := op(p)
			errtest.Mentions(t, err, r.want...)
			if !strings.HasPrefix(err.Error(), "weights: ") {
				t.Errorf("error %q does not say where it comes from", err)
			}
		})
	}
}

// A file with an FP8 tensor still serves its other tensors.
func TestFP8FileServesOtherTensors(t *testing.T) {
	p := write(t, filepath.Join(t.TempDir(), "model.safetensors"), rawFile(
		`{"q":{"dtype":"F8_E5M2","shape":[4],"data_offsets":[0,4]},`+
			`"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, []byte{1, 2, 3, 4, 0, 0, 0x80, 0x3f}))
	c, err := OpenFile(p)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	w, err := c.Host("w")
	if err != nil || w.Float32s()[0] != 1 {
		t.Fatalf("w: %v %v", w, err)
	}
	if !c.Has("q") {
		t.Error("q not listed")
	}
	if _, _, err := c.Info("q"); err == nil || !strings.Contains(err.Error(), "F8_E5M2") {
		t.Errorf("Info(q): %v", err)
	}
}

// Tensors at odd offsets (legal, if unusual) are copied, not mapped
// misaligned.
func TestMisaligned(t *testing.T) {
	p := write(t, filepath.Join(t.TempDir(), "model.safetensors"), rawFile(
		`{"u":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},`+
			`"w":{"dtype":"F32","shape":[2],"data_offsets":[1,9]}} `, []byte{7, 0, 0, 0x80, 0x3f, 0, 0, 0, 0x40}))
	c, err := OpenFile(p)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	w, err := c.Host("w")
	if err != nil || w.Float32s()[0] != 1 || w.Float32s()[1] != 2 {
		t.Fatalf("w: %v %v", w, err)
	}
	l, err := c.Load(&hostBE{}, "w", tensor.BF16)
	if err != nil || l.Uint16s()[1] != 0x4000 {
		t.Fatalf("load w: %v %v", l, err)
	}
}

// Save replaces a file whole: a failed save leaves the old content and no
// temporary files.
func TestSaveAtomic(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "out.safetensors")
	if err := Save(p, map[string]*tensor.Tensor{"x": tensor.FromFloat32([]float32{1}, 1)}, nil); err != nil {
		t.Fatal(err)
	}
	old, _ := os.ReadFile(p)
	bad := map[string]*tensor.Tensor{"x": tensor.FromFloat32([]float32{2}, 1), "y": tensor.New(tensor.Invalid, 1)}
	if err := Save(p, bad, nil); err == nil {
		t.Fatal("saving an invalid dtype succeeded")
	}
	now, _ := os.ReadFile(p)
	if string(now) != string(old) {
		t.Error("a failed save changed the file")
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("%d files left in the folder", len(ents))
	}
	if err := Save(filepath.Join(dir, "no", "such", "dir.safetensors"), bad, nil); err == nil {
		t.Error("save into a missing folder succeeded")
	}
}
