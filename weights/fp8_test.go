package weights

import (
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/framepack-go/framepack/tensor"
)

// fp8File writes a checkpoint in the single-file community layouts: a plain
// cast (no scale) beside a bf16 bias, ComfyUI's scaled_fp8 (per-tensor
// scale_weight and the marker), a per-row weight_scale, and a bf16 weight
// to quantize at load.
func fp8File(t *testing.T) (string, map[string][]float32) {
	t.Helper()
	const rows, cols = 3, 5
	vals := make([]float32, rows*cols)
	for i := range vals {
		vals[i] = float32(math.Sin(float64(i)+0.3)) * float32(1+i/cols)
	}
	codes := make([]byte, len(vals))
	tensor.NarrowF8E4M3(codes, vals)
	f8 := func(b []byte) *tensor.Tensor {
		x, err := tensor.FromBytes(tensor.F8E4M3, append([]byte(nil), b...), rows, cols)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	bf := tensor.New(tensor.BF16, rows, cols)
	tensor.NarrowBF16(bf.Uint16s(), vals)
	marker, _ := tensor.FromBytes(tensor.F8E4M3, nil, 0)
	ts := map[string]*tensor.Tensor{
		"plain.weight":        f8(codes),
		"plain.bias":          tensor.New(tensor.BF16, rows),
		"scaled.weight":       f8(codes),
		"scaled.scale_weight": tensor.FromFloat32([]float32{0.5}),
		"scaled_fp8":          marker,
		"rows.weight":         f8(codes),
		"rows.weight_scale":   tensor.FromFloat32([]float32{1, 2, 4}, rows),
		"dense.weight":        bf,
	}
	p := filepath.Join(t.TempDir(), "model.safetensors")
	if err := Save(p, ts, nil); err != nil {
		t.Fatal(err)
	}
	want := map[string][]float32{}
	dec := make([]float32, len(codes))
	tensor.WidenF8E4M3(dec, codes)
	for name, scale := range map[string][]float32{"plain": {1, 1, 1}, "scaled": {.5, .5, .5}, "rows": {1, 2, 4}} {
		w := make([]float32, len(dec))
		for i := range w {
			w[i] = dec[i] * scale[i/cols]
		}
		want[name] = w
	}
	want["dense"] = tensor.ToHost(bf).ToFloat32()
	return p, want
}

func TestFP8CheckpointLayouts(t *testing.T) {
	path, want := fp8File(t)
	ck, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	if dt, _, err := ck.Info("plain.weight"); err != nil || dt != tensor.F8E4M3 {
		t.Fatalf("Info: %s %v", dt, err)
	}
	for _, be := range []tensor.Backend{&hostBE{}, &devBE{}} {
		p := FromCheckpoint(ck, be, tensor.BF16)
		for _, name := range []string{"plain", "scaled", "rows", "dense"} {
			// As an FP8 weight: the stored codes and scales, or (dense)
			// quantized per row; dequantized they are the weight.
			w, sc := p.GetFP8(name+".weight", 3, 5)
			if err := p.Err(); err != nil {
				t.Fatalf("%s: %s: %v", be.Name(), name, err)
			}
			if w.DType() != tensor.F8E4M3 || sc.DType() != tensor.F32 || sc.Numel() != 3 {
				t.Fatalf("%s: %s: %s %v, scale %s %v", be.Name(), name, w.DType(), w.Shape(), sc.DType(), sc.Shape())
			}
			codes, scales := tensor.ToHost(w).HostBytes(), tensor.Float32s(sc)
			var num, den float64
			for i, c := range codes {
				d := float64(tensor.F32FromF8E4M3(c)) * float64(scales[i/5])
				num += (d - float64(want[name][i])) * (d - float64(want[name][i]))
				den += float64(want[name][i]) * float64(want[name][i])
			}
			limit := 0.0 // stored codes: exact
			if name == "dense" {
				limit = 0.04 // E4M3 keeps 3 mantissa bits
			}
			if rel := math.Sqrt(num / den); rel > limit || math.IsNaN(rel) {
				t.Errorf("%s: %s: fp8 relative L2 %v > %v", be.Name(), name, rel, limit)
			}
			if name == "dense" {
				continue
			}
			// As an ordinary weight: widened and scaled, exact in f32.
			g := FromCheckpoint(ck, be, tensor.F32).Get(name+".weight", 3, 5)
			for i, v := range tensor.Float32s(g) {
				if v != want[name][i] {
					t.Errorf("%s: %s as f32: [%d] %v, want %v", be.Name(), name, i, v, want[name][i])
					break
				}
			}
		}
		p.Release()
	}

	// Parts of different layouts stack.
	p := FromCheckpoint(ck, &hostBE{}, tensor.BF16)
	p.CatFP8([]string{"plain.weight", "rows.weight"}, []int{3, 3}, 5)
	if err := p.Err(); err != nil {
		t.Errorf("CatFP8: %v", err)
	}
	p.Release()
}

func TestFP8BadScale(t *testing.T) {
	codes, _ := tensor.FromBytes(tensor.F8E4M3, make([]byte, 6), 3, 2)
	p := filepath.Join(t.TempDir(), "model.safetensors")
	if err := Save(p, map[string]*tensor.Tensor{"a.weight": codes, "a.weight_scale": tensor.FromFloat32([]float32{1, 2}, 2)}, nil); err != nil {
		t.Fatal(err)
	}
	ck, err := OpenFile(p)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	b := FromCheckpoint(ck, &hostBE{}, tensor.BF16)
	b.GetFP8("a.weight", 3, 2)
	if err := b.Err(); err == nil || !strings.Contains(err.Error(), `"a.weight_scale" has 2 values`) {
		t.Errorf("error %v", err)
	}
}

func TestFP8RandomAndPlan(t *testing.T) {
	r := Random(&hostBE{}, tensor.BF16, 3)
	w, sc := r.GetFP8("x.weight", 4, 8)
	if r.Err() != nil || w.DType() != tensor.F8E4M3 || len(tensor.Float32s(sc)) != 4 {
		t.Fatalf("random: %v", r.Err())
	}
	plan := NewPlan()
	plan.GetFP8("x.weight", 4, 8)
	ws := plan.Weights()
	if len(ws) != 2 || ws[0].Bytes() != 32 || ws[1].Bytes() != 16 || len(plan.Specs()) != 1 {
		t.Errorf("plan %+v, specs %v", ws, plan.Specs())
	}
}
