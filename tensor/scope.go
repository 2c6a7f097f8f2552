package tensor

import (
	"fmt"
	"sync"
)

// Scope allocates op results on one backend and frees, when it closes,
// everything it allocated that was not kept. Scopes nest: Keep moves a
// tensor's storage to the parent scope. A Scope may be used by one goroutine
// at a time.
type Scope struct {
	be     Backend
	parent *Scope
	mu     sync.Mutex
	owned  map[Buffer]struct{}
	closed bool
	st     Settings // the backend's (WithSettings), found once per root
}

// HostBacked is implemented by backends whose buffers are *HostBuffer, so
// host tensors are usable without a copy.
type HostBacked interface{ HostBacked() bool }

// NewScope starts a root scope on be.
func NewScope(be Backend) *Scope {
	return &Scope{be: be, owned: map[Buffer]struct{}{}, st: settingsOf(be)}
}

// Backend is the scope's backend.
func (s *Scope) Backend() Backend { return s.be }

// Child starts a nested scope on the same backend.
func (s *Scope) Child() *Scope {
	return &Scope{be: s.be, parent: s, owned: map[Buffer]struct{}{}, st: s.st}
}

// Close frees every buffer still owned by the scope.
func (s *Scope) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for b := range s.owned {
		s.be.Free(b)
	}
	s.owned = nil
	s.closed = true
}

// Keep hands the storage of ts to the parent scope (or, for a root scope,
// to the caller, who frees it with Release) so it outlives Close.
func (s *Scope) Keep(ts ...*Tensor) {
	for _, t := range ts {
		if t != nil && s.disown(t) && s.parent != nil {
			s.parent.adopt(t.buf)
		}
	}
}

// disown takes t's storage out of the scope's, reporting whether the scope
// held it.
func (s *Scope) disown(t *Tensor) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, mine := s.owned[t.buf]
	delete(s.owned, t.buf)
	return mine
}

// Free releases the storage of ts now. Views of the same storage become
// invalid.
func (s *Scope) Free(ts ...*Tensor) {
	for _, t := range ts {
		if t != nil && s.disown(t) {
			s.be.Free(t.buf)
			t.freed = true
		}
	}
}

// Release frees a tensor that no scope owns (kept out of a root scope, or
// made by Alloc).
func Release(t *Tensor) {
	if t != nil && t.be != nil && !t.freed {
		t.be.Free(t.buf)
		t.freed = true
	}
}

func (s *Scope) adopt(b Buffer) {
	s.mu.Lock()
	s.owned[b] = struct{}{}
	s.mu.Unlock()
}

// HeldBytes is the storage the scope owns now.
func (s *Scope) HeldBytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for b := range s.owned {
		n += b.Bytes()
	}
	return n
}

func (s *Scope) fail(op string, err error) {
	panic(&OpError{Op: op, Err: err})
}

func (s *Scope) failf(op, format string, args ...any) {
	panic(&OpError{Op: op, Err: fmt.Errorf(format, args...)})
}

// run launches one kernel, through the backend's Hook when it has one; op
// names it in errors and, unless describe (called only for a hook) says
// more, to the hook.
func (s *Scope) run(op string, describe func() Op, fn func() error) {
	var err error
	if s.st.Hook == nil {
		err = fn()
	} else {
		o := Op{Class: op}
		if describe != nil {
			o = describe()
		}
		err = s.st.Hook(o, fn)
	}
	if err != nil {
		s.fail(op, err)
	}
}

// Alloc allocates an uninitialised tensor that no scope owns; free it with
// Release. For weights and other long-lived state.
func Alloc(be Backend, dt DType, shape ...int) (*Tensor, error) {
	n := Numel(shape)
	if n < 0 {
		return nil, fmt.Errorf("bad shape %v", shape)
	}
	buf, err := be.Alloc(int64(n) * int64(dt.Size()))
	if err != nil {
		return nil, err
	}
	return &Tensor{shape: cloneInts(shape), dtype: dt, buf: buf, be: be}, nil
}

// Empty allocates an uninitialised tensor owned by the scope.
func (s *Scope) Empty(dt DType, shape ...int) *Tensor {
	if s.closed {
		s.failf("alloc", "scope is closed")
	}
	for _, d := range shape {
		if d < 0 {
			s.failf("alloc", "negative dimension in %v", shape)
		}
	}
	t, err := Alloc(s.be, dt, shape...)
	if err != nil {
		s.fail("alloc", fmt.Errorf("%s %v: %w", dt, shape, err))
	}
	s.adopt(t.buf)
	return t
}

// Zeros allocates a zero-filled tensor.
func (s *Scope) Zeros(dt DType, shape ...int) *Tensor { return s.Full(dt, 0, shape...) }

// Full allocates a tensor filled with v.
func (s *Scope) Full(dt DType, v float64, shape ...int) *Tensor {
	t := s.Empty(dt, shape...)
	if t.Numel() > 0 {
		s.run("fill", nil, func() error { return s.be.Fill(t, v) })
	}
	return t
}

// To makes t usable on the scope's backend: itself when it already is,
// otherwise a copy (host → device upload, device → host download, or
// device → device through the host).
func (s *Scope) To(t *Tensor) *Tensor {
	if t.be == s.be {
		return t
	}
	if t.OnHost() {
		if IsHostBacked(s.be) {
			return &Tensor{shape: t.shape, dtype: t.dtype, buf: t.buf, be: s.be}
		}
		out := s.Empty(t.dtype, t.shape...)
		if err := s.be.Upload(out.buf, 0, t.HostBytes()); err != nil {
			s.fail("upload", err)
		}
		return out
	}
	host := ToHost(t)
	return s.To(host)
}

// ToHost copies any tensor into a new host tensor (no copy for a tensor
// already in Go memory).
func ToHost(t *Tensor) *Tensor {
	if t.OnHost() {
		return &Tensor{shape: t.shape, dtype: t.dtype, buf: t.buf}
	}
	out := New(t.dtype, t.shape...)
	if err := t.be.Sync(); err != nil {
		panic(&OpError{Op: "download", Err: err})
	}
	if err := t.be.Download(out.HostBytes(), t.buf, 0); err != nil {
		panic(&OpError{Op: "download", Err: err})
	}
	return out
}

// Float32s returns t's values as float32 on the host (a copy unless t is a
// host f32 tensor).
func Float32s(t *Tensor) []float32 { return ToHost(t).ToFloat32() }

// check verifies that ts live on the scope's backend and share dtype dt.
func (s *Scope) check(op string, dt DType, ts ...*Tensor) {
	for _, t := range ts {
		if t == nil {
			continue
		}
		if t.freed {
			s.failf(op, "use of a freed tensor %v", t.shape)
		}
		if t.be != s.be && !(t.OnHost() && IsHostBacked(s.be)) {
			s.failf(op, "%v is not on %s (use Scope.To)", t, s.be.Name())
		}
		if dt != Invalid && t.dtype != dt {
			s.failf(op, "dtype mismatch: %s and %s", dt, t.dtype)
		}
	}
}

// IsHostBacked reports whether host tensors are usable on be without a
// copy: what the first layer of be that answers HostBacked says.
func IsHostBacked(be Backend) bool {
	hb, ok := As[HostBacked](be)
	return ok && hb.HostBacked()
}
