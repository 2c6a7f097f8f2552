package weights

import (
	"fmt"
	"slices"

	"github.com/framepack-go/framepack/tensor"
)

// Weight is one tensor a model asks a Builder for: its full name, shape and
// dtype, and the checkpoint tensors it is made of. Most weights are one
// checkpoint tensor; a fused one (Cat) is several concatenated along axis 0.
type Weight struct {
	Name     string
	Shape    []int
	Parts    []Spec       // concatenated along axis 0; one for most weights
	DType    tensor.DType // the dtype it is made in
	Round    tensor.DType // values rounded through this dtype first (Invalid: none)
	Optional bool         // absent from the checkpoint: nil, not an error
	FP8      FP8Kind      // one half of an FP8 Linear weight (fp8.go)
}

// Bytes is the weight's storage.
func (w Weight) Bytes() int64 { return Spec{Shape: w.Shape}.Numel() * int64(w.DType.Size()) }

// Source makes the weights a Builder hands out.
type Source interface {
	// Make returns weight w, allocated with tensor.Alloc; nil with no error
	// for an optional weight that is absent, or where nothing is allocated
	// (a plan).
	Make(w Weight) (*tensor.Tensor, error)
}

// Filler is a Source that can also write a weight's values into host bytes
// (laid out in w.DType), for models that place several weights in one
// allocation.
type Filler interface {
	Source
	Fill(w Weight, dst []byte) error
}

// Builder hands a model's constructor its weights by checkpoint name, as
// candle's VarBuilder: Sub descends into a module, Get takes a tensor of a
// given shape, Opt one that may be absent, Cat a fused one. The same
// constructor run on a checkpoint loads the model, on Random makes one with
// random values, and on NewPlan lists its weights without allocating. After
// the first failure every call returns nil and Err reports the failure, so a
// constructor reads as a list of the checkpoint's names.
type Builder struct {
	src    Source
	prefix string
	dt     tensor.DType
	round  tensor.DType
	fp8    bool
	st     *builderState
}

type builderState struct {
	err     error
	held    []*tensor.Tensor
	planned []Weight // what a plan recorded
}

// NewBuilder hands out weights from src in dtype dt (Invalid: F32).
func NewBuilder(src Source, dt tensor.DType) *Builder {
	if dt == tensor.Invalid {
		dt = tensor.F32
	}
	return &Builder{src: src, dt: dt, st: &builderState{}}
}

// FromCheckpoint loads weights from ck onto be in dtype dt.
func FromCheckpoint(ck *Checkpoint, be tensor.Backend, dt tensor.DType) *Builder {
	return NewBuilder(&CheckpointSource{Ck: ck, Be: be}, dt)
}

// Random makes weights on be in dtype dt with seeded random values (see
// FillRandom): each weight's values depend only on the seed and its name.
func Random(be tensor.Backend, dt tensor.DType, seed uint64) *Builder {
	return NewBuilder(&RandomSource{Be: be, Seed: seed}, dt)
}

// NewPlan is a Builder that allocates nothing: every call records the
// weight and returns nil, so a constructor run on it lists what it reads
// (Specs, Weights).
func NewPlan() *Builder { return NewBuilder(planSource{}, tensor.F32) }

// NewPlanIn is NewPlan for a model built in dtype dt: each recorded
// Weight's DType is the one it would be made in.
func NewPlanIn(dt tensor.DType) *Builder { return NewBuilder(planSource{}, dt) }

type planSource struct{}

func (planSource) Make(Weight) (*tensor.Tensor, error) { return nil, nil }

// Name is name under the builder's prefix: the checkpoint's name for it.
func (b *Builder) Name(name string) string { return b.prefix + name }

// Sub is the builder of the module name: its names are prefixed "name.".
func (b *Builder) Sub(name string) *Builder {
	c := *b
	c.prefix = b.prefix + name + "."
	return &c
}

// F32 is a builder whose weights are float32 holding the values the
// builder's dtype rounds them to (weights a model keeps in f32 whatever its
// compute dtype).
func (b *Builder) F32() *Builder {
	c := *b
	c.round, c.dt = b.dt, tensor.F32
	return &c
}

// In is a builder whose weights are made in dtype dt.
func (b *Builder) In(dt tensor.DType) *Builder {
	c := *b
	c.dt, c.round = dt, tensor.Invalid
	return &c
}

