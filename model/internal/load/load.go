// Package load reads a model's weights from a checkpoint onto a backend,
// collecting the first error so model constructors read as a list of the
// checkpoint's names.
package load

import (
	"fmt"

	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/weights"
)

// Loader loads tensors by name in one dtype. After the first failure every
// further call returns nil and Err reports that failure.
type Loader struct {
	ck     *weights.Checkpoint
	be     tensor.Backend
	dt     tensor.DType
	Prefix string // prepended to every name
	held   []*tensor.Tensor
	err    error

	plan  bool           // record names and shapes, load nothing
	specs []weights.Spec // what a plan recorded
}

// New starts loading from ck onto be in dtype dt.
func New(ck *weights.Checkpoint, be tensor.Backend, dt tensor.DType) *Loader {
	return &Loader{ck: ck, be: be, dt: dt}
}

// NewPlan is a Loader that loads nothing: every call records the tensor's
// name and shape and returns nil, so running a model's constructor on it
// lists the weights the model reads (Specs) without allocating them.
func NewPlan() *Loader { return &Loader{plan: true} }

// Specs is what a plan recorded, in the order the model asked.
func (l *Loader) Specs() []weights.Spec { return l.specs }

// DType is the dtype tensors are loaded in.
func (l *Loader) DType() tensor.DType { return l.dt }

// T loads name with the given shape (no check when shape is empty).
func (l *Loader) T(name string, shape ...int) *tensor.Tensor {
	return l.As(name, l.dt, shape...)
}

// As loads name in dtype dt.
func (l *Loader) As(name string, dt tensor.DType, shape ...int) *tensor.Tensor {
	if l.err != nil {
		return nil
	}
	if l.plan {
		l.specs = append(l.specs, weights.Spec{Name: l.Prefix + name, Shape: append([]int(nil), shape...)})
		return nil
	}
	t, err := l.ck.Load(l.be, l.Prefix+name, dt, shape...)
	if err != nil {
		l.err = err
		return nil
	}
	l.held = append(l.held, t)
	return t
}

// Opt loads name if the checkpoint has it, else returns nil.
func (l *Loader) Opt(name string, shape ...int) *tensor.Tensor {
	if l.err != nil || l.plan || !l.ck.Has(l.Prefix+name) {
		return nil
	}
	return l.T(name, shape...)
}

// Adopt makes the loader responsible for freeing t (tensors made from loaded
// ones at load time).
func (l *Loader) Adopt(t *tensor.Tensor) *tensor.Tensor {
	if t != nil {
		l.held = append(l.held, t)
	}
	return t
}

// Fail records an error (the first one wins).
func (l *Loader) Fail(format string, args ...any) {
	if l.err == nil {
		l.err = fmt.Errorf(format, args...)
	}
}

// Err is the first failure, if any.
func (l *Loader) Err() error { return l.err }

// Held is every tensor loaded so far; the model frees them when it closes.
func (l *Loader) Held() []*tensor.Tensor { return l.held }

// Bytes is the storage held by the loaded tensors.
func (l *Loader) Bytes() int64 {
	var n int64
	for _, t := range l.held {
		n += t.Bytes()
	}
	return n
}

// Release frees every loaded tensor.
func (l *Loader) Release() {
	for _, t := range l.held {
		tensor.Release(t)
	}
	l.held = nil
}
