// Package packcache keeps copies derived from long-lived data (the conv3d
// tier's channels-last copies of convolution weights) so that repeated
// uses skip remaking them.
//
// Each entry has a liveness test from its maker (its source still
// allocated and unchanged); an entry whose test fails is never returned and
// is released at the next look at it. The bytes held stay under a bound.
// The accesses it is built for are scans: a decoder runs the same layers in
// the same order once per chunk, so least-recently-used eviction would
// replace every entry just before its next use. An entry is evicted only
// for a key asked for more recently than the entry was last used (the
// entry has been idle for longer than the new key's reuse distance, as an
// idle model's weights are); otherwise a key that does not fit is not kept.
//
// A returned value is pinned until its done function runs: Clear, Drop and
// eviction release a pinned value only then, so a value never disappears
// under a caller that is still queuing work on it.
package packcache

import (
	"cmp"
	"slices"
	"sync"
)

// maxSeen bounds the request record of keys not held; past it the record
// starts over (keys then count as never asked for, so evict nothing).
const maxSeen = 4096

// Cache holds values of V under keys K, within a bound in bytes.
type Cache[K comparable, V any] struct {
	limit   int64
	release func(V)

	mu      sync.Mutex
	used    int64 // bytes of held values, pinned dead ones included
	tick    int64 // one per Get
	entries map[K]*entry[V]
	seen    map[K]asked
}

type entry[V any] struct {
	v     V
	bytes int64
	live  func() bool
	last  int64 // tick of the last Get that returned it
	pins  int
	dead  bool // out of the map; released when the last pin goes
}

// asked is when a key not held was asked for: the latest request and the
// one before it (-1: none).
type asked struct{ prev, cur int64 }

// New makes a cache holding at most limit bytes; release frees a value the
// cache lets go of (it is called without the cache's lock held).
func New[K comparable, V any](limit int64, release func(V)) *Cache[K, V] {
	return &Cache[K, V]{limit: limit, release: release, entries: map[K]*entry[V]{}, seen: map[K]asked{}}
}

// Get returns the value kept for k, pinned until done is called. ok is
// false when none is kept or the kept one's source is gone or changed (it
// is then released); the request is remembered for Add's eviction rule.
func (c *Cache[K, V]) Get(k K) (v V, done func(), ok bool) {
	c.mu.Lock()
	c.tick++
	var gone []V
	if e := c.entries[k]; e != nil {
		if e.live() {
			e.last = c.tick
			e.pins++
			c.mu.Unlock()
			return e.v, c.unpin(e), true
		}
		gone = c.remove(k, e, gone)
	}
	s, held := c.seen[k]
	if !held {
		s.cur = -1
		if len(c.seen) >= maxSeen {
			clear(c.seen)
		}
	}
	c.seen[k] = asked{prev: s.cur, cur: c.tick}
	c.mu.Unlock()
	c.releaseAll(gone)
	return v, nil, false
}

// Room reports whether Add(k, bytes) would keep its value now: it fits
// beside what is held once dead entries and the entries Add may evict for
// k are gone. It changes nothing.
func (c *Cache[K, V]) Room(k K, bytes int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, held := c.entries[k]; held || bytes > c.limit {
		return false
	}
	free := c.limit - c.used
	for _, e := range c.entries {
		if free >= bytes {
			break
		}
		if e.pins == 0 && (!e.live() || e.last < c.prevAsk(k)) {
			free += e.bytes
		}
	}
	return free >= bytes
}

// Add keeps v, of the given bytes, for k when it fits (see Room), dropping
// dead entries and evicting, least recently used first, entries idle since
// before k's previous request. The value comes back pinned: done unpins
// it. When ok is false nothing is kept and v is still the caller's (k is
// held already, or v does not fit).
func (c *Cache[K, V]) Add(k K, v V, bytes int64, live func() bool) (done func(), ok bool) {
	if !c.Room(k, bytes) {
		return nil, false
	}
	c.mu.Lock()
	if _, held := c.entries[k]; held { // added meanwhile
		c.mu.Unlock()
		return nil, false
	}
	var gone []V
	for key, e := range c.entries {
		if e.pins == 0 && !e.live() {
			gone = c.remove(key, e, gone)
		}
	}
	if c.used+bytes > c.limit {
		prev := c.prevAsk(k)
		var idle []K
		for key, e := range c.entries {
			if e.pins == 0 && e.last < prev {
				idle = append(idle, key)
			}
		}
		slices.SortFunc(idle, func(a, b K) int { return cmp.Compare(c.entries[a].last, c.entries[b].last) })
		for _, key := range idle {
			if c.used+bytes <= c.limit {
				break
			}
			gone = c.remove(key, c.entries[key], gone)
		}
	}
	if c.used+bytes > c.limit { // another caller took the room meanwhile
		c.mu.Unlock()
		c.releaseAll(gone)
		return nil, false
	}
	e := &entry[V]{v: v, bytes: bytes, live: live, last: c.tick, pins: 1}
	c.entries[k] = e
	c.used += bytes
	delete(c.seen, k)
	c.mu.Unlock()
	c.releaseAll(gone)
	return c.unpin(e), true
}

// Drop lets go of every entry whose key matches, and forgets their
// requests: what a source's owner calls when it frees the source.
func (c *Cache[K, V]) Drop(match func(K) bool) {
	c.mu.Lock()
	var gone []V
	for k, e := range c.entries {
		if match(k) {
			gone = c.remove(k, e, gone)
		}
	}
	for k := range c.seen {
		if match(k) {
			delete(c.seen, k)
		}
	}
	c.mu.Unlock()
	c.releaseAll(gone)
}

// Clear lets go of everything (a trim, an out-of-memory retry) and returns
// the bytes that were held.
func (c *Cache[K, V]) Clear() int64 {
	c.mu.Lock()
	held := c.used
	var gone []V
	for k, e := range c.entries {
		gone = c.remove(k, e, gone)
	}
	clear(c.seen)
	c.mu.Unlock()
	c.releaseAll(gone)
	return held
}

// Bytes is what the cache holds now, pinned values it has let go of
// included.
func (c *Cache[K, V]) Bytes() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.used
}

// Len is the number of keys held.
func (c *Cache[K, V]) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}

// prevAsk is the tick of k's request before its latest one, -1 when
// there was none (nothing is evicted for k then). With c.mu held.
func (c *Cache[K, V]) prevAsk(k K) int64 {
	if s, ok := c.seen[k]; ok {
		return s.prev
	}
	return -1
}

// remove takes e (under k) out of the map, with c.mu held: an unpinned
// value joins gone for release after the lock, a pinned one is released
// by its last done.
func (c *Cache[K, V]) remove(k K, e *entry[V], gone []V) []V {
	delete(c.entries, k)
	e.dead = true
	if e.pins > 0 {
		return gone
	}
	c.used -= e.bytes
	return append(gone, e.v)
}

// unpin is the done function of one use of e.
func (c *Cache[K, V]) unpin(e *entry[V]) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			e.pins--
			last := e.pins == 0 && e.dead
			if last {
				c.used -= e.bytes
			}
			c.mu.Unlock()
			if last {
				c.release(e.v)
			}
		})
	}
}

func (c *Cache[K, V]) releaseAll(vs []V) {
	for _, v := range vs {
		c.release(v)
	}
}
