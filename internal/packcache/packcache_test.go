package packcache

import (
	"slices"
	"testing"
)

// source is a fake allocation: an entry made from it lives while it is
// allocated and unchanged.
type source struct {
	freed bool
	gen   int
}

func (s *source) live() func() bool {
	gen := s.gen
	return func() bool { return !s.freed && s.gen == gen }
}

type harness struct {
	t        *testing.T
	c        *Cache[string, string]
	released []string
	src      map[string]*source
}

func newHarness(t *testing.T, limit int64) *harness {
	h := &harness{t: t, src: map[string]*source{}}
	h.c = New[string, string](limit, func(v string) { h.released = append(h.released, v) })
	return h
}

func (h *harness) source(k string) *source {
	if h.src[k] == nil {
		h.src[k] = &source{}
	}
	return h.src[k]
}

// use is one conv's use of k's weight: a hit, else a copy made and kept
// when it fits. It reports whether it was a hit and whether the copy made
// on a miss was kept.
func (h *harness) use(k string, bytes int64) (hit, kept bool) {
	h.t.Helper()
	v, done, ok := h.c.Get(k)
	if ok {
		if v != k+"'" {
			h.t.Fatalf("Get(%s) = %q", k, v)
		}
		done()
		return true, false
	}
	if done != nil {
		h.t.Fatalf("Get(%s) missed with a done function", k)
	}
	room := h.c.Room(k, bytes)
	done, kept = h.c.Add(k, k+"'", bytes, h.source(k).live())
	if kept != room {
		h.t.Fatalf("Add(%s) kept %v, Room said %v", k, kept, room)
	}
	if kept {
		done()
	}
	return false, kept
}

func (h *harness) wantReleased(want ...string) {
	h.t.Helper()
	got := slices.Clone(h.released)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		h.t.Fatalf("released %v, want %v", got, want)
	}
}

func (h *harness) wantBytes(n int64) {
	h.t.Helper()
	if got := h.c.Bytes(); got != n {
		h.t.Fatalf("Bytes() = %d, want %d", got, n)
	}
}

func TestHitAndMiss(t *testing.T) {
	h := newHarness(t, 100)
	if hit, kept := h.use("a", 40); hit || !kept {
		t.Fatalf("first use: hit %v kept %v, want a kept miss", hit, kept)
	}
	for range 3 {
		if hit, _ := h.use("a", 40); !hit {
			t.Fatal("second use missed")
		}
	}
	h.wantBytes(40)
	h.wantReleased()
	if done, ok := h.c.Add("a", "other", 40, h.source("a").live()); ok || done != nil {
		t.Fatal("Add over a held key kept it")
	}
}

// TestFreedSource: an entry whose source is freed, or rewritten, is never
// returned and its copy is released.
func TestFreedSource(t *testing.T) {
	h := newHarness(t, 100)
	h.use("a", 40)
	h.use("b", 40)
	h.source("a").freed = true
	if _, _, ok := h.c.Get("a"); ok {
		t.Fatal("entry of a freed source returned")
	}
	h.wantReleased("a'")
	h.wantBytes(40)

	h.source("b").gen++ // uploaded again
	if hit, kept := h.use("b", 40); hit || !kept {
		t.Fatalf("rewritten source: hit %v kept %v, want a miss kept anew", hit, kept)
	}
	h.wantReleased("a'", "b'")
	if hit, _ := h.use("b", 40); !hit {
		t.Fatal("the new copy is not returned")
	}
}

// TestDeadEntriesMakeRoom: entries of freed sources are dropped when room
// is needed, without a Get of their key.
func TestDeadEntriesMakeRoom(t *testing.T) {
	h := newHarness(t, 100)
	h.use("a", 60)
	h.source("a").freed = true
	if _, kept := h.use("b", 60); !kept {
		t.Fatal("a dead entry kept its room")
	}
	h.wantReleased("a'")
	h.wantBytes(60)
}

// TestScanLargerThanBound: layers run in the same order chunk after chunk
// and their copies do not all fit: the ones kept stay (no entry is evicted
// just before its next use), the rest are made per use.
func TestScanLargerThanBound(t *testing.T) {
	h := newHarness(t, 100)
	layers := []string{"a", "b", "c", "d"}
	for chunk := range 5 {
		var hits []string
		for _, k := range layers {
			if hit, _ := h.use(k, 40); hit {
				hits = append(hits, k)
			}
		}
		want := []string{"a", "b"}
		if chunk == 0 {
			want = nil
		}
		if !slices.Equal(hits, want) {
			t.Fatalf("chunk %d: hits %v, want %v", chunk, hits, want)
		}
		h.wantBytes(80)
	}
	h.wantReleased()
}

