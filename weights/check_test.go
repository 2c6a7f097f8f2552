package weights

import (
	"fmt"
	"strings"
	"testing"

	"github.com/framepack-go/framepack/internal/testutil/errtest"
)

// goodSpecs is what the shardedDir checkpoint holds.
var goodSpecs = []Spec{{Name: "a.weight", Shape: []int{2, 2}}, {Name: "a.bias", Shape: []int{2}}, {Name: "b", Shape: []int{4}}}

// Check and Open report each bad real-size layout with one error naming the
// file and the problem.
func TestCheck(t *testing.T) {
	if err := checkDir(t, shardedDir(t, goodIndex), goodSpecs); err != nil {
		t.Fatalf("good checkpoint: %v", err)
	}
	rows := []struct {
		name  string
		setup func(t *testing.T) string
		specs []Spec
		want  []string
	}{
		{"index names a tensor twice", func(t *testing.T) string {
			return shardedDir(t, `{"weight_map": {"a.weight": "model-00001-of-00002.safetensors",
  "b": "model-00002-of-00002.safetensors", "a.weight": "model-00002-of-00002.safetensors"}}`)
		}, goodSpecs, []string{"model.safetensors.index.json", `lists tensor "a.weight" twice`,
			"model-00001-of-00002.safetensors and in model-00002-of-00002.safetensors"}},
		{"tensor in two shards", secondShard(`{"b":{"dtype":"BF16","shape":[4],"data_offsets":[0,8]},"a.bias":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}}`, 16), goodSpecs, []string{`tensor "a.bias" is stored in two shards`, "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}},
		{"shard of the wrong dtype", secondShard(`{"b":{"dtype":"I16","shape":[4],"data_offsets":[0,8]}}`, 8), goodSpecs, []string{"model-00002-of-00002.safetensors", `tensor "b"`, "I16"}},
		{"integer shard", secondShard(`{"b":{"dtype":"I64","shape":[4],"data_offsets":[0,32]}}`, 32), goodSpecs, []string{"model-00002-of-00002.safetensors", `tensor "b" is I64, not a floating-point dtype`}},
		{"fp8 shard", secondShard(`{"b":{"dtype":"F8_E5M2","shape":[4],"data_offsets":[0,4]}}`, 4), goodSpecs, []string{"model-00002-of-00002.safetensors", `tensor "b"`, "F8_E5M2 is not supported"}},
		{"shard truncated", secondShard(`{"b":{"dtype":"BF16","shape":[4],"data_offsets":[0,8]}}`, 4), goodSpecs, []string{"model-00002-of-00002.safetensors", "truncated"}},
		{"missing tensor", func(t *testing.T) string { return shardedDir(t, goodIndex) },
			append(goodSpecs[:3:3], Spec{Name: "c", Shape: []int{1}}, Spec{Name: "d", Shape: []int{1}}), []string{`no tensor "c"`, "(and 1 more problem)"}},
		{"config asking for far more tensors than the checkpoint holds", func(t *testing.T) string { return shardedDir(t, goodIndex) },
			append(goodSpecs[:3:3], manyMissing(200000)...), []string{`no tensor "layers.0.w"`, "(and at least 199999 more problems)",
				"the config asks for 200003 tensors and the checkpoint holds 3: its config.json does not fit these weights"}},
		{"wrong shape", func(t *testing.T) string { return shardedDir(t, goodIndex) },
			[]Spec{{Name: "b", Shape: []int{2, 2}}}, []string{"model-00002-of-00002.safetensors", `"b" has shape [4], want [2 2]`}},
		{"index points to a missing shard", func(t *testing.T) string {
			return shardedDir(t, `{"weight_map": {"a.weight": "model-00001-of-00002.safetensors", "b": "model-00003-of-00003.safetensors"}}`)
		}, goodSpecs, []string{"model.safetensors.index.json", "shard model-00003-of-00003.safetensors", "missing"}},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			err := checkDir(t, r.setup(t), r.specs)
			errtest.Mentions(t, err, r.want...)
			if !strings.HasPrefix(err.Error(), "weights: ") || strings.Count(err.Error(), "weights: ") != 1 {
				t.Errorf("error %q: want one error, saying where it comes from", err)
			}
		})
	}
}

func checkDir(t *testing.T, dir string, specs []Spec) error {
	t.Helper()
	c, err := Open(dir)
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Check(specs)
}

// manyMissing is n specs that no checkpoint here holds.
func manyMissing(n int) []Spec {
	out := make([]Spec, n)
	for i := range out {
		out[i] = Spec{Name: fmt.Sprintf("layers.%d.w", i), Shape: []int{4}}
	}
	return out
}
