// Package lora reads HunyuanVideo LoRAs (diffusers/PEFT, kohya and
// musubi-tuner safetensors) and merges them into the transformer's weights
// as they are built: W += scale·(alpha/rank)·B·A, computed in f32 from the
// checkpoint's values and rounded once to the weight's dtype.
package lora

import (
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/framepack-go/framepack/weights"
)

// File is one LoRA to apply: a safetensors path and its strength.
type File struct {
	Path  string  `json:"path"`
	Scale float64 `json:"scale"`
}

// ParseArg reads a --lora argument, "file.safetensors[:scale]" (scale 1
// when absent). An argument that names an existing file as it is, colons
// and all, is that file at scale 1; where it could also be a file and a
// scale, it is ambiguous and refused (give the scale). A scale must be
// a finite number.
func ParseArg(s string) (File, error) {
	f := File{Path: s, Scale: 1}
	i := strings.LastIndexByte(s, ':')
	whole := isFile(s)
	if i >= 0 && whole && isNumber(s[i+1:]) && isFile(s[:i]) {
		return f, fmt.Errorf("lora %q: both %s and %s are files; add the scale (%s:1 for the first)", s, s, s[:i], s)
	}
	if i >= 0 && !whole && !strings.ContainsAny(s[i+1:], `/\`) {
		v, err := strconv.ParseFloat(s[i+1:], 64)
		if err != nil {
			return f, fmt.Errorf("lora %q: scale %q is not a number", s, s[i+1:])
		}
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return f, fmt.Errorf("lora %q: scale %q is not a finite number", s, s[i+1:])
		}
		f.Path, f.Scale = s[:i], v
	}
	if f.Path == "" {
		return f, fmt.Errorf("lora %q: no file", s)
	}
	return f, nil
}

func isNumber(s string) bool {
	_, err := strconv.ParseFloat(s, 64)
	return err == nil
}

// isFile reports whether path names an existing file (not a folder).
func isFile(path string) bool {
	st, err := os.Stat(path)
	return err == nil && !st.IsDir()
}

// Pair is one adapted module's low-rank factors as read from a file: down
// (A, rank×in) and up (B, out×rank), float32 row-major, and alpha (0: rank).
type Pair struct {
	Module     string // the module as named in the file, without suffixes
	Down, Up   []float32
	Rank       int
	In, Out    int
	Alpha      float64
	upRank     int
	hasAlpha   bool
	alphaValue float64
}

// Read parses a LoRA file into its pairs, keyed by module as the file names
// it (diffusers "transformer.x.y.lora_A.weight", kohya "lora_unet_x_y.lora_down.weight").
// Keys that are neither factors nor alphas fail.
func Read(path string) ([]*Pair, error) {
	ck, err := weights.OpenFile(path)
	if err != nil {
		return nil, err
	}
	defer ck.Close()
	pairs := map[string]*Pair{}
	get := func(m string) *Pair {
		if p := pairs[m]; p != nil {
			return p
		}
		p := &Pair{Module: m}
		pairs[m] = p
		return p
	}
	var bad []string
	for _, name := range ck.Names() {
		mod, kind := splitKey(name)
		if kind == "" {
			bad = append(bad, name)
			continue
		}
		t, err := ck.Host(name)
		if err != nil {
			return nil, err
		}
		v := append([]float32(nil), t.ToFloat32()...) // f32 data is the mapping's, unmapped at Close
		shape := t.Shape()
		p := get(mod)
		switch kind {
		case "alpha":
			if len(v) != 1 {
				return nil, fmt.Errorf("lora %s: %s has %d values, want 1", path, name, len(v))
			}
			p.hasAlpha, p.alphaValue = true, float64(v[0])
		case "down", "up":
			if len(shape) == 4 && shape[2] == 1 && shape[3] == 1 {
				shape = shape[:2] // 1×1 conv form of a linear
			}
			if len(shape) != 2 {
				return nil, fmt.Errorf("lora %s: %s has shape %v, want 2-D", path, name, shape)
			}
			if kind == "down" {
				p.Down, p.Rank, p.In = v, shape[0], shape[1]
			} else {
				p.Up, p.Out, p.upRank = v, shape[0], shape[1]
			}
		}
	}
	if len(bad) > 0 {
		return nil, fmt.Errorf("lora %s: %d keys are not LoRA factors (lora_A/lora_B, lora_down/lora_up, alpha): %s", path, len(bad), few(bad))
	}
	var out []*Pair
	for _, p := range pairs {
		if p.Down == nil || p.Up == nil {
			return nil, fmt.Errorf("lora %s: module %s lacks its down or up factor", path, p.Module)
		}
		if p.upRank != p.Rank {
			return nil, fmt.Errorf("lora %s: module %s: up factor of rank %d, down factor of rank %d", path, p.Module, p.upRank, p.Rank)
		}
		p.Alpha = float64(p.Rank)
		if p.hasAlpha {
			p.Alpha = p.alphaValue
		}
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Module < out[j].Module })
	return out, nil
}

// splitKey splits a file key into its module and kind (down, up, alpha);
// kind is "" for a key that is none of them.
func splitKey(k string) (mod, kind string) {
	for _, s := range []struct{ suf, kind string }{
		{".lora_A.weight", "down"}, {".lora_B.weight", "up"},
		{".lora_A.default.weight", "down"}, {".lora_B.default.weight", "up"},
		{".lora_down.weight", "down"}, {".lora_up.weight", "up"},
		{".alpha", "alpha"},
	} {
		if strings.HasSuffix(k, s.suf) {
			return strings.TrimSuffix(k, s.suf), s.kind
		}
	}
	return "", ""
}

// few lists up to five names, then how many more.
func few(names []string) string {
	sort.Strings(names)
	if len(names) <= 5 {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:5], ", "), len(names)-5)
}
