// Package weights reads model checkpoints in the Hugging Face layout: a folder
// with config.json and safetensors weights, either one file
// (diffusion_pytorch_model.safetensors, model.safetensors) or shards listed by
// a *.safetensors.index.json. Files are memory-mapped; shards are mapped on
// first use. Tensors come out either as they are stored (Host, zero-copy) or
// converted to a compute dtype on a backend (Load). Models take their weights
// through a Builder, from a checkpoint, random values or a plan.
package weights

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/framepack-go/framepack/internal/jsonobj"
	"github.com/framepack-go/framepack/tensor"
)

// Checkpoint is an open set of safetensors files. Its methods are safe for
// concurrent use.
type Checkpoint struct {
	dir    string // folder holding config.json
	where  string // what was opened, for errors
	shards []*shard
	byName map[string]*shard // every tensor name → the file that holds it
	names  []string          // sorted

	mu     sync.Mutex
	closed bool

	fp8 fp8Memo // quantized parts between their codes' and scales' fills
}

// shard is one safetensors file, mapped on first use. The file stays open
// beside its mapping: parallel loads read it with pread (read.go).
type shard struct {
	path   string
	file   *os.File
	data   []byte
	hdr    *header
	err    error
	opened bool
}

// Single-file names, in the order they are looked for.
var singleNames = []string{"diffusion_pytorch_model.safetensors", "model.safetensors"}

// Open opens a Hugging Face model folder: a sharded checkpoint when it has a
// *.safetensors.index.json, otherwise its one safetensors file. A path to a
// .safetensors file is opened as with OpenFile.
func Open(dir string) (*Checkpoint, error) {
	st, err := os.Stat(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("weights: model folder %s does not exist", dir)
		}
		return nil, fmt.Errorf("weights: %v", err)
	}
	if !st.IsDir() {
		return OpenFile(dir)
	}
	if idx, err := findOne(dir, ".safetensors.index.json", []string{
		"diffusion_pytorch_model.safetensors.index.json", "model.safetensors.index.json"}); err != nil {
		return nil, err
	} else if idx != "" {
		return openSharded(dir, idx)
	}
	file, err := findOne(dir, ".safetensors", singleNames)
	if err != nil {
		return nil, err
	}
	if file == "" {
		return nil, fmt.Errorf("weights: %s has no .safetensors file and no .safetensors.index.json", dir)
	}
	return OpenFile(file)
}

// findOne finds the file in dir with one of the preferred names, or else the
// only file with the suffix; "" when there is none.
func findOne(dir, suffix string, preferred []string) (string, error) {
	for _, name := range preferred {
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p, nil
		}
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return "", fmt.Errorf("weights: %v", err)
	}
	var found []string
	for _, e := range ents {
		if !e.IsDir() && strings.HasSuffix(e.Name(), suffix) {
			found = append(found, e.Name())
		}
	}
	switch len(found) {
	case 0:
		return "", nil
	case 1:
		return filepath.Join(dir, found[0]), nil
	}
	return "", fmt.Errorf("weights: %s has several *%s files and none of the usual names (%s)", dir, suffix, strings.Join(found, ", "))
}

// OpenFile opens one safetensors file; Config reads the config.json next to it.
func OpenFile(path string) (*Checkpoint, error) {
	sh := &shard{path: path}
	if err := sh.open(); err != nil {
		return nil, err
	}
	c := &Checkpoint{dir: filepath.Dir(path), where: path, shards: []*shard{sh}, byName: map[string]*shard{}}
	for name := range sh.hdr.entries {
		c.byName[name] = sh
		c.names = append(c.names, name)
	}
	sort.Strings(c.names)
	return c, nil
}

