// Package golden reads the golden cases (inputs and outputs of the PyTorch
// reference, see testdata/golden/README.md) and compares results with them.
// It is for tests only.
package golden

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/framepack-go/framepack/convchain"
	"github.com/framepack-go/framepack/internal/testutil/errtest"
	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/weights"
)

// EnvDir names the environment variable that points at another folder of
// cases; by default they are read from <module root>/testdata/golden.
const EnvDir = "FRAMEPACK_GOLDEN_DIR"

// Limit is what a comparison must meet; a Has* flag says whether the ceiling
// is set.
type Limit struct {
	RelL2     float64
	HasRelL2  bool
	MaxAbs    float64
	HasMaxAbs bool
}

// Tolerance is a case's "tolerance": ceilings for every tensor ("rel_l2",
// "max_abs") and for single tensors ("<tensor>_rel_l2", "<tensor>_max_abs").
type Tolerance struct {
	Limit
	Tensor map[string]Limit
}

// For is the limit for one tensor: its own ceilings where it has them, the
// case's otherwise.
func (t Tolerance) For(name string) Limit {
	l := t.Limit
	if o, ok := t.Tensor[name]; ok {
		if o.HasRelL2 {
			l.RelL2, l.HasRelL2 = o.RelL2, true
		}
		if o.HasMaxAbs {
			l.MaxAbs, l.HasMaxAbs = o.MaxAbs, true
		}
	}
	return l
}

// TensorSpec is a tensor's entry in case.json.
type TensorSpec struct {
	DType string `json:"dtype"`
	Shape []int  `json:"shape"`
}

// Case is one golden case.
type Case struct {
	Name      string // folder name
	Dir       string // absolute path of the folder
	Component string
	ModelDir  string // absolute path of the model folder; "" when the case has none
	Tol       Tolerance
	Tensors   map[string]TensorSpec
	Raw       map[string]json.RawMessage // all of case.json

	once sync.Once
	io   *weights.Checkpoint
	err  error

	// conv2dBase is the conv2d tier's convolutions in this process when
	// the case was read: a comparison after more also logs "conv3d as
	// conv2d: …".
	conv2dBase int64
}

// Dir is the folder of golden cases: $FRAMEPACK_GOLDEN_DIR, or testdata/golden
// under the module root (found by walking up from the working directory to
// go.mod).
func Dir() (string, error) {
	if d := os.Getenv(EnvDir); d != "" {
		return filepath.Abs(d)
	}
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "testdata", "golden"), nil
}

// ModuleRoot is the folder of go.mod, found by walking up from the working
// directory (a test's is its package's folder; a test binary built with
// -trimpath knows no source paths).
func ModuleRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no go.mod above %s", wd)
		}
	}
}

// Cases returns every case of a component, sorted by name. The test is
// skipped when there is none; a case.json that cannot be read fails it.
func Cases(t testing.TB, component string) []*Case {
	t.Helper()
	dir, err := Dir()
	if err != nil {
		t.Skipf("golden: no cases: %v", err)
		return nil
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Skipf("golden: no cases: %v", err)
		return nil
	}
	var cases []*Case
	for _, e := range ents {
		p := filepath.Join(dir, e.Name(), "case.json")
		if !e.IsDir() {
			continue
		}
		if _, err := os.Stat(p); err != nil {
			continue
		}
		c, err := load(dir, e.Name())
		if err != nil {
			t.Fatalf("golden: %v", err)
			return nil
		}
		if c.Component == component {
			cases = append(cases, c)
		}
	}
	if len(cases) == 0 {
		t.Skipf("golden: no case with component %q in %s", component, dir)
		return nil
	}
	sort.Slice(cases, func(i, j int) bool { return cases[i].Name < cases[j].Name })
	t.Cleanup(func() {
		for _, c := range cases {
			if c.io != nil {
				c.io.Close()
			}
		}
	})
	return cases
}

// load reads root/name/case.json.
func load(root, name string) (*Case, error) {
	dir := filepath.Join(root, name)
	p := filepath.Join(dir, "case.json")
	raw, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	c := &Case{Name: name, Dir: dir, conv2dBase: convchain.TierConvs(convchain.Conv2dTierName)}
	if err := json.Unmarshal(raw, &c.Raw); err != nil {
		return nil, fmt.Errorf("%s: %v", p, err)
	}
	var js struct {
		Component string                `json:"component"`
		Model     string                `json:"model"`
		Tensors   map[string]TensorSpec `json:"tensors"`
		Tolerance map[string]float64    `json:"tolerance"`
	}
	if err := json.Unmarshal(raw, &js); err != nil {
		return nil, fmt.Errorf("%s: %v", p, err)
	}
	if js.Component == "" {
		return nil, fmt.Errorf("%s: no component", p)
	}
	c.Component, c.Tensors = js.Component, js.Tensors
	if js.Model != "" {
		c.ModelDir = filepath.Join(root, filepath.FromSlash(js.Model))
	}
	for k, v := range js.Tolerance {
		if err := c.Tol.set(k, v, c.Tensors); err != nil {
			return nil, fmt.Errorf("%s: tolerance: %v", p, err)
		}
	}
	return c, nil
}

