// Package randmodel writes a complete FramePack model folder with random
// weights: the released checkpoints' layout, tensor names, shapes, dtypes,
// sharding and configs (transformer/, text_encoder/, text_encoder_2/, vae/,
// image_encoder/, tokenizer/, tokenizer_2/, feature_extractor/), so the
// whole job can be measured at real size, by this engine and by FramePack's
// own code, where the real weights cannot be downloaded.
//
// The values are seeded and reproducible, drawn as Hugging Face's
// _init_weights would (normal(0, 0.02) for linears and embeddings, norms
// at weight 1 and bias 0, zero biases; convolutions at PyTorch's default
// scale), which keeps a 32-layer fp16 LLaMA and the 60-block transformer
// finite. The folder is written in parallel at disk speed, chunk by chunk,
// never holding a shard in memory; every file is written under a temporary
// name and renamed, so an interrupted run leaves no partial file.
package randmodel

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"

	"github.com/framepack-go/framepack/internal/atomicfile"
	"github.com/framepack-go/framepack/weights"
)

// Size chooses the model dimensions.
type Size string

const (
	// Released: the released checkpoints' dimensions (≈ 42 GB).
	Released Size = "released"
	// Tiny: the embedded tiny model's dimensions (tinymodel) with
	// the released vocabularies, in the released layout and sharding.
	Tiny Size = "tiny"
)

// Options configure Write.
type Options struct {
	Size Size   // Released or Tiny ("" means Released)
	Seed uint64 // the same seed writes the same bytes
	// Workers generating and writing chunks; 0 means GOMAXPROCS.
	Workers int
	// Progress, when set, is called from the workers with the bytes of
	// weights written so far and the total.
	Progress func(written, total int64)

	// HeadersOnly writes each weight file's header and leaves its data a
	// hole (a sparse file of the right size): the tests load a
	// released-size folder's configs and headers without 42 GB of disk.
	HeadersOnly bool
}

// Summary describes a written folder.
type Summary struct {
	Files       int   // weight files (safetensors)
	WeightBytes int64 // their size, headers included
	Params      int64 // values
}

// component is one model folder's weights.
type component struct {
	folder      string
	config      map[string]any
	weightsName string // "model" or "diffusion_pytorch_model"
	dtype       string // safetensors dtype: "BF16" or "F16"
	maxShard    int64  // 0: one file
	tensors     []weights.Spec
}

// shard sizes as save_pretrained wrote the released folders: diffusers'
// default of 10 GB for the transformer (3 shards), transformers' 5 GB for
// the LLaMA (4 shards). The tiny model shards at 1 MB so that it has
// several shards too.
const (
	transformerShard = 10_000_000_000
	llamaShard       = 5_000_000_000
	tinyShard        = 1_000_000
)

// components lists the five weight folders for a size.
func components(size Size) ([]*component, error) {
	var cfgs map[string]map[string]any
	trShard, llShard := int64(transformerShard), int64(llamaShard)
	switch size {
	case Released, "":
		cfgs = releasedConfigs()
	case Tiny:
		var err error
		if cfgs, err = tinyConfigs(); err != nil {
			return nil, err
		}
		trShard, llShard = tinyShard, tinyShard
	default:
		return nil, fmt.Errorf("size %q: want %q or %q", size, Released, Tiny)
	}
	cs := []*component{
		{folder: "transformer", weightsName: "diffusion_pytorch_model", dtype: "BF16", maxShard: trShard},
		{folder: "text_encoder", weightsName: "model", dtype: "F16", maxShard: llShard},
		{folder: "text_encoder_2", weightsName: "model", dtype: "F16"},
		{folder: "vae", weightsName: "diffusion_pytorch_model", dtype: "F16"},
		{folder: "image_encoder", weightsName: "model", dtype: "BF16"},
	}
	for _, c := range cs {
		c.config = cfgs[c.folder]
		var err error
		c.tensors, err = loaderTensors(c.folder, c.config)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.folder, err)
		}
	}
	return cs, nil
}