func openSharded(dir, indexPath string) (*Checkpoint, error) {
	raw, err := os.ReadFile(indexPath)
	if err != nil {
		return nil, fmt.Errorf("weights: %v", err)
	}
	var idx struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(raw, &idx); err != nil {
		return nil, fmt.Errorf("weights: %s: %s", indexPath, jsonProblem(raw, &idx, err))
	}
	if len(idx.WeightMap) == 0 {
		return nil, fmt.Errorf("weights: %s: weight_map is missing or empty", indexPath)
	}
	// A map keeps the last of two entries for one tensor: look for them in
	// the text.
	if err := repeatedKey(raw); err != nil {
		return nil, fmt.Errorf("weights: %s: %v", indexPath, err)
	}
	c := &Checkpoint{dir: dir, where: indexPath, byName: make(map[string]*shard, len(idx.WeightMap))}
	files := map[string]*shard{}
	for name, file := range idx.WeightMap {
		sh := files[file]
		if sh == nil {
			// Shards live next to the index: a path elsewhere is refused.
			if file == "" || file != filepath.Base(file) || file == "." || file == ".." {
				return nil, fmt.Errorf("weights: %s: tensor %q is mapped to %q, which is not a file name in the folder", indexPath, name, file)
			}
			p := filepath.Join(dir, file)
			st, err := os.Stat(p)
			if err != nil || st.IsDir() {
				return nil, fmt.Errorf("weights: %s: shard %s (holding %q) is missing from %s", indexPath, file, name, dir)
			}
			sh = &shard{path: p}
			files[file] = sh
			c.shards = append(c.shards, sh)
		}
		c.byName[name] = sh
		c.names = append(c.names, name)
	}
	sort.Strings(c.names)
	sort.Slice(c.shards, func(i, j int) bool { return c.shards[i].path < c.shards[j].path })
	return c, nil
}

// repeatedKey reports a tensor that an index's weight_map lists twice.
func repeatedKey(raw []byte) error {
	var top struct {
		WeightMap json.RawMessage `json:"weight_map"`
	}
	if err := json.Unmarshal(raw, &top); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(top.WeightMap))
	if _, err := dec.Token(); err != nil { // {
		return err
	}
	seen := map[string]string{}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return err
		}
		var file string
		if err := dec.Decode(&file); err != nil {
			return err
		}
		name, _ := k.(string)
		if prev, ok := seen[name]; ok {
			return fmt.Errorf("weight_map lists tensor %q twice (in %s and in %s)", name, prev, file)
		}
		seen[name] = file
	}
	return nil
}

// open maps the file and parses its header (once; the error is kept).
func (s *shard) open() error {
	if s.opened {
		return s.err
	}
	s.opened = true
	s.err = s.doOpen()
	return s.err
}

func (s *shard) doOpen() error {
	f, err := os.Open(s.path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("weights: %s does not exist", s.path)
		}
		return fmt.Errorf("weights: %v", err)
	}
	keep := false
	defer func() {
		if !keep {
			f.Close()
		}
	}()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("weights: %v", err)
	}
	if st.IsDir() {
		return fmt.Errorf("weights: %s is a folder, not a safetensors file", s.path)
	}
	size := st.Size()
	if size < 8 {
		return fmt.Errorf("weights: %s: file is %d bytes, too short for a safetensors header (truncated?)", s.path, size)
	}
	data, err := mapFile(f, size)
	if err != nil {
		return fmt.Errorf("weights: %s: mmap: %v", s.path, err)
	}
	hdr, err := parseHeader(data)
	if err != nil {
		unmapFile(data)
		return fmt.Errorf("weights: %s: %v", s.path, err)
	}
	s.data, s.hdr, s.file = data, hdr, f
	keep = true
	adviseSequential(f) // the loads read it front to back, several pieces at a time
	return nil
}

// Close unmaps every file. Tensors returned by Host are invalid afterwards
// (they point into the mapping); tensors returned by Load stay valid.
func (c *Checkpoint) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	c.fp8.clear()
	var first error
	for _, s := range c.shards {
		if s.data != nil {
			if err := unmapFile(s.data); err != nil && first == nil {
				first = fmt.Errorf("weights: %s: munmap: %v", s.path, err)
			}
			s.data, s.hdr = nil, nil
		}
		if s.file != nil {
			s.file.Close()
			s.file = nil
		}
	}
	return first
}

// Dir is the folder holding the checkpoint's config.json.
func (c *Checkpoint) Dir() string { return c.dir }

// Config decodes the folder's config.json into v.
func (c *Checkpoint) Config(v any) error { return ReadConfig(c.dir, v) }

// ReadConfig decodes dir/config.json into v (what Checkpoint.Config does,
// for a folder that may hold no weights). Keys v does not name are ignored.
func ReadConfig(dir string, v any) error {
	p := filepath.Join(dir, "config.json")
	raw, err := os.ReadFile(p)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("weights: %s does not exist", p)
		}
		return fmt.Errorf("weights: %v", err)
	}
	if err := jsonobj.Check(raw); err != nil {
		return fmt.Errorf("weights: %s %v", p, err)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("weights: %s: %s", p, jsonProblem(raw, v, err))
	}
	return nil
}