func (t *Tolerance) set(key string, v float64, tensors map[string]TensorSpec) error {
	if v < 0 || math.IsNaN(v) {
		return fmt.Errorf("%s = %v", key, v)
	}
	setIn := func(l *Limit, kind string) bool {
		switch kind {
		case "rel_l2":
			l.RelL2, l.HasRelL2 = v, true
		case "max_abs":
			l.MaxAbs, l.HasMaxAbs = v, true
		default:
			return false
		}
		return true
	}
	if setIn(&t.Limit, key) {
		return nil
	}
	for _, kind := range []string{"rel_l2", "max_abs"} {
		if name, ok := strings.CutSuffix(key, "_"+kind); ok {
			if _, known := tensors[name]; !known {
				return fmt.Errorf("%q names no tensor of the case", key)
			}
			if t.Tensor == nil {
				t.Tensor = map[string]Limit{}
			}
			l := t.Tensor[name]
			setIn(&l, kind)
			t.Tensor[name] = l
			return nil
		}
	}
	return fmt.Errorf("unknown key %q", key)
}

// Tensor returns a tensor of io.safetensors as a host tensor in its stored
// dtype (f32, i64, u8). It is a copy the test may modify. A missing tensor
// panics: a golden test cannot go on without its data.
func (c *Case) Tensor(name string) *tensor.Tensor {
	t, err := c.tensor(name)
	if err != nil {
		panic(fmt.Sprintf("golden %s: %v", c.Name, err))
	}
	return t
}

func (c *Case) tensor(name string) (*tensor.Tensor, error) {
	c.once.Do(func() { c.io, c.err = weights.OpenFile(filepath.Join(c.Dir, "io.safetensors")) })
	if c.err != nil {
		return nil, c.err
	}
	h, err := c.io.Host(name)
	if err != nil {
		return nil, err
	}
	if spec, ok := c.Tensors[name]; ok && !slices.Equal(spec.Shape, h.Shape()) {
		return nil, fmt.Errorf("tensor %q has shape %v in io.safetensors but %v in case.json", name, h.Shape(), spec.Shape)
	}
	out := tensor.New(h.DType(), h.Shape()...)
	copy(out.HostBytes(), h.HostBytes())
	return out, nil
}

// Param decodes case.json's entry name into v; a missing or ill-typed entry
// panics.
func (c *Case) Param(name string, v any) {
	raw, ok := c.Raw[name]
	if !ok {
		panic(fmt.Sprintf("golden %s: case.json has no %q", c.Name, name))
	}
	if err := json.Unmarshal(raw, v); err != nil {
		panic(fmt.Sprintf("golden %s: case.json %q: %v", c.Name, name, err))
	}
}

// EnableTiling is a VAE case's "tiling": the keyword arguments of
// diffusers' enable_tiling, in sample pixels.
type EnableTiling struct {
	TileHeight   int `json:"tile_sample_min_height"`
	TileWidth    int `json:"tile_sample_min_width"`
	StrideHeight int `json:"tile_sample_stride_height"`
	StrideWidth  int `json:"tile_sample_stride_width"`
}

// Tiling is the case's "tiling" (it panics when there is none, see Param).
func (c *Case) Tiling() EnableTiling {
	var p EnableTiling
	c.Param("tiling", &p)
	return p
}

// Compare checks got against the reference tensor name: same shape, every
// value finite, and rel_l2 = ‖got − ref‖₂ / ‖ref‖₂ (and max_abs where the
// tolerance has one) within the case's tolerance, computed in float64. It
// logs "golden <case>: <tensor> rel_l2=<value>".
func (c *Case) Compare(t testing.TB, name string, got *tensor.Tensor) {
	t.Helper()
	if err := c.compare(t, name, got, c.Tol.For(name)); err != nil {
		t.Errorf("golden %s: %s: %v", c.Name, name, err)
	}
}

// CompareWith is Compare with a limit other than the case's.
func (c *Case) CompareWith(t testing.TB, name string, got *tensor.Tensor, lim Limit) {
	t.Helper()
	if err := c.compare(t, name, got, lim); err != nil {
		t.Errorf("golden %s: %s: %v", c.Name, name, err)
	}
}

func (c *Case) compare(t testing.TB, name string, got *tensor.Tensor, lim Limit) error {
	t.Helper()
	if !lim.HasRelL2 && !lim.HasMaxAbs {
		return errors.New("no tolerance applies")
	}
	if got == nil {
		return errors.New("got a nil tensor")
	}
	ref, err := c.tensor(name)
	if err != nil {
		return err
	}
	return c.compareRef(t, name, got, ref, lim)
}