// TestIdleEvicted: when another model's layers run, the idle entries make
// room for them, least recently used first and only as much as needed.
func TestIdleEvicted(t *testing.T) {
	h := newHarness(t, 100)
	h.use("enc1", 30)
	h.use("enc2", 30)
	h.use("enc1", 30) // enc2 is the least recently used
	h.use("enc3", 30)
	h.wantBytes(90)
	// First pass of the decoder: nothing of its own fits, and having never
	// been asked for before, its keys evict nothing.
	for _, k := range []string{"dec1", "dec2"} {
		if _, kept := h.use(k, 40); kept {
			t.Fatalf("%s kept on its first request", k)
		}
	}
	h.wantReleased()
	// Second pass: the encoder's entries were idle since before dec1's
	// first request.
	if _, kept := h.use("dec1", 40); !kept {
		t.Fatal("dec1 not kept on its second request")
	}
	h.wantReleased("enc2'") // 90-30+40 = 100 fits
	h.wantBytes(100)
	if _, kept := h.use("dec2", 40); !kept {
		t.Fatal("dec2 not kept on its second request")
	}
	h.wantReleased("enc2'", "enc1'", "enc3'")
	h.wantBytes(80)
	for _, k := range []string{"dec1", "dec2"} {
		if hit, _ := h.use(k, 40); !hit {
			t.Fatalf("%s missed", k)
		}
	}
}

func TestLargerThanBound(t *testing.T) {
	h := newHarness(t, 100)
	for range 3 {
		if _, kept := h.use("big", 101); kept {
			t.Fatal("a value over the bound was kept")
		}
	}
	h.wantBytes(0)
}

// TestPinned: a value in use is released only when its use ends, whatever
// let go of it meanwhile, and counts until then.
func TestPinned(t *testing.T) {
	h := newHarness(t, 100)
	h.use("a", 40)
	_, doneA, ok := h.c.Get("a")
	if !ok {
		t.Fatal("miss")
	}
	if h.c.Get("b"); !h.c.Room("b", 40) {
		t.Fatal("no room for b")
	}
	doneB, ok := h.c.Add("b", "b'", 40, h.source("b").live())
	if !ok {
		t.Fatal("b not kept")
	}
	if n := h.c.Clear(); n != 80 {
		t.Fatalf("Clear() = %d, want 80", n)
	}
	if h.c.Len() != 0 {
		t.Fatal("entries left after Clear")
	}
	h.wantReleased()
	h.wantBytes(80)
	doneA()
	doneA() // a second call changes nothing
	h.wantReleased("a'")
	h.wantBytes(40)
	doneB()
	h.wantReleased("a'", "b'")
	h.wantBytes(0)

	// A pinned entry is never evicted: here the room it holds is not
	// Room's to give.
	h = newHarness(t, 100)
	h.use("a", 60)
	_, doneA, _ = h.c.Get("a")
	h.source("a").freed = true
	if _, kept := h.use("b", 60); kept {
		t.Fatal("b took the room of a pinned entry")
	}
	doneA()
	h.wantBytes(60) // dead, released at the next look
	if _, kept := h.use("b", 60); !kept {
		t.Fatal("b not kept once a was released")
	}
	h.wantReleased("a'")
}

// TestDrop: dropping a source's keys releases their copies and forgets
// their requests.
func TestDrop(t *testing.T) {
	h := newHarness(t, 100)
	h.use("w1/x", 30)
	h.use("w1/y", 30)
	h.use("w2", 30)
	h.c.Get("w1/z") // asked for, not held
	h.c.Drop(func(k string) bool { return k[:2] == "w1" })
	h.wantReleased("w1/x'", "w1/y'")
	h.wantBytes(30)
	if _, ok := h.c.seen["w1/z"]; ok {
		t.Fatal("the request of a dropped key is still remembered")
	}
	if hit, _ := h.use("w2", 30); !hit {
		t.Fatal("Drop let go of a key it did not match")
	}
}

// TestSeenBounded: the record of keys asked for but not held stays under
// maxSeen.
func TestSeenBounded(t *testing.T) {
	h := newHarness(t, 100)
	for i := range 3 * maxSeen {
		h.c.Get(string(rune('a'+i%26)) + string(rune(i)))
		if len(h.c.seen) > maxSeen {
			t.Fatalf("%d keys remembered", len(h.c.seen))
		}
	}
}
