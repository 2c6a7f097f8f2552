package tensor

import "unsafe"

// Elem is a fixed-size number that host storage holds.
type Elem interface {
	~uint8 | ~uint16 | ~uint32 | ~uint64 | ~int32 | ~int64 | ~float32 | ~float64
}

// ViewAs is b's memory as a []T, without copying: len(b)/size(T) elements,
// nil when that is none. b must stay alive and unchanged in length while
// the view is used; host buffers are allocated 8-byte aligned.
func ViewAs[T Elem](b []byte) []T {
	var z T
	n := len(b) / int(unsafe.Sizeof(z))
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), n)
}

// BytesOf is s's memory as bytes, without copying; nil for an empty s.
func BytesOf[T Elem](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	var z T
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*int(unsafe.Sizeof(z)))
}
