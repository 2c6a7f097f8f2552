// Package localcomm holds the in-process tensor.Comm: ranks that are
// goroutines of one program, each with its own backend, exchanging through
// host memory. It runs sequence- and CFG-parallel code without GPUs (the
// tests), and is the reference the NCCL communicator is held to.
package localcomm

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/framepack-go/framepack/tensor"
)

// DefaultTimeout bounds every collective of a group: a rank that
// never arrives (a bug, or a rank that failed without closing) turns into
// an error instead of a hang.
const DefaultTimeout = 5 * time.Minute

// New returns the n ranks of one group; rank i is the i-th element. Each
// is used by one goroutine.
func New(n int) []tensor.Comm {
	return NewWithTimeout(n, DefaultTimeout)
}

// NewWithTimeout is New with another bound on each collective's wait.
func NewWithTimeout(n int, timeout time.Duration) []tensor.Comm {
	if n < 1 {
		panic(fmt.Sprintf("localcomm.New: %d ranks", n))
	}
	h := newHub(n, timeout)
	out := make([]tensor.Comm, n)
	for r := range out {
		out[r] = &local{h: h, rank: r}
	}
	return out
}

// hub is what the ranks of one group share: the collective each has
// reached, by sequence number.
type hub struct {
	n       int
	timeout time.Duration
	mu      sync.Mutex
	calls   map[int]*call
	failed  error         // set once: every later collective fails with it
	abort   chan struct{} // closed with failed
}

// call is one collective: what every rank brought to it.
type call struct {
	kind    string
	in      []any
	arrived int
	left    int
	done    chan struct{} // closed when every rank has arrived
	split   map[int]*hub  // Split: the subgroups, made by the last to arrive
}

func newHub(n int, timeout time.Duration) *hub {
	return &hub{n: n, timeout: timeout, calls: map[int]*call{}, abort: make(chan struct{})}
}

// fail makes every pending and later collective of the group fail.
func (h *hub) fail(err error) {
	if h.failed == nil {
		h.failed = err
		close(h.abort)
	}
}

type local struct {
	h      *hub
	rank   int
	seq    int
	closed bool
}

func (l *local) Rank() int { return l.rank }
func (l *local) Size() int { return l.h.n }

// exchange brings in to collective number l.seq and returns what every
// rank brought, once all have.
func (l *local) exchange(kind string, in any) (*call, error) {
	if l.closed {
		return nil, fmt.Errorf("localcomm: rank %d: %s on a closed communicator", l.rank, kind)
	}
	h := l.h
	h.mu.Lock()
	if h.failed != nil {
		h.mu.Unlock()
		return nil, h.failed
	}
	c := h.calls[l.seq]
	if c == nil {
		c = &call{kind: kind, in: make([]any, h.n), done: make(chan struct{})}
		h.calls[l.seq] = c
	}
	if c.kind != kind {
		err := fmt.Errorf("localcomm: collective %d is %s on one rank and %s on rank %d", l.seq, c.kind, kind, l.rank)
		h.fail(err)
		h.mu.Unlock()
		return nil, err
	}
	c.in[l.rank] = in
	c.arrived++
	if c.arrived == h.n {
		if kind == "split" {
			c.split = splitHubs(c.in, h.timeout)
		}
		close(c.done)
	}
	h.mu.Unlock()

	timer := time.NewTimer(h.timeout)
	defer timer.Stop()
	select {
	case <-c.done:
	case <-h.abort:
	case <-timer.C:
		h.mu.Lock()
		h.fail(fmt.Errorf("localcomm: %s: rank %d waited %v for the other ranks", kind, l.rank, h.timeout))
		h.mu.Unlock()
	}
	select {
	case <-c.done: // arrived, even if the group failed since
	default:
		h.mu.Lock()
		defer h.mu.Unlock()
		return nil, h.failed
	}
	h.mu.Lock()
	if c.left++; c.left == h.n {
		delete(h.calls, l.seq)
	}
	h.mu.Unlock()
	l.seq++
	return c, nil
}

// piece is a tensor's bytes with what the receiver checks them against.
type piece struct {
	dt    tensor.DType
	numel int
	b     []byte
}

func pieceOf(t *tensor.Tensor) (piece, error) {
	if t == nil {
		return piece{}, errors.New("nil tensor")
	}
	b := make([]byte, t.Bytes())
	if t.OnHost() {
		copy(b, t.HostBytes())
	} else {
		if err := t.Backend().Sync(); err != nil {
			return piece{}, err
		}
		if err := t.Backend().Download(b, t.Buffer(), 0); err != nil {
			return piece{}, err
		}
	}
	return piece{t.DType(), t.Numel(), b}, nil
}

// into writes p into t after checking that they agree.
func (p piece) into(t *tensor.Tensor, what string) error {
	if t == nil {
		return fmt.Errorf("%s: nil tensor", what)
	}
	if p.dt != t.DType() || p.numel != t.Numel() {
		return fmt.Errorf("%s: %d %s sent into %d %s", what, p.numel, p.dt, t.Numel(), t.DType())
	}
	if t.OnHost() {
		copy(t.HostBytes(), p.b)
		return nil
	}
	return t.Backend().Upload(t.Buffer(), 0, p.b)
}

