package hunyuan

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/framepack-go/framepack/internal/numcmp"
	"github.com/framepack-go/framepack/internal/testutil/golden"
	"github.com/framepack-go/framepack/internal/testutil/testdevice"
	"github.com/framepack-go/framepack/memory"
	"github.com/framepack-go/framepack/tensor"
)

// TestFusedKernels compares the backend's fused kernels with the op-by-op
// path on the same backend at the real model's head layout (24 heads of
// 128), batch 2, per-batch and shared RoPE tables, and row offsets into
// the joint sequence.
func TestFusedKernels(t *testing.T) {
	be := testdevice.Backend(t)
	if !tensor.NewScope(be).Fused() {
		t.Skipf("%s has no fused kernels: nothing to compare (run with %s=gpu or fake)", be.Name(), testdevice.Env)
	}
	fused, ref := kernels{true}, kernels{false}
	for _, dt := range []tensor.DType{tensor.F32, tensor.BF16} {
		t.Run(dt.String(), func(t *testing.T) {
			s := tensor.NewScope(be)
			defer s.Close()
			// The same backend op by op: the reference.
			rs := s.ChildWith(tensor.Settings{OpByOp: true})
			scopes := []*tensor.Scope{s, rs}
			r := rand.New(rand.NewPCG(1, uint64(dt)))
			host := func(lo, hi float32, shape ...int) *tensor.Tensor {
				v := make([]float32, tensor.Numel(shape))
				for i := range v {
					v[i] = lo + (hi-lo)*r.Float32()
				}
				return tensor.FromFloat32(v, shape...)
			}
			rnd := func(lo, hi float32, shape ...int) *tensor.Tensor { return s.Cast(s.To(host(lo, hi, shape...)), dt) }
			// bf16 results may differ in the last bit where an f32
			// statistic rounds differently.
			tol := 1e-6
			if dt == tensor.BF16 {
				tol = 3e-3
			}
			cmp := func(name string, got, want *tensor.Tensor) {
				t.Helper()
				g, w := tensor.Float32s(got), tensor.Float32s(want)
				r := numcmp.RelL2(g, w)
				t.Logf("%s: rel_l2 %.3g", name, r)
				if r > tol || math.IsNaN(r) {
					t.Errorf("%s: fused vs op by op rel_l2 %.3g > %g", name, r, tol)
				}
			}
			const b, l, h, dh = 2, 37, 24, 128
			d := h * dh
			x, y := rnd(-2, 2, b, l, d), rnd(-1, 1, b, l, d)
			shift, scale := rnd(-1, 1, b, 1, d), rnd(-1, 1, b, 1, d)
			cmp("layer_norm_modulate", fused.lnModulate(s, x, shift, scale), ref.lnModulate(rs, x, shift, scale))
			bias := rnd(-0.5, 0.5, d)
			cmp("gated_add", fused.gatedAdd(s, x, y, nil, scale), ref.gatedAdd(rs, x, y, nil, scale))
			cmp("gated_add+bias", fused.gatedAdd(s, x, y, bias, scale), ref.gatedAdd(rs, x, y, bias, scale))

			const ls, off = 31, 6
			src := rnd(-3, 3, b, ls, 3*d+64)
			srcBias := rnd(-0.5, 0.5, 3*d+64)
			nq, nk := rmsNorm{rnd(0.5, 1.5, dh)}, rmsNorm{rnd(0.5, 1.5, dh)}
			for _, rows := range []int{0, 1, b} {
				bias := srcBias
				if rows == 1 {
					bias = nil
				}
				var cos, sin *tensor.Tensor
				if rows > 0 {
					cos, sin = s.To(host(-1, 1, rows, ls+off, dh)), s.To(host(-1, 1, rows, ls+off, dh))
				}
				var outs [2][3]*tensor.Tensor
				for i, k := range []kernels{fused, ref} {
					for j := range outs[i] {
						outs[i][j] = s.Zeros(dt, b, ls+off, h, dh)
					}
					k.qkvInto(scopes[i], outs[i][0], outs[i][1], outs[i][2], src, bias, off, &nq, &nk, cos, sin)
				}
				for j, name := range []string{"q", "k", "v"} {
					cmp("qk_norm_rope "+name, outs[0][j], outs[1][j])
				}
			}

			g, gb := rnd(-4, 4, b, l, 7*64), rnd(-0.5, 0.5, 7*64)
			for _, bias := range []*tensor.Tensor{nil, gb} {
				var cats [2]*tensor.Tensor
				for i, k := range []kernels{fused, ref} {
					cats[i] = s.Zeros(dt, b, l, 5*64)
					k.geluInto(scopes[i], cats[i], 64, g, bias, 3*64, 4*64)
				}
				cmp("gelu columns", cats[0], cats[1])
				cmp("gelu in place", fused.geluInPlace(s, s.Clone(g), bias), ref.geluInPlace(rs, g, bias))
			}
		})
	}
}

// TestStreamedBudget streams the golden model's blocks under a memory
// budget that holds the rest of the model, its activations, two streamed
// blocks and one kept block: the output must equal the resident model's,
// the peak stay under the cap and below the resident model's.
func TestStreamedBudget(t *testing.T) {
	c := golden.Cases(t, "transformer")[0]
	be := testdevice.Backend(t)
	in := caseInputs(c)

	mb0 := memory.Budgeted(be, memory.Budget{Device: "test", Cap: 1 << 40})
	m0, err := Load(c.ModelDir, mb0, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := forward(t, m0, in)
	resident, _ := m0.WeightBytes()
	peak0 := mb0.Stats().Peak
	var blocks, maxBlock int64
	for _, a := range m0.arenas {
		blocks += a.size
		maxBlock = max(maxBlock, a.size)
	}
	m0.Close()
	act := peak0 - resident

	preserve := act + 2*maxBlock + act/2
	cp := resident - blocks + maxBlock + preserve
	mb := memory.Budgeted(be, memory.Budget{Device: "test", Cap: cp, Preserve: preserve})
	m, err := Load(c.ModelDir, mb, Options{HostBlocks: true, KeepBlockBytes: AutoKeep})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	n, streamed := m.numBlocks(), m.StreamedBlocks()
	if streamed == 0 || streamed == n {
		t.Errorf("%d of %d blocks stream; want some kept and some streamed", streamed, n)
	}
	got := forward(t, m, in)
	if r := numcmp.RelL2(got.Float32s(), want.Float32s()); r > 1e-6 || math.IsNaN(r) {
		t.Errorf("streamed vs resident: rel_l2 %.3g", r)
	} else {
		t.Logf("streamed vs resident: rel_l2 %.3g (%d of %d blocks streamed)", r, streamed, n)
	}
	st := mb.Stats()
	t.Logf("peak %d B under a %d B cap (resident model: %d B)", st.Peak, cp, peak0)
	if st.Peak > cp || st.Peak >= peak0 {
		t.Errorf("peak %d B: want at most the cap %d B and below the resident %d B", st.Peak, cp, peak0)
	}
	c.Compare(t, "output", got)
}