// jsonProblem describes a decoding error of raw into v with its line and
// column.
func jsonProblem(raw []byte, v any, err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		line, col := lineCol(raw, se.Offset)
		return fmt.Sprintf("invalid JSON at line %d, column %d: %v", line, col, se)
	case errors.As(err, &te):
		line, col := lineCol(raw, te.Offset)
		return fmt.Sprintf("field %q at line %d, column %d: JSON %s does not fit Go %s", fileKey(v, te.Field), line, col, te.Value, te.Type)
	}
	return "invalid JSON: " + err.Error()
}

// fileKey is field, the path encoding/json gives to a value of v, as the
// file's keys: the path also names the embedded structs (a config that
// embeds hfmodel.Dims), which the file does not have.
func fileKey(v any, field string) string {
	var keys []string
	t := reflect.TypeOf(v)
	for _, name := range strings.Split(field, ".") {
		for t != nil && (t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array || t.Kind() == reflect.Map) {
			t = t.Elem()
		}
		if t == nil || t.Kind() != reflect.Struct {
			keys, t = append(keys, name), nil
			continue
		}
		if f, ok := t.FieldByName(name); ok && f.Anonymous {
			t = f.Type
			continue
		}
		keys, t = append(keys, name), jsonField(t, name)
	}
	return strings.Join(keys, ".")
}

// jsonField is the type of struct t's field (its own or promoted) that
// decodes key, or nil.
func jsonField(t reflect.Type, key string) reflect.Type {
	for _, f := range reflect.VisibleFields(t) {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == key || name == "" && strings.EqualFold(f.Name, key) {
			return f.Type
		}
	}
	return nil
}

func lineCol(raw []byte, off int64) (line, col int) {
	if off > int64(len(raw)) {
		off = int64(len(raw))
	}
	line, col = 1, 1
	for _, b := range raw[:off] {
		if b == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	return line, col
}

// Names lists every tensor, sorted.
func (c *Checkpoint) Names() []string { return append([]string(nil), c.names...) }

// Has reports whether the checkpoint holds a tensor (see resolve for the
// names accepted).
func (c *Checkpoint) Has(name string) bool {
	_, ok := c.resolve(name)
	return ok
}

// resolve maps a requested name to the stored one. Transformers checkpoints
// of CLIP and SigLIP store their towers under "text_model." / "vision_model.";
// both spellings are accepted.
func (c *Checkpoint) resolve(name string) (string, bool) {
	if _, ok := c.byName[name]; ok {
		return name, true
	}
	for _, p := range []string{"text_model.", "vision_model."} {
		if _, ok := c.byName[p+name]; ok {
			return p + name, true
		}
		if rest, ok := strings.CutPrefix(name, p); ok {
			if _, ok := c.byName[rest]; ok {
				return rest, true
			}
		}
	}
	return "", false
}

// entry finds a tensor's header entry and bytes, mapping its shard if needed.
func (c *Checkpoint) entry(name string) (*entry, *shard, []byte, error) {
	stored, ok := c.resolve(name)
	if !ok {
		msg := fmt.Sprintf("weights: %s: no tensor %q", c.where, name)
		if near := closest(name, c.names, 3); len(near) > 0 {
			msg += fmt.Sprintf(" (closest: %s)", strings.Join(near, ", "))
		}
		return nil, nil, nil, errors.New(msg)
	}
	sh := c.byName[stored]
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, nil, nil, fmt.Errorf("weights: %s: checkpoint is closed", c.where)
	}
	if err := sh.open(); err != nil {
		return nil, nil, nil, err
	}
	e := sh.hdr.entries[stored]
	if e == nil {
		return nil, nil, nil, fmt.Errorf("weights: %s: the index puts tensor %q in this file, but it is not there", sh.path, stored)
	}
	return e, sh, sh.data[e.begin:e.end], nil
}

// Info reports a tensor's dtype and shape as stored. A tensor of a dtype that
// framepack cannot load (FP8, unsigned ints, ...) gives an error saying so.
func (c *Checkpoint) Info(name string) (tensor.DType, []int, error) {
	e, sh, _, err := c.entry(name)
	if err != nil {
		return tensor.Invalid, nil, err
	}
	if e.problem != "" {
		return tensor.Invalid, append([]int(nil), e.shape...), fmt.Errorf("weights: %s: tensor %q: %s", sh.path, e.name, e.problem)
	}
	return e.dt, append([]int(nil), e.shape...), nil
}

