package gpu

import (
	"bytes"
	"testing"

	"github.com/framepack-go/framepack/tensor"
)

// UploadQueued copies out of pinned memory on the copy stream after the
// work queued before it on the compute stream (a fill of the destination
// here), done waits for the copy (the buffer is then refilled and copied
// again), and memory that is not pinned is uploaded in line.
func TestUploadQueued(t *testing.T) {
	b := newGPU(t, Options{})
	const n = 8 << 20
	dst, err := b.Alloc(3 * n)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free(dst)
	dt := tensor.Wrap(b, dst, tensor.U8, 3*n)
	if err := b.Fill(dt, 0x7f); err != nil {
		t.Fatal(err)
	}
	pin, err := b.AllocPinned(n)
	if err != nil {
		t.Fatal(err)
	}
	defer b.FreePinned(pin)
	want := make([]byte, 3*n)
	for round := 0; round < 2; round++ {
		src := pin.Data()
		for i := range src {
			src[i] = byte(i*31 + round*7)
		}
		copy(want[round*n:], src)
		done, err := b.UploadQueued(dst, int64(round*n), src)
		if err != nil {
			t.Fatal(err)
		}
		if err := done(); err != nil {
			t.Fatal(err)
		}
		if err := done(); err != nil { // a second call is harmless
			t.Fatal(err)
		}
	}
	heap := bytes.Repeat([]byte{0x5a}, n)
	copy(want[2*n:], heap)
	done, err := b.UploadQueued(dst, 2*n, heap)
	if err != nil {
		t.Fatal(err)
	}
	if err := done(); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 3*n)
	if err := b.Download(got, dst, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("the device holds other bytes than those uploaded")
	}
	if _, err := b.UploadQueued(dst, 3*n-1, pin.Data()[:2]); err == nil {
		t.Error("an upload past the buffer's end was queued")
	}
}