// DType is the dtype weights are made in.
func (b *Builder) DType() tensor.DType { return b.dt }

// Get is the tensor name (under the builder's prefix) of the given shape
// (no check when shape is empty).
func (b *Builder) Get(name string, shape ...int) *tensor.Tensor {
	return b.make(b.prefix+name, shape, []Spec{{Name: b.prefix + name, Shape: shape}}, false)
}

// Opt is Get for a tensor the checkpoint may lack: nil when it does.
func (b *Builder) Opt(name string, shape ...int) *tensor.Tensor {
	return b.make(b.prefix+name, shape, []Spec{{Name: b.prefix + name, Shape: shape, Optional: true}}, true)
}

// Cat is the tensors names (rows[i] rows each, of shape rest) concatenated
// along axis 0: a fused projection (q|k|v) that one GEMM computes.
func (b *Builder) Cat(names []string, rows []int, rest ...int) *tensor.Tensor {
	if len(names) != len(rows) || len(names) == 0 {
		b.Fail("weights: Cat of %d names with %d row counts", len(names), len(rows))
		return nil
	}
	parts := make([]Spec, len(names))
	total := 0
	for i, n := range names {
		parts[i] = Spec{Name: b.prefix + n, Shape: append([]int{rows[i]}, rest...)}
		total += rows[i]
	}
	return b.make(parts[0].Name, append([]int{total}, rest...), parts, false)
}

func (b *Builder) make(name string, shape []int, parts []Spec, optional bool) *tensor.Tensor {
	return b.makeWeight(Weight{Name: name, Shape: append([]int(nil), shape...), Parts: parts, DType: b.dt, Round: b.round, Optional: optional})
}

func (b *Builder) makeFP8(name string, shape []int, parts []Spec, kind FP8Kind) *tensor.Tensor {
	return b.makeWeight(Weight{Name: name, Shape: shape, Parts: parts, DType: b.dt, FP8: kind})
}

func (b *Builder) makeWeight(w Weight) *tensor.Tensor {
	if b.st.err != nil {
		return nil
	}
	if _, ok := b.src.(planSource); ok {
		b.st.planned = append(b.st.planned, w)
		return nil
	}
	t, err := b.src.Make(w)
	if err != nil {
		b.st.err = err
		return nil
	}
	return b.Adopt(t)
}

// Adopt makes the builder responsible for freeing t (a tensor made from
// loaded ones at load time), and returns it.
func (b *Builder) Adopt(t *tensor.Tensor) *tensor.Tensor {
	if t != nil {
		b.st.held = append(b.st.held, t)
	}
	return t
}

// Free frees t, a tensor the builder made, now and forgets it (a weight
// used at load time to make another).
func (b *Builder) Free(t *tensor.Tensor) {
	if i := slices.Index(b.st.held, t); i >= 0 {
		b.st.held = slices.Delete(b.st.held, i, i+1)
	}
	tensor.Release(t)
}

// Fail records an error (the first one wins).
func (b *Builder) Fail(format string, args ...any) {
	if b.st.err == nil {
		b.st.err = fmt.Errorf(format, args...)
	}
}

// Err is the first failure, if any.
func (b *Builder) Err() error { return b.st.err }

// Weights is what a plan recorded, in the order the model asked.
func (b *Builder) Weights() []Weight { return b.st.planned }

// Specs is what a plan recorded as checkpoint tensors (a fused weight as
// its parts), in the order the model asked.
func (b *Builder) Specs() []Spec {
	var out []Spec
	for _, w := range b.st.planned {
		if w.FP8 != FP8Scales { // the codes' parts again
			out = append(out, w.Parts...)
		}
	}
	return out
}

// Held is every tensor made so far; the model frees them when it closes.
func (b *Builder) Held() []*tensor.Tensor { return b.st.held }

// Bytes is the storage of the tensors made so far.
func (b *Builder) Bytes() int64 {
	var n int64
	for _, t := range b.st.held {
		n += t.Bytes()
	}
	return n
}

// Release frees every tensor made so far.
func (b *Builder) Release() {
	for _, t := range b.st.held {
		tensor.Release(t)
	}
	b.st.held = nil
}
