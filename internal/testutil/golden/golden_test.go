package golden

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/weights"
)

// fakeTB records what a test helper reports instead of failing the real
// test. FailNow and SkipNow end the calling goroutine, as in testing.
type fakeTB struct {
	testing.TB // the real test, for everything not recorded
	logs       []string
	errs       []string
	skipped    bool
	failed     bool
}

func (f *fakeTB) Helper()                 {}
func (f *fakeTB) Logf(s string, a ...any) { f.logs = append(f.logs, fmt.Sprintf(s, a...)) }
func (f *fakeTB) Log(a ...any)            { f.logs = append(f.logs, fmt.Sprint(a...)) }
func (f *fakeTB) Errorf(s string, a ...any) {
	f.errs = append(f.errs, fmt.Sprintf(s, a...))
	f.failed = true
}
func (f *fakeTB) Error(a ...any)            { f.errs = append(f.errs, fmt.Sprint(a...)); f.failed = true }
func (f *fakeTB) Fail()                     { f.failed = true }
func (f *fakeTB) Failed() bool              { return f.failed }
func (f *fakeTB) FailNow()                  { f.failed = true; runtime.Goexit() }
func (f *fakeTB) Fatalf(s string, a ...any) { f.Errorf(s, a...); f.FailNow() }
func (f *fakeTB) Fatal(a ...any)            { f.Error(a...); f.FailNow() }
func (f *fakeTB) SkipNow()                  { f.skipped = true; runtime.Goexit() }
func (f *fakeTB) Skipf(s string, a ...any)  { f.Logf(s, a...); f.SkipNow() }
func (f *fakeTB) Skip(a ...any)             { f.Log(a...); f.SkipNow() }
func (f *fakeTB) Skipped() bool             { return f.skipped }

// run calls fn with a fake TB on its own goroutine (so FailNow can end it).
func run(t *testing.T, fn func(tb testing.TB)) *fakeTB {
	f := &fakeTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	<-done
	return f
}

