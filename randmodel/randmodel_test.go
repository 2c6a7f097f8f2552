package randmodel_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/framepack-go/framepack"
	"github.com/framepack-go/framepack/randmodel"
	"github.com/framepack-go/framepack/section"
	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/tinymodel"
	"github.com/framepack-go/framepack/tokenizer"
)

// tinyOnce is one tiny folder (seed 7) shared by the tests that only read it.
var tinyOnce struct {
	sync.Once
	dir string
	sum randmodel.Summary
	err error
}

func tinyFolder(t *testing.T) (string, randmodel.Summary) {
	t.Helper()
	tinyOnce.Do(func() {
		tinyOnce.dir, tinyOnce.err = os.MkdirTemp("", "randmodel-tiny-")
		if tinyOnce.err == nil {
			tinyOnce.sum, tinyOnce.err = randmodel.Write(context.Background(), tinyOnce.dir, randmodel.Options{Size: randmodel.Tiny, Seed: 7})
		}
	})
	if tinyOnce.err != nil {
		t.Fatal(tinyOnce.err)
	}
	return tinyOnce.dir, tinyOnce.sum
}

func TestMain(m *testing.M) {
	code := m.Run()
	if tinyOnce.dir != "" {
		os.RemoveAll(tinyOnce.dir)
	}
	os.Exit(code)
}

type headerEntry struct {
	DType   string  `json:"dtype"`
	Shape   []int   `json:"shape"`
	Offsets []int64 `json:"data_offsets"`
}

// readHeader parses a safetensors header, checking that the tensors tile
// the data exactly and the file has no bytes beyond them.
func readHeader(t *testing.T, b []byte, name string) map[string]headerEntry {
	t.Helper()
	if len(b) < 8 {
		t.Fatalf("%s: %d bytes", name, len(b))
	}
	n := binary.LittleEndian.Uint64(b)
	if n%8 != 0 || 8+n > uint64(len(b)) {
		t.Fatalf("%s: header length %d (file %d bytes)", name, n, len(b))
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b[8:8+n], &raw); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if string(raw["__metadata__"]) != `{"format":"pt"}` {
		t.Errorf("%s: metadata %s, want {\"format\":\"pt\"}", name, raw["__metadata__"])
	}
	delete(raw, "__metadata__")
	out := map[string]headerEntry{}
	var spans [][2]int64
	for k, v := range raw {
		var e headerEntry
		if err := json.Unmarshal(v, &e); err != nil {
			t.Fatalf("%s: %s: %v", name, k, err)
		}
		numel := int64(1)
		for _, d := range e.Shape {
			numel *= int64(d)
		}
		size := map[string]int64{"F32": 4, "BF16": 2, "F16": 2}[e.DType]
		if size == 0 || e.Offsets[1]-e.Offsets[0] != size*numel {
			t.Errorf("%s: %s: %d bytes for %v %s values", name, k, e.Offsets[1]-e.Offsets[0], e.Shape, e.DType)
		}
		spans = append(spans, [2]int64{e.Offsets[0], e.Offsets[1]})
		out[k] = e
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i][0] < spans[j][0] })
	end := int64(0)
	for _, s := range spans {
		if s[0] != end {
			t.Errorf("%s: data gap or overlap at %d", name, end)
		}
		end = s[1]
	}
	if 8+int64(n)+end != int64(len(b)) {
		t.Errorf("%s: data ends at %d, file has %d bytes", name, 8+int64(n)+end, len(b))
	}
	return out
}

