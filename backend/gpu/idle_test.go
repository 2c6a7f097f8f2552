package gpu

import (
	"testing"
	"time"

	"github.com/framepack-go/framepack/tensor"
)

// QueueIdle counts the host's pauses after a wait (a Sync, a Download)
// until the next work, and next to nothing for work queued back to back.
func TestQueueIdle(t *testing.T) {
	b := newGPU(t, Options{})
	buf, err := b.Alloc(64 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free(buf)
	x := tensor.Wrap(b, buf, tensor.U8, 64<<20)
	fill := func() {
		t.Helper()
		if err := b.Fill(x, 3); err != nil {
			t.Fatal(err)
		}
	}
	idle := func() time.Duration {
		t.Helper()
		d, err := b.QueueIdle()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	fill()
	if err := b.Sync(); err != nil {
		t.Fatal(err)
	}

	const pauses, pause = 5, 20 * time.Millisecond
	before := idle()
	var host time.Duration
	one := make([]byte, 4)
	for i := range pauses {
		fill()
		var err error
		if i%2 == 0 {
			err = b.Sync()
		} else {
			err = b.Download(one, buf, 0)
		}
		if err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		time.Sleep(pause)
		host += time.Since(t0)
	}
	fill()
	if err := b.Sync(); err != nil {
		t.Fatal(err)
	}
	got := idle() - before
	// At least the host's measured pauses; at most those and a few
	// milliseconds of waking and queueing per pause.
	if got < host-time.Millisecond || got > host+pauses*5*time.Millisecond {
		t.Errorf("idle %v over %d pauses the host measured at %v", got, pauses, host)
	}

	before = idle()
	for range 200 {
		fill()
	}
	if err := b.Sync(); err != nil {
		t.Fatal(err)
	}
	if got := idle() - before; got > 5*time.Millisecond {
		t.Errorf("idle %v for 200 fills queued back to back", got)
	}
	if q, ok := tensor.QueueIdle(tensor.WithSettings(b, tensor.Settings{})); !ok || q < host {
		t.Errorf("tensor.QueueIdle through a wrapper: %v, %v", q, ok)
	}
}