// CompareTo checks got against ref, a tensor derived from the case's
// reference (a slice of it, say), with the tolerance of the reference name.
func (c *Case) CompareTo(t testing.TB, name string, got, ref *tensor.Tensor) {
	t.Helper()
	if err := c.compareRef(t, name, got, ref, c.Tol.For(name)); err != nil {
		t.Errorf("golden %s: %s: %v", c.Name, name, err)
	}
}

func (c *Case) compareRef(t testing.TB, name string, got, ref *tensor.Tensor, lim Limit) error {
	t.Helper()
	if !lim.HasRelL2 && !lim.HasMaxAbs {
		return errors.New("no tolerance applies")
	}
	if got == nil {
		return errors.New("got a nil tensor")
	}
	var host *tensor.Tensor
	if err := tensor.Catch(func() { host = tensor.ToHost(got) }); err != nil {
		return err
	}
	if !slices.Equal(host.Shape(), ref.Shape()) {
		return fmt.Errorf("shape %v, want %v", host.Shape(), ref.Shape())
	}
	g, err := float64s(host)
	if err != nil {
		return err
	}
	r, err := float64s(ref)
	if err != nil {
		return err
	}
	bad, first := 0, -1
	for i, v := range g {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			if first < 0 {
				first = i
			}
			bad++
		}
	}
	if bad > 0 {
		return fmt.Errorf("%d of %d values are NaN or Inf (the first at flat index %d: %v)", bad, len(g), first, g[first])
	}
	var diff2, ref2, maxAbs float64
	for i := range g {
		d := g[i] - r[i]
		diff2 += d * d
		ref2 += r[i] * r[i]
		maxAbs = max(maxAbs, math.Abs(d))
	}
	rel := math.Sqrt(diff2) / math.Sqrt(ref2)
	if ref2 == 0 {
		rel = 0
		if diff2 > 0 {
			rel = math.Inf(1)
		}
	}
	t.Logf("golden %s: %s rel_l2=%.3g", c.Name, name, rel)
	if convchain.TierConvs(convchain.Conv2dTierName) > c.conv2dBase {
		t.Logf("conv3d as conv2d: golden %s %s rel_l2 %.3g", c.Name, name, rel)
	}
	if lim.HasMaxAbs {
		t.Logf("golden %s: %s max_abs=%.3g", c.Name, name, maxAbs)
	}
	var fails []string
	if lim.HasRelL2 && !(rel <= lim.RelL2) {
		fails = append(fails, fmt.Sprintf("rel_l2 %.3g above tolerance %.3g", rel, lim.RelL2))
	}
	if lim.HasMaxAbs && !(maxAbs <= lim.MaxAbs) {
		fails = append(fails, fmt.Sprintf("max_abs %.3g above tolerance %.3g", maxAbs, lim.MaxAbs))
	}
	if len(fails) > 0 {
		return errors.New(strings.Join(fails, "; "))
	}
	return nil
}

// float64s widens a host tensor of any dtype (ids and images included).
func float64s(t *tensor.Tensor) ([]float64, error) {
	out := make([]float64, t.Numel())
	switch t.DType() {
	case tensor.I64:
		for i, v := range t.Int64s() {
			out[i] = float64(v)
		}
	case tensor.F64:
		b := t.HostBytes()
		for i := range out {
			out[i] = math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
		}
	case tensor.F32, tensor.F16, tensor.BF16, tensor.I32, tensor.U8, tensor.Bool:
		for i, v := range t.ToFloat32() {
			out[i] = float64(v)
		}
	default:
		return nil, fmt.Errorf("cannot compare a %s tensor", t.DType())
	}
	return out, nil
}

// Run runs f as a subtest, named for the case, for each case of component
// (see Cases).
func Run(t *testing.T, component string, f func(t *testing.T, c *Case)) {
	t.Helper()
	for _, c := range Cases(t, component) {
		t.Run(c.Name, func(t *testing.T) { f(t, c) })
	}
}

// Model loads the case's model (from c.ModelDir) with load, failing the
// test when it cannot, and closes it when the test ends.
func Model[M interface{ Close() }](t testing.TB, c *Case, load func(dir string) (M, error)) M {
	t.Helper()
	m, err := load(c.ModelDir)
	return errtest.Closing(t, m, err)
}

// Load is Model with a loader that takes the backend and one more argument
// (a dtype, load options): load(dir, be, o).
func Load[M interface{ Close() }, O any](t testing.TB, c *Case, load func(string, tensor.Backend, O) (M, error), be tensor.Backend, o O) M {
	t.Helper()
	return Model(t, c, func(dir string) (M, error) { return load(dir, be, o) })
}