// tensorsOf reads every tensor header of a component folder, following the
// index when there is one, and checks the index against the shards.
func tensorsOf(t *testing.T, dir, part, weights string, sharded bool) map[string]headerEntry {
	t.Helper()
	out := map[string]headerEntry{}
	if !sharded {
		b, err := os.ReadFile(filepath.Join(dir, part, weights+".safetensors"))
		if err != nil {
			t.Fatal(err)
		}
		return readHeader(t, b, part)
	}
	raw, err := os.ReadFile(filepath.Join(dir, part, weights+".safetensors.index.json"))
	if err != nil {
		t.Fatal(err)
	}
	var idx struct {
		Metadata  map[string]json.Number `json:"metadata"`
		WeightMap map[string]string      `json:"weight_map"`
	}
	if err := json.Unmarshal(raw, &idx); err != nil {
		t.Fatal(err)
	}
	total, err := idx.Metadata["total_size"].Int64()
	if err != nil {
		t.Fatalf("%s index: total_size: %v", part, err)
	}
	shards := map[string]bool{}
	for _, f := range idx.WeightMap {
		shards[f] = true
	}
	if len(shards) < 2 {
		t.Errorf("%s: %d shards, want several", part, len(shards))
	}
	var sum int64
	for f := range shards {
		var i, n int
		if _, err := fmt.Sscanf(f, weights+"-%05d-of-%05d.safetensors", &i, &n); err != nil || n != len(shards) || i < 1 || i > n {
			t.Errorf("%s: shard name %q (%d shards)", part, f, len(shards))
		}
		b, err := os.ReadFile(filepath.Join(dir, part, f))
		if err != nil {
			t.Fatal(err)
		}
		for k, e := range readHeader(t, b, f) {
			if idx.WeightMap[k] != f {
				t.Errorf("%s: %s is in %s, the index says %q", part, k, f, idx.WeightMap[k])
			}
			sum += e.Offsets[1] - e.Offsets[0]
			out[k] = e
		}
	}
	if len(out) != len(idx.WeightMap) || sum != total {
		t.Errorf("%s: shards hold %d tensors of %d bytes, the index names %d with total_size %d", part, len(out), sum, len(idx.WeightMap), total)
	}
	return out
}

var parts = []struct {
	folder, weights, dtype string
	sharded                bool
}{
	{"transformer", "diffusion_pytorch_model", "BF16", true},
	{"text_encoder", "model", "F16", true},
	{"text_encoder_2", "model", "F16", false},
	{"vae", "diffusion_pytorch_model", "F16", false},
	{"image_encoder", "model", "BF16", false},
}

// TestTinyMatchesReferenceLayout checks every component's tensor names and
// shapes against the embedded tiny model, whose files the reference code
// (diffusers, FramePack's packed transformer, transformers) wrote with
// save_pretrained: the same names and shapes, except the embeddings, which
// have the released vocabularies' rows here. The dtypes are the released
// ones, and sharded parts have an index.
func TestTinyMatchesReferenceLayout(t *testing.T) {
	dir, sum := tinyFolder(t)
	vocabRows := map[string]int{"embed_tokens.weight": 128320, "text_model.embeddings.token_embedding.weight": 49408}
	var params int64
	for _, p := range parts {
		got := tensorsOf(t, dir, p.folder, p.weights, p.sharded)
		ref := readHeader(t, mustRead(t, tinymodel.FS(), p.folder+"/"+p.weights+".safetensors"), "tiny "+p.folder)
		for name, e := range got {
			if e.DType != p.dtype {
				t.Errorf("%s: %s is %s, want %s", p.folder, name, e.DType, p.dtype)
			}
			params += int64(e.Offsets[1]-e.Offsets[0]) / 2
			r, ok := ref[name]
			if !ok {
				t.Errorf("%s: %s is not in the reference's checkpoint", p.folder, name)
				continue
			}
			want := r.Shape
			if rows, ok := vocabRows[name]; ok {
				want = append([]int{rows}, want[1:]...)
			}
			if !reflect.DeepEqual(e.Shape, want) {
				t.Errorf("%s: %s has shape %v, want %v", p.folder, name, e.Shape, want)
			}
		}
		for name := range ref {
			if _, ok := got[name]; !ok {
				t.Errorf("%s: %s is missing", p.folder, name)
			}
		}
		if _, err := os.Stat(filepath.Join(dir, p.folder, "config.json")); err != nil {
			t.Error(err)
		}
	}
	if params != sum.Params {
		t.Errorf("the files hold %d values, the summary says %d", params, sum.Params)
	}
	for _, f := range []string{"tokenizer/tokenizer.json", "tokenizer/tokenizer_config.json", "tokenizer/special_tokens_map.json",
		"tokenizer_2/vocab.json", "tokenizer_2/merges.txt", "tokenizer_2/tokenizer_config.json", "tokenizer_2/special_tokens_map.json",
		"feature_extractor/preprocessor_config.json"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
	// No temporary file is left behind.
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.Contains(d.Name(), ".tmp-") {
			t.Errorf("temporary file left: %s", p)
		}
		return nil
	})
}

