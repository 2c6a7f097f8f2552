package weights

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/framepack-go/framepack/tensor"
)

// block is a toy module: a fused q|k projection, a norm kept in f32 and an
// optional bias, read as a model's constructor reads its weights.
type block struct{ qk, norm, extra *tensor.Tensor }

func (b *block) load(p *Builder) {
	a := p.Sub("attn")
	b.qk = a.Cat([]string{"to_q.weight", "to_k.weight"}, []int{2, 1}, 3)
	b.norm = p.F32().Get("norm.weight", 3)
	b.extra = p.Opt("extra.bias", 3)
}

func builderCheckpoint(t *testing.T) *Checkpoint {
	t.Helper()
	p := filepath.Join(t.TempDir(), "model.safetensors")
	err := Save(p, map[string]*tensor.Tensor{
		"blk.attn.to_q.weight": tensor.FromFloat32([]float32{1, 2, 3, 4, 5, 6}, 2, 3),
		"blk.attn.to_k.weight": tensor.FromFloat32([]float32{7, 8, 9}, 1, 3),
		"blk.norm.weight":      tensor.FromFloat32([]float32{1.005, 1, 1.01}, 3),
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ck, err := OpenFile(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ck.Close() })
	return ck
}

// TestBuilderSources runs one constructor on a plan, a checkpoint (host
// memory and a device) and random values.
func TestBuilderSources(t *testing.T) {
	plan := NewPlan()
	new(block).load(plan.Sub("blk"))
	want := []Spec{{Name: "blk.attn.to_q.weight", Shape: []int{2, 3}}, {Name: "blk.attn.to_k.weight", Shape: []int{1, 3}},
		{Name: "blk.norm.weight", Shape: []int{3}}, {Name: "blk.extra.bias", Shape: []int{3}, Optional: true}}
	if got := plan.Specs(); !reflect.DeepEqual(got, want) {
		t.Errorf("plan %v, want %v", got, want)
	}
	if ws := plan.Weights(); len(ws) != 3 || !reflect.DeepEqual(ws[0].Shape, []int{3, 3}) || ws[1].Name != "blk.norm.weight" {
		t.Errorf("plan weights %+v", ws)
	}

	ck := builderCheckpoint(t)
	if err := ck.Check(plan.Specs()); err != nil {
		t.Errorf("check: %v", err)
	}
	for _, be := range []tensor.Backend{&hostBE{}, &devBE{}} {
		p := FromCheckpoint(ck, be, tensor.BF16)
		var b block
		b.load(p.Sub("blk"))
		if err := p.Err(); err != nil {
			t.Fatalf("%s: %v", be.Name(), err)
		}
		if b.extra != nil || len(p.Held()) != 2 {
			t.Errorf("%s: optional weight %v, %d held", be.Name(), b.extra, len(p.Held()))
		}
		if got := tensor.Float32s(b.qk); !reflect.DeepEqual(got, []float32{1, 2, 3, 4, 5, 6, 7, 8, 9}) || b.qk.DType() != tensor.BF16 {
			t.Errorf("%s: fused %v %s", be.Name(), got, b.qk.DType())
		}
		// f32, at the values bf16 rounds to (8 bits of mantissa).
		if got := tensor.Float32s(b.norm); b.norm.DType() != tensor.F32 || got[0] != 1.0078125 || got[1] != 1 {
			t.Errorf("%s: f32 norm %v %s", be.Name(), got, b.norm.DType())
		}
		p.Release()
	}

	// A misshapen part names the file, the tensor and both shapes.
	p := FromCheckpoint(ck, &hostBE{}, tensor.F32)
	p.Sub("blk.attn").Cat([]string{"to_q.weight", "to_k.weight"}, []int{2, 2}, 3)
	if err := p.Err(); err == nil || !strings.Contains(err.Error(), "model.safetensors") ||
		!strings.Contains(err.Error(), `"blk.attn.to_k.weight" has shape [1 3], want [2 3]`) {
		t.Errorf("error %v", err)
	}

	r1, r2 := Random(&hostBE{}, tensor.F32, 5), Random(&devBE{}, tensor.F32, 5)
	var b1, b2 block
	b1.load(r1.Sub("blk"))
	b2.load(r2.Sub("blk"))
	if r1.Err() != nil || r2.Err() != nil || b1.extra == nil {
		t.Fatalf("random: %v %v", r1.Err(), r2.Err())
	}
	if !reflect.DeepEqual(tensor.Float32s(b1.qk), tensor.Float32s(b2.qk)) || !reflect.DeepEqual(tensor.Float32s(b1.norm), []float32{1, 1, 1}) {
		t.Errorf("random values differ between backends or norm not 1: %v %v", tensor.Float32s(b1.qk), tensor.Float32s(b1.norm))
	}
	for _, v := range tensor.Float32s(b1.extra) {
		if v != 0 {
			t.Errorf("random bias %v, want 0", v)
		}
	}
}
