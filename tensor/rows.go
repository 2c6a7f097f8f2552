package tensor

// ViewRows is [start, end) of axis 1 of t (1, L, ...) as a view of t's
// storage, without a copy: writes to it land in t, and it is valid while t
// is. The scope does not own it: never free it. ok is false when t's batch
// is not 1 or the backend makes no views.
func (s *Scope) ViewRows(t *Tensor, start, end int) (*Tensor, bool) {
	if t.Rank() < 2 || t.Dim(0) != 1 || start < 0 || end > t.Dim(1) || start > end {
		return nil, false
	}
	inner := int64(t.Numel()/max(t.Dim(1), 1)) * int64(t.DType().Size())
	buf, ok := ViewOf(s.Backend(), t.Buffer(), int64(start)*inner, int64(end-start)*inner)
	if !ok {
		return nil, false
	}
	shape := t.Shape()
	shape[1] = end - start
	return Wrap(s.Backend(), buf, t.DType(), shape...), true
}

// ViewOf is n bytes of buf at byte offset off without a copy, when the
// buffer is host memory or the backend is a Viewer.
func ViewOf(be Backend, buf Buffer, off, n int64) (Buffer, bool) {
	if hb, ok := buf.(*HostBuffer); ok {
		if off < 0 || n < 0 || off+n > int64(len(hb.Data())) {
			return nil, false
		}
		return HostBufferOf(hb.Data()[off : off+n]), true
	}
	if v, ok := As[Viewer](be); ok {
		if b, err := v.View(buf, off, n); err == nil {
			return b, true
		}
	}
	return nil, false
}