func mustRead(t *testing.T, fsys fs.FS, name string) []byte {
	t.Helper()
	b, err := fs.ReadFile(fsys, name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestTinyValues checks the values' initialisation: norms at 1, biases at
// 0, linears with mean ≈ 0 and std ≈ 0.02, convolutions within ±1/√fan_in.
func TestTinyValues(t *testing.T) {
	dir, _ := tinyFolder(t)
	b, err := os.ReadFile(filepath.Join(dir, "image_encoder", "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	hdr := readHeader(t, b, "image_encoder")
	data := b[8+binary.LittleEndian.Uint64(b):]
	values := func(name string) []float32 {
		e, ok := hdr[name]
		if !ok {
			t.Fatalf("no %s", name)
		}
		raw := data[e.Offsets[0]:e.Offsets[1]]
		v := make([]float32, len(raw)/2)
		for i := range v {
			v[i] = tensor.F32FromBF16(binary.LittleEndian.Uint16(raw[2*i:]))
		}
		return v
	}
	for _, v := range values("vision_model.post_layernorm.weight") {
		if v != 1 {
			t.Fatalf("post_layernorm.weight holds %g, want 1", v)
		}
	}
	for _, v := range values("vision_model.encoder.layers.0.mlp.fc1.bias") {
		if v != 0 {
			t.Fatalf("fc1.bias holds %g, want 0", v)
		}
	}
	w := values("vision_model.encoder.layers.0.mlp.fc1.weight") // 96×48
	var s, s2 float64
	for _, v := range w {
		s += float64(v)
		s2 += float64(v) * float64(v)
	}
	mean, std := s/float64(len(w)), math.Sqrt(s2/float64(len(w)))
	if math.Abs(mean) > 0.002 || math.Abs(std-0.02) > 0.002 {
		t.Errorf("fc1.weight: mean %g, std %g, want 0 and 0.02", mean, std)
	}
	bound := float32(1 / math.Sqrt(3*8*8))
	maxAbs := float32(0)
	for _, v := range values("vision_model.embeddings.patch_embedding.weight") {
		maxAbs = max(maxAbs, float32(math.Abs(float64(v))))
	}
	if maxAbs > bound*1.01 || maxAbs < bound*0.8 {
		t.Errorf("patch_embedding.weight: max |w| %g, want just under %g", maxAbs, bound)
	}
}

// TestSeedReproducible writes the tiny folder again with the same seed
// (with one worker rather than all) and with another seed.
func TestSeedReproducible(t *testing.T) {
	dir, _ := tinyFolder(t)
	same := t.TempDir()
	if _, err := randmodel.Write(context.Background(), same, randmodel.Options{Size: randmodel.Tiny, Seed: 7, Workers: 1}); err != nil {
		t.Fatal(err)
	}
	other := t.TempDir()
	if _, err := randmodel.Write(context.Background(), other, randmodel.Options{Size: randmodel.Tiny, Seed: 8}); err != nil {
		t.Fatal(err)
	}
	n := 0
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		a, _ := os.ReadFile(p)
		b, err := os.ReadFile(filepath.Join(same, rel))
		if err != nil || !bytes.Equal(a, b) {
			t.Errorf("%s differs with the same seed (%v)", rel, err)
		}
		c, _ := os.ReadFile(filepath.Join(other, rel))
		if strings.HasSuffix(rel, ".safetensors") {
			n++
			if bytes.Equal(a, c) {
				t.Errorf("%s is the same with another seed", rel)
			}
		}
		return nil
	})
	if n < 7 {
		t.Errorf("%d weight files, want at least 7", n)
	}
}

// TestTokenizers: the special tokens have LLaMA-3's and CLIP's ids, the
// template takes about as many tokens as the real tokenizer's 95, and any
// text tokenizes below the embeddings' rows.
func TestTokenizers(t *testing.T) {
	dir, _ := tinyFolder(t)
	llama, err := tokenizer.LoadLlama(filepath.Join(dir, "tokenizer"))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]int64{"<|begin_of_text|>": 128000, "<|end_of_text|>": 128001,
		"<|start_header_id|>": 128006, "<|end_header_id|>": 128007, "<|eot_id|>": 128009, "<|reserved_special_token_250|>": 128255} {
		if id, ok := llama.ID(name); !ok || id != want {
			t.Errorf("%s has id %d (%v), want %d", name, id, ok, want)
		}
	}
	prefix, _, _ := strings.Cut(framepack.PromptTemplate, "{}")
	ids, err := llama.Encode(prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("template prefix: %d tokens (the real tokenizer: 95)", len(ids))
	if ids[0] != 128000 || ids[1] != 128006 || len(ids) < 80 || len(ids) > 110 {
		t.Errorf("template prefix tokens %v: want BOS, <|start_header_id|>, … and about 95 of them", ids)
	}
	for _, text := range []string{"Ünïcödé — 漢字 🎬, 12345 tabs\tand\nnewlines", "The girl dances gracefully."} {
		ids, err := llama.Encode(text)
		if err != nil {
			t.Fatalf("%q: %v", text, err)
		}
		for _, id := range ids {
			if id < 0 || id >= 128320 {
				t.Errorf("%q: id %d is outside the embedding", text, id)
			}
		}
		clip, err := tokenizer.LoadCLIP(filepath.Join(dir, "tokenizer_2"))
		if err != nil {
			t.Fatal(err)
		}
		cids, err := clip.Encode(text)
		if err != nil {
			t.Fatalf("CLIP %q: %v", text, err)
		}
		if cids[0] != 49406 || clip.EOS != 49407 {
			t.Errorf("CLIP %q: BOS %d, EOS %d, want 49406 and 49407", text, cids[0], clip.EOS)
		}
		for _, id := range cids {
			if id < 0 || id > 49407 {
				t.Errorf("CLIP %q: id %d is outside the embedding", text, id)
			}
		}
	}
}

// TestTinyGenerates loads the written folder through framepack.Load and
// generates a short video on the CPU: every loader reads its part.
func TestTinyGenerates(t *testing.T) {
	if testing.Short() {
		t.Skip("a whole generation")
	}
	dir, _ := tinyFolder(t)
	p, err := framepack.Load(dir, framepack.Options{Device: framepack.DeviceCPU, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	img, err := section.LoadImage(filepath.Join("..", "testdata", "images", "scene.png"))
	if err != nil {
		t.Fatal(err)
	}
	req := framepack.DefaultRequest()
	req.RGB = img
	req.Prompt = "The girl dances gracefully."
	req.Resolution = 64
	req.LatentWindowSize = 3
	req.Steps = 2
	req.Seconds = 0.2
	res, err := p.Generate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if res.T == 0 {
		t.Fatal("no frames")
	}
	t.Logf("%d frames of %d×%d, crop start %d", res.T, res.Width, res.Height, p.CropStart())
}

// TestUnknownSize fails with the sizes it takes.
func TestUnknownSize(t *testing.T) {
	_, err := randmodel.Write(context.Background(), t.TempDir(), randmodel.Options{Size: "huge"})
	if err == nil || !strings.Contains(err.Error(), `"huge"`) {
		t.Errorf("err = %v, want one naming the size", err)
	}
}

// TestCancelLeavesNoWeights: a cancelled write returns the context's error
// and leaves neither a temporary nor a weight file.
func TestCancelLeavesNoWeights(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := randmodel.Write(ctx, dir, randmodel.Options{Size: randmodel.Tiny}); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && (strings.Contains(d.Name(), ".safetensors") || strings.Contains(d.Name(), ".tmp-")) {
			t.Errorf("left behind: %s", p)
		}
		return nil
	})
}