// Host returns a tensor as stored in the file, as a host tensor. When the
// data is aligned for its dtype (the usual case) the tensor points into the
// read-only file mapping: it must not be written, and it is invalid after
// Close. Otherwise it is a copy.
func (c *Checkpoint) Host(name string) (*tensor.Tensor, error) {
	e, sh, data, err := c.entry(name)
	if err != nil {
		return nil, err
	}
	if e.problem != "" {
		return nil, fmt.Errorf("weights: %s: tensor %q: %s", sh.path, e.name, e.problem)
	}
	if !aligned(data, e.dt.Size()) {
		t := tensor.New(e.dt, e.shape...)
		copy(t.HostBytes(), data)
		return t, nil
	}
	return tensor.FromBytes(e.dt, data, e.shape...)
}

// Load reads a tensor onto a backend as dtype dt (tensor.Invalid: as stored),
// allocated with tensor.Alloc (free it with tensor.Release). Floating-point
// tensors (F32, F16, BF16, F64) convert to F32, F16 or BF16: exactly when
// widening, rounding to nearest even when narrowing. Integer and boolean
// tensors load only as themselves. When shape is given the stored shape must
// equal it.
func (c *Checkpoint) Load(be tensor.Backend, name string, dt tensor.DType, shape ...int) (*tensor.Tensor, error) {
	e, sh, _, err := c.checked(name, shape, dt)
	if err != nil {
		return nil, err
	}
	if dt == tensor.Invalid {
		dt = e.dt
	}
	t, err := tensor.Alloc(be, dt, e.shape...)
	if err != nil {
		return nil, fmt.Errorf("weights: %s: tensor %q (%s %v): %w", sh.path, e.name, dt, e.shape, err)
	}
	if err := c.put(be, t.Buffer(), 0, name, shape, dt, tensor.Invalid); err != nil {
		tensor.Release(t)
		return nil, err
	}
	return t, nil
}

// checked finds tensor name and checks that it loads as dt (Invalid: as
// stored) with the given shape (none: any).
func (c *Checkpoint) checked(name string, shape []int, dt tensor.DType) (*entry, *shard, []byte, error) {
	e, sh, data, err := c.entry(name)
	if err != nil {
		return nil, nil, nil, err
	}
	if e.problem != "" {
		return nil, nil, nil, fmt.Errorf("weights: %s: tensor %q: %s", sh.path, e.name, e.problem)
	}
	if len(shape) > 0 && !slices.Equal(shape, e.shape) {
		return nil, nil, nil, fmt.Errorf("weights: %s: tensor %q has shape %v, want %v", sh.path, e.name, e.shape, shape)
	}
	if dt != tensor.Invalid && !convertible(e.dt, dt) {
		return nil, nil, nil, fmt.Errorf("weights: %s: tensor %q is %s and cannot be loaded as %s", sh.path, e.name, e.dt, dt)
	}
	return e, sh, data, nil
}

// put copies tensor name into dst at byte offset off as dtype dt, its
// values rounded through round first (Invalid: no extra rounding): converted
// in place where be computes on host memory, else uploaded (chunk by chunk
// when converted). The tensor's mapped pages are released after.
func (c *Checkpoint) put(be tensor.Backend, dst tensor.Buffer, off int64, name string, shape []int, dt, round tensor.DType) error {
	e, sh, data, err := c.checked(name, shape, dt)
	if err != nil {
		return err
	}
	if dt == tensor.Invalid {
		dt = e.dt
	}
	data, from, err := c.dequantized(e, name, data, dt)
	if err != nil {
		return err
	}
	n := int64(len(data)/from.Size()) * int64(dt.Size())
	if hb, ok := dst.(*tensor.HostBuffer); ok && tensor.IsHostBacked(be) {
		convertThrough(hb.Data()[off:off+n], dt, round, data, from)
	} else if err := uploadConverted(be, dst, off, dt, round, data, from); err != nil {
		return fmt.Errorf("weights: %s: tensor %q: upload: %w", sh.path, e.name, err)
	}
	// The tensor is a copy now: its pages of the mapping need not stay in
	// this process, so a model is not held twice (mapping and copy) while
	// the rest of it loads.
	c.drop(sh, e)
	return nil
}

