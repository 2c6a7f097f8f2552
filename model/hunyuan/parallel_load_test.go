package hunyuan

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/framepack-go/framepack/internal/testutil/golden"
	"github.com/framepack-go/framepack/internal/testutil/loadtest"
	"github.com/framepack-go/framepack/lora"
	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/weights"
)

// Load reads the weights in parallel (the globals loaded ahead of their
// requests, every block's weights queued on one Loader); they are the
// sequential path's, byte for byte: the globals as a Builder makes them one
// at a time, each block weight as Fill writes it. Resident blocks, blocks in
// (pinned) host memory, FP8 weights quantized at load and LoRA-merged ones
// (both made whole), from an f32 file and from bf16 shards.
func TestLoadMatchesSequential(t *testing.T) {
	c := golden.Cases(t, "transformer")[0]
	sharded := filepath.Join(filepath.Dir(c.ModelDir), "transformer_bf16_sharded")
	lc := golden.Cases(t, "transformer_lora")[0]
	var files []string
	lc.Param("lora_files", &files)
	cfg, err := ReadConfig(c.ModelDir)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := Plan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	set, err := lora.Resolve([]lora.File{{Path: filepath.Join(lc.Dir, files[0]), Scale: 0.7}}, plan)
	if err != nil {
		t.Fatal(err)
	}
	var blockBytes int64
	for _, s := range plan {
		if strings.HasPrefix(s.Name, "single_transformer_blocks.") || strings.HasPrefix(s.Name, "transformer_blocks.") {
			blockBytes += s.Numel() * 2
		}
	}
	cases := []struct {
		name string
		dir  string
		opts Options
	}{
		{"f32-file/bf16/resident", c.ModelDir, Options{DType: tensor.BF16}},
		{"f32-file/f32/host-blocks", c.ModelDir, Options{DType: tensor.F32, HostBlocks: true}},
		{"bf16-shards/bf16/half-kept", sharded, Options{DType: tensor.BF16, HostBlocks: true, KeepBlockBytes: blockBytes / 4}},
		{"bf16-shards/f16/resident", sharded, Options{DType: tensor.F16}},
		{"f32-file/fp8/host-blocks", c.ModelDir, Options{DType: tensor.BF16, FP8: true, HostBlocks: true, KeepBlockBytes: blockBytes / 8}},
		{"lora/bf16/host-blocks", lc.ModelDir, Options{DType: tensor.BF16, LoRA: set, HostBlocks: true, KeepBlockBytes: blockBytes / 4}},
	}
	for name, be := range loadtest.Backends(t) {
		for _, tc := range cases {
			t.Run(fmt.Sprintf("%s/%s", name, tc.name), func(t *testing.T) {
				m, err := Load(tc.dir, be, tc.opts)
				if err != nil {
					t.Fatal(err)
				}
				defer m.Close()
				ck, err := weights.Open(tc.dir)
				if err != nil {
					t.Fatal(err)
				}
				defer ck.Close()
				var src weights.Filler = &weights.CheckpointSource{Ck: ck, Be: be}
				if tc.opts.LoRA.Len() > 0 {
					src = &lora.Source{Inner: src, Be: be, Set: tc.opts.LoRA}
				}
				seq := weights.NewBuilder(src, m.dt)
				(&Model{cfg: m.cfg, dt: m.dt, opts: m.opts}).loadGlobals(seq)
				if err := seq.Err(); err != nil {
					t.Fatal(err)
				}
				defer seq.Release()
				loadtest.Same(t, m.global.Held(), seq.Held())

				var resident, host int
				for i, a := range m.arenas {
					var data []byte
					switch {
					case a.dev != nil:
						data = loadtest.Bytes(t, a.dev)
						resident++
					case a.host != nil:
						data = a.host.Data()
						host++
					default:
						t.Fatalf("block %d has no storage", i)
					}
					for j, w := range a.ws {
						want := make([]byte, w.Bytes())
						if err := src.Fill(w, want); err != nil {
							t.Fatal(err)
						}
						if !slices.Equal(a.slice(data, j), want) {
							t.Fatalf("block %d weight %s differs", i, w.Name)
						}
					}
				}
				if tc.opts.HostBlocks && (host == 0 || tc.opts.KeepBlockBytes > 0 && resident == 0) {
					t.Errorf("%d resident blocks, %d in host memory: the case does not test both", resident, host)
				}
			})
		}
	}
}