// writeCase makes a golden folder with one case "synthetic" of component
// "unit": tensors ref (f32 2×3), ids (i64 2) and img (u8 2×2).
func writeCase(t *testing.T, tolerance string) string {
	root := t.TempDir()
	dir := filepath.Join(root, "synthetic")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	caseJSON := `{"component": "unit", "model": "models/tiny", "about": "test", "steps": 7,
	"tensors": {"ref": {"dtype": "float32", "shape": [2, 3]}, "ids": {"dtype": "int64", "shape": [2]},
	            "img": {"dtype": "uint8", "shape": [2, 2]}},
	"tolerance": ` + tolerance + `}`
	if err := os.WriteFile(filepath.Join(dir, "case.json"), []byte(caseJSON), 0o644); err != nil {
		t.Fatal(err)
	}
	img, _ := tensor.FromBytes(tensor.U8, []byte{0, 10, 200, 255}, 2, 2)
	err := weights.Save(filepath.Join(dir, "io.safetensors"), map[string]*tensor.Tensor{
		"ref": tensor.FromFloat32([]float32{1, 2, 3, 4, 5, 6}, 2, 3),
		"ids": tensor.FromInt64([]int64{7, 9}, 2),
		"img": img,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Another component's case, which Cases("unit") must leave out.
	other := filepath.Join(root, "other")
	os.MkdirAll(other, 0o755)
	os.WriteFile(filepath.Join(other, "case.json"), []byte(`{"component": "else", "tensors": {}, "tolerance": {"rel_l2": 1}}`), 0o644)
	return root
}

func TestSyntheticCase(t *testing.T) {
	root := writeCase(t, `{"rel_l2": 1e-3, "img_max_abs": 0}`)
	t.Setenv(EnvDir, root)
	cases := Cases(t, "unit")
	if len(cases) != 1 {
		t.Fatalf("%d cases, want 1", len(cases))
	}
	c := cases[0]
	if c.Name != "synthetic" || c.Component != "unit" || c.ModelDir != filepath.Join(root, "models", "tiny") {
		t.Fatalf("case %+v", c)
	}
	var steps int
	c.Param("steps", &steps)
	if steps != 7 {
		t.Fatalf("steps = %d", steps)
	}
	if l := c.Tol.For("img"); !l.HasMaxAbs || l.MaxAbs != 0 || !l.HasRelL2 {
		t.Fatalf("img limit %+v", l)
	}
	if l := c.Tol.For("ref"); l.HasMaxAbs || l.RelL2 != 1e-3 {
		t.Fatalf("ref limit %+v", l)
	}
	if ids := c.Tensor("ids"); ids.DType() != tensor.I64 || ids.Int64s()[1] != 9 {
		t.Fatalf("ids %v %v", ids, ids.Int64s())
	}

	// A match: within 1e-3 (rel_l2 of this perturbation is about 1e-4).
	f := run(t, func(tb testing.TB) {
		c.Compare(tb, "ref", tensor.FromFloat32([]float32{1, 2, 3, 4, 5, 6.001}, 2, 3))
		c.Compare(tb, "ids", tensor.FromInt64([]int64{7, 9}, 2))
		img, _ := tensor.FromBytes(tensor.U8, []byte{0, 10, 200, 255}, 2, 2)
		c.Compare(tb, "img", img)
	})
	if f.failed {
		t.Fatalf("matching tensors failed: %v", f.errs)
	}
	if len(f.logs) < 1 || !strings.HasPrefix(f.logs[0], "golden synthetic: ref rel_l2=") {
		t.Fatalf("logs %q", f.logs)
	}

	mismatches := []struct {
		name, tensor string
		got          *tensor.Tensor
		want         string
	}{
		{"values", "ref", tensor.FromFloat32([]float32{1, 2, 3, 4, 5, 7}, 2, 3), "above tolerance"},
		{"shape", "ref", tensor.FromFloat32([]float32{1, 2, 3, 4, 5, 6}, 3, 2), "shape [3 2], want [2 3]"},
		{"nan", "ref", tensor.FromFloat32([]float32{1, 2, 3, float32(nan()), 5, 6}, 2, 3), "NaN or Inf"},
		{"ids", "ids", tensor.FromInt64([]int64{7, 8}, 2), "above tolerance"},
		{"img", "img", u8(0, 10, 201, 255), "max_abs 1 above tolerance 0"},
		{"missing", "nope", tensor.FromFloat32([]float32{1}, 1), `no tensor "nope"`},
	}
	for _, m := range mismatches {
		f := run(t, func(tb testing.TB) { c.Compare(tb, m.tensor, m.got) })
		if !f.failed || len(f.errs) != 1 || !strings.Contains(f.errs[0], m.want) {
			t.Errorf("%s: failed=%v errs=%q, want one error containing %q", m.name, f.failed, f.errs, m.want)
		}
	}
}

func nan() float64 { var z float64; return z / z }

func u8(v ...byte) *tensor.Tensor {
	t, _ := tensor.FromBytes(tensor.U8, v, len(v)/2, 2)
	return t
}

func TestCasesSkipsWithoutMatch(t *testing.T) {
	t.Setenv(EnvDir, writeCase(t, `{"rel_l2": 1e-3}`))
	f := run(t, func(tb testing.TB) { Cases(tb, "no.such.component") })
	if !f.skipped || f.failed {
		t.Fatalf("skipped=%v failed=%v", f.skipped, f.failed)
	}
	t.Setenv(EnvDir, filepath.Join(t.TempDir(), "absent"))
	f = run(t, func(tb testing.TB) { Cases(tb, "unit") })
	if !f.skipped {
		t.Fatal("a missing folder does not skip")
	}
}

func TestBadTolerance(t *testing.T) {
	for _, tol := range []string{`{"rel_l3": 1}`, `{"nope_max_abs": 0}`, `{"rel_l2": -1}`} {
		t.Setenv(EnvDir, writeCase(t, tol))
		f := run(t, func(tb testing.TB) { Cases(tb, "unit") })
		if !f.failed {
			t.Errorf("tolerance %s accepted", tol)
		}
	}
	// A tensor with no ceiling at all cannot pass.
	t.Setenv(EnvDir, writeCase(t, `{"img_max_abs": 0}`))
	c := Cases(t, "unit")[0]
	f := run(t, func(tb testing.TB) { c.Compare(tb, "ref", c.Tensor("ref")) })
	if !f.failed {
		t.Error("a comparison without tolerance passed")
	}
}

// The real cases: every one is found, readable, and equal to itself.
func TestRealCases(t *testing.T) {
	for _, comp := range []string{"vae.decode", "transformer", "sampler", "rng", "preprocess"} {
		cases := Cases(t, comp)
		for _, c := range cases {
			if c.ModelDir != "" {
				if _, err := os.Stat(c.ModelDir); err != nil {
					t.Errorf("%s: model: %v", c.Name, err)
				}
			}
			for name, spec := range c.Tensors {
				got := c.Tensor(name)
				if fmt.Sprint(got.Shape()) != fmt.Sprint(spec.Shape) {
					t.Errorf("%s: %s shape %v, case.json %v", c.Name, name, got.Shape(), spec.Shape)
				}
				f := run(t, func(tb testing.TB) { c.Compare(tb, name, got) })
				if f.failed {
					t.Errorf("%s: %s differs from itself: %v", c.Name, name, f.errs)
				}
			}
		}
	}
	if n := len(Cases(t, "vae.decode")); n != 2 {
		t.Errorf("%d vae.decode cases, want 2", n)
	}
}