// Write writes the model folder into dir (created if needed; files of the
// same names are replaced, and weight files of an earlier layout that this
// one does not have are removed).
func Write(ctx context.Context, dir string, opts Options) (Summary, error) {
	var sum Summary
	cs, err := components(opts.Size)
	if err != nil {
		return sum, fmt.Errorf("randmodel: %w", err)
	}
	small := map[string][]byte{}
	tok, err := tokenizerFiles()
	if err != nil {
		return sum, fmt.Errorf("randmodel: %w", err)
	}
	for p, b := range tok {
		small[p] = b
	}
	if small["feature_extractor/preprocessor_config.json"], err = marshal(preprocessorFor(cs)); err != nil {
		return sum, fmt.Errorf("randmodel: %w", err)
	}
	var files []*shardFile
	indexes := map[string][]byte{}
	keep := map[string]bool{}
	for _, c := range cs {
		if small[c.folder+"/config.json"], err = marshal(c.config); err != nil {
			return sum, fmt.Errorf("randmodel: %s config: %w", c.folder, err)
		}
		if err := os.MkdirAll(filepath.Join(dir, c.folder), 0o755); err != nil {
			return sum, fmt.Errorf("randmodel: %w", err)
		}
		fs, err := plan(dir, c)
		if err != nil {
			return sum, fmt.Errorf("randmodel: %w", err)
		}
		for _, f := range fs {
			keep[f.path] = true
			sum.WeightBytes += f.size
			for _, t := range f.tensors {
				sum.Params += t.Numel()
			}
		}
		if c.maxShard > 0 {
			name := c.folder + "/" + c.weightsName + ".safetensors.index.json"
			if indexes[name], err = index(fs); err != nil {
				return sum, fmt.Errorf("randmodel: %s: %w", name, err)
			}
			keep[filepath.Join(dir, filepath.FromSlash(name))] = true
		}
		files = append(files, fs...)
	}
	sum.Files = len(files)

	for p, b := range small {
		if err := writeAtomic(filepath.Join(dir, filepath.FromSlash(p)), b); err != nil {
			return sum, fmt.Errorf("randmodel: %w", err)
		}
	}
	var written atomic.Int64
	var progress func(int64)
	if opts.Progress != nil {
		total := sum.WeightBytes
		progress = func(n int64) { opts.Progress(written.Add(n), total) }
	}
	if opts.HeadersOnly {
		for _, f := range files {
			f.tensors, f.offsets = nil, nil // no chunks to write
		}
	}
	if err := writeShards(ctx, files, opts.Seed, opts.Workers, progress); err != nil {
		return sum, fmt.Errorf("randmodel: %w", err)
	}
	// The indexes last: one never names a shard that is not there.
	for p, b := range indexes {
		if err := writeAtomic(filepath.Join(dir, filepath.FromSlash(p)), b); err != nil {
			return sum, fmt.Errorf("randmodel: %w", err)
		}
	}
	// An earlier layout's weight files (another size's shard count) would
	// sit beside the new ones and confuse a loader that globs.
	for _, c := range cs {
		entries, _ := os.ReadDir(filepath.Join(dir, c.folder))
		for _, e := range entries {
			p := filepath.Join(dir, c.folder, e.Name())
			if strings.HasPrefix(e.Name(), c.weightsName) && strings.Contains(e.Name(), ".safetensors") && !keep[p] {
				if err := os.Remove(p); err != nil {
					return sum, fmt.Errorf("randmodel: removing the stale %s: %w", p, err)
				}
			}
		}
	}
	return sum, nil
}

// index is the shards' .safetensors.index.json as save_pretrained writes
// it: {"metadata": {"total_size": N}, "weight_map": {name: file}}, where
// total_size counts tensor bytes (not headers).
func index(files []*shardFile) ([]byte, error) {
	var total int64
	wm := map[string]string{}
	for _, f := range files {
		for _, t := range f.tensors {
			total += 2 * t.Numel()
			wm[t.Name] = filepath.Base(f.path)
		}
	}
	return marshal(map[string]any{"metadata": map[string]any{"total_size": total}, "weight_map": wm})
}

// marshal is JSON as Hugging Face writes its files: sorted keys, two-space
// indent, a final newline, no HTML escaping (tokens hold < and >).
func marshal(v any) ([]byte, error) {
	var sb strings.Builder
	enc := json.NewEncoder(&sb)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(pyFloats(v)); err != nil {
		return nil, err
	}
	return []byte(sb.String()), nil
}

// pyFloat is a float64 written as Python writes one: with a decimal point
// even when integral (1.0, 500000.0). transformers' typed config classes
// refuse an int where the released config has a float.
type pyFloat float64

func (f pyFloat) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(float64(f))
	if err == nil && !bytes.ContainsAny(b, ".eE") {
		b = append(b, '.', '0')
	}
	return b, err
}

// pyFloats returns v with every float64 inside maps and slices as a pyFloat.
func pyFloats(v any) any {
	switch x := v.(type) {
	case float64:
		return pyFloat(x)
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = pyFloats(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = pyFloats(e)
		}
		return out
	case []float64:
		out := make([]pyFloat, len(x))
		for i, e := range x {
			out[i] = pyFloat(e)
		}
		return out
	}
	return v
}

// writeAtomic writes path through a temporary file and a rename.
func writeAtomic(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if err := atomicfile.WriteFile(path, b, 0o644); err != nil { // model files are for every user
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