// fill converts tensor name into the host bytes dst as put does.
func (c *Checkpoint) fill(dst []byte, name string, shape []int, dt, round tensor.DType) error {
	e, sh, data, err := c.checked(name, shape, dt)
	if err != nil {
		return err
	}
	data, from, err := c.dequantized(e, name, data, dt)
	if err != nil {
		return err
	}
	convertThrough(dst[:len(data)/from.Size()*dt.Size()], dt, round, data, from)
	c.drop(sh, e)
	return nil
}

// stageBytes bounds the host staging of a converted upload: conversion
// runs in chunks of this many output bytes, never a whole-tensor buffer.
const stageBytes = 16 << 20

var stagePool = sync.Pool{New: func() any { b := make([]byte, stageBytes); return &b }}

// uploadConverted uploads src (dtype from) into dst at byte offset off as
// dtype to, rounded through round: as it is when no conversion is needed
// (the backend stages it itself), else converted chunk by chunk through one
// bounded buffer.
func uploadConverted(be tensor.Backend, dst tensor.Buffer, off int64, to, round tensor.DType, src []byte, from tensor.DType) error {
	if from == to && !rounds(round, from, to) && aligned(src, from.Size()) {
		return be.Upload(dst, off, src)
	}
	n := len(src) / from.Size()
	per := max(1, stageBytes/max(to.Size(), from.Size()))
	// One buffer reused across tensors: blocks streamed from the file
	// convert every tensor on every forward pass.
	bp := stagePool.Get().(*[]byte)
	defer stagePool.Put(bp)
	buf := *bp
	for lo := 0; lo < n; lo += per {
		hi := min(lo+per, n)
		out := buf[:(hi-lo)*to.Size()]
		convertThrough(out, to, round, src[lo*from.Size():hi*from.Size()], from)
		if err := be.Upload(dst, off+int64(lo*to.Size()), out); err != nil {
			return err
		}
	}
	return nil
}

// rounds reports whether rounding through round changes values going from
// dtype from to dtype to.
func rounds(round, from, to tensor.DType) bool {
	return round != tensor.Invalid && round != to && round != from
}

// convertThrough is convert with the values rounded through dtype round
// first, chunk by chunk through a bounded buffer.
func convertThrough(dst []byte, to, round tensor.DType, src []byte, from tensor.DType) {
	if !rounds(round, from, to) {
		convert(dst, to, src, from)
		return
	}
	n := len(src) / from.Size()
	per := max(1, stageBytes/round.Size())
	buf := make([]byte, min(n, per)*round.Size())
	for lo := 0; lo < n; lo += per {
		hi := min(lo+per, n)
		mid := buf[:(hi-lo)*round.Size()]
		convert(mid, round, src[lo*from.Size():hi*from.Size()], from)
		convert(dst[lo*to.Size():hi*to.Size()], to, mid, round)
	}
}

// drop releases the process's pages of e's bytes in the mapping
// (best effort: a failure only leaves them resident).
func (c *Checkpoint) drop(sh *shard, e *entry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed && sh.data != nil {
		_ = adviseDontNeed(sh.data, e.begin, e.end)
	}
}

// WillNeed asks the kernel to read tensor name's bytes ahead of their use,
// in the background (read-ahead for weights streamed from the file).
func (c *Checkpoint) WillNeed(name string) error {
	e, sh, _, err := c.entry(name)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || sh.data == nil {
		return nil
	}
	if err := adviseWillNeed(sh.data, e.begin, e.end); err != nil {
		return fmt.Errorf("weights: %s: read-ahead of %q: %v", sh.path, e.name, err)
	}
	return nil
}

// closest returns up to k names nearest to name by edit distance.
func closest(name string, names []string, k int) []string {
	type cand struct {
		s string
		d int
	}
	var cs []cand
	for _, n := range names {
		cs = append(cs, cand{n, editDistance(name, n)})
	}
	sort.SliceStable(cs, func(i, j int) bool { return cs[i].d < cs[j].d })
	var out []string
	for i := 0; i < len(cs) && i < k; i++ {
		// A name sharing little with the request is no hint.
		if cs[i].d > len(name)/2+2 {
			break
		}
		out = append(out, fmt.Sprintf("%q", cs[i].s))
	}
	return out
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