func (l *local) AllToAll(send, recv []*tensor.Tensor) error {
	n := l.h.n
	if len(send) != n || len(recv) != n {
		return fmt.Errorf("localcomm: all-to-all on rank %d: %d sends and %d receives for %d ranks", l.rank, len(send), len(recv), n)
	}
	out := make([]piece, n)
	for p, t := range send {
		var err error
		if out[p], err = pieceOf(t); err != nil {
			return fmt.Errorf("localcomm: all-to-all on rank %d, send to rank %d: %w", l.rank, p, err)
		}
	}
	c, err := l.exchange("all-to-all", out)
	if err != nil {
		return err
	}
	for p := range recv {
		in := c.in[p].([]piece)[l.rank]
		if err := in.into(recv[p], fmt.Sprintf("localcomm: all-to-all from rank %d to rank %d", p, l.rank)); err != nil {
			return err
		}
	}
	return nil
}

// share offers x to the other ranks for the collective kind and returns
// it as sent with what every rank sent.
func (l *local) share(kind string, x *tensor.Tensor) (piece, *call, error) {
	pc, err := pieceOf(x)
	if err != nil {
		return piece{}, nil, fmt.Errorf("localcomm: %s on rank %d: %w", kind, l.rank, err)
	}
	c, err := l.exchange(kind, pc)
	return pc, c, err
}

func (l *local) AllGather(x *tensor.Tensor, recv []*tensor.Tensor) error {
	if len(recv) != l.h.n {
		return fmt.Errorf("localcomm: all-gather on rank %d: %d receives for %d ranks", l.rank, len(recv), l.h.n)
	}
	pc, c, err := l.share("all-gather", x)
	if err != nil {
		return err
	}
	for p := range recv {
		in := c.in[p].(piece)
		if in.numel != pc.numel || in.dt != pc.dt {
			return fmt.Errorf("localcomm: all-gather: rank %d has %d %s, rank %d %d %s", p, in.numel, in.dt, l.rank, pc.numel, pc.dt)
		}
		if err := in.into(recv[p], fmt.Sprintf("localcomm: all-gather from rank %d", p)); err != nil {
			return err
		}
	}
	return nil
}

// AllReduceSum adds in rank order, so every rank gets the same bits.
func (l *local) AllReduceSum(x *tensor.Tensor) error {
	if x == nil || x.DType() != tensor.F32 {
		return fmt.Errorf("localcomm: all-reduce on rank %d: want an f32 tensor", l.rank)
	}
	pc, c, err := l.share("all-reduce", x)
	if err != nil {
		return err
	}
	sum := make([]float32, pc.numel)
	for p := range c.in {
		in := c.in[p].(piece)
		if in.numel != pc.numel || in.dt != tensor.F32 {
			return fmt.Errorf("localcomm: all-reduce: rank %d has %d %s, rank %d %d f32", p, in.numel, in.dt, l.rank, pc.numel)
		}
		for i := range sum {
			sum[i] += math.Float32frombits(uint32(in.b[4*i]) | uint32(in.b[4*i+1])<<8 | uint32(in.b[4*i+2])<<16 | uint32(in.b[4*i+3])<<24)
		}
	}
	return piece{tensor.F32, len(sum), tensor.BytesOf(sum)}.into(x, "localcomm: all-reduce")
}

type splitKey struct{ color, key int }

func (l *local) Split(color, key int) (tensor.Comm, error) {
	c, err := l.exchange("split", splitKey{color, key})
	if err != nil {
		return nil, err
	}
	h := c.split[color]
	// This rank's place in its subgroup: by key, then by rank.
	var members []int
	for r, in := range c.in {
		if in.(splitKey).color == color {
			members = append(members, r)
		}
	}
	sort.SliceStable(members, func(i, j int) bool { return c.in[members[i]].(splitKey).key < c.in[members[j]].(splitKey).key })
	for i, r := range members {
		if r == l.rank {
			return &local{h: h, rank: i}, nil
		}
	}
	return nil, fmt.Errorf("localcomm: split: rank %d is not in its own subgroup", l.rank)
}

// splitHubs makes one hub per color.
func splitHubs(in []any, timeout time.Duration) map[int]*hub {
	size := map[int]int{}
	for _, v := range in {
		size[v.(splitKey).color]++
	}
	out := map[int]*hub{}
	for color, n := range size {
		out[color] = newHub(n, timeout)
	}
	return out
}

// Close makes the group's pending and later collectives fail on every
// rank: a rank that stops early never leaves the others waiting.
func (l *local) Close() error {
	if l.closed {
		return nil
	}
	l.closed = true
	l.h.mu.Lock()
	l.h.fail(fmt.Errorf("localcomm: rank %d closed the communicator", l.rank))
	l.h.mu.Unlock()
	return nil
}

// Run runs fn for each rank of comms on its own goroutine, as a program
// with in-process ranks does, closes each rank's communicator when its fn
// returns (so a rank that fails releases the others from their waits) and
// returns every rank's error. A panic that is a *tensor.OpError is that
// rank's error.
func Run(comms []tensor.Comm, fn func(c tensor.Comm) error) []error {
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			errs[r] = tensor.Catch(func() {
				if err := fn(c); err != nil {
					tensor.Fail("localcomm", "rank %d: %v", r, err)
				}
			})
		}()
	}
	wg.Wait()
	return errs
}
