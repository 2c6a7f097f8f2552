package gpu

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/framepack-go/framepack/nccl"
	"github.com/framepack-go/framepack/tensor"
)

// Comm is a tensor.Comm over NCCL (RCCL on AMD): one process per GPU,
// every exchange queued on the backend's stream in order with its kernels.
type Comm struct {
	b       *Backend
	lib     *nccl.Lib
	c       *nccl.Comm
	held    int64         // device memory NCCL took at init
	timeout time.Duration // for the ranks to join a communicator
}

var _ tensor.Comm = (*Comm)(nil)

// OpenNCCL loads the collective library of the backend's platform.
func OpenNCCL(be tensor.Backend) (*nccl.Lib, error) {
	b, ok := tensor.As[*Backend](be)
	if !ok {
		return nil, fmt.Errorf("gpu: %s is not a GPU backend", be.Name())
	}
	return nccl.OpenVendor(b.dev.Vendor)
}

// NewComm joins be's GPU as rank of size to the communicator id; rank 0
// makes id with lib.NewUniqueID. It fails, rather than waits forever, when
// the other ranks have not joined within timeout. NCCL allocates its own
// device buffers here; DeviceBytes says how much.
func NewComm(be tensor.Backend, lib *nccl.Lib, id nccl.UniqueID, rank, size int, timeout time.Duration) (*Comm, error) {
	b, ok := tensor.As[*Backend](be)
	if !ok {
		return nil, fmt.Errorf("gpu: %s is not a GPU backend", be.Name())
	}
	if err := b.Sync(); err != nil {
		return nil, err
	}
	before, _, _ := b.dev.MemGetInfo()
	pooled := b.Stats().Reserved
	c, err := lib.NewComm(id, rank, size, timeout, b.dev.Bind)
	if err != nil {
		return nil, err
	}
	cm := &Comm{b: b, lib: lib, c: c, timeout: timeout}
	began := time.Now()
	if err := cm.connect(); err != nil {
		c.Abort()
		return nil, err
	}
	// What the driver gave out meanwhile, less what the engine's own pool
	// took (connect's buffers).
	after, _, _ := b.dev.MemGetInfo()
	if held := int64(before) - int64(after) - (b.Stats().Reserved - pooled); held > 0 {
		cm.held = held
	}
	b.log.Info(fmt.Sprintf("gpu: %s communicator: rank %d of %d, %.0f MiB of device memory, peers connected in %.2fs",
		lib, rank, size, float64(cm.held)/(1<<20), time.Since(began).Seconds()))
	return cm, nil
}

// connectBytes is what connect sends each peer: as much as the exchanges
// of a section send at once, so NCCL connects every channel they use.
const connectBytes = 16 << 20

// connect makes NCCL set up its connections to every peer now. It makes
// them on first use otherwise: a second or two inside the first exchange
// of the first section.
func (c *Comm) connect() (err error) {
	n := c.Size()
	if n == 1 {
		return nil
	}
	s := tensor.NewScope(c.b)
	defer s.Close()
	send, recv := make([]*tensor.Tensor, n), make([]*tensor.Tensor, n)
	err = tensor.Catch(func() {
		x := s.Zeros(tensor.F32, connectBytes/4)
		for p := range send {
			send[p], recv[p] = x, s.Empty(tensor.F32, connectBytes/4)
		}
	})
	if err != nil {
		return fmt.Errorf("gpu: connecting to the other ranks: %w", err)
	}
	if err := c.AllToAll(send, recv); err != nil {
		return fmt.Errorf("gpu: connecting to the other ranks: %w", err)
	}
	return c.b.Sync()
}

// Join makes be's GPU rank of size in a new communicator: rank 0 makes
// the id and hands its text to publish, the other ranks pass the text they
// were given as id. It fails, rather than waits forever, when the others
// have not joined within timeout.
func Join(be tensor.Backend, rank, size int, id string, publish func(id string) error, timeout time.Duration) (*Comm, error) {
	lib, err := OpenNCCL(be)
	if err != nil {
		return nil, err
	}
	var uid nccl.UniqueID
	if rank == 0 {
		if publish == nil {
			return nil, fmt.Errorf("gpu: rank 0 has nowhere to publish the communicator's id")
		}
		if uid, err = lib.NewUniqueID(); err != nil {
			return nil, err
		}
		if err := publish(uid.String()); err != nil {
			return nil, err
		}
	} else if uid, err = nccl.ParseUniqueID(id); err != nil {
		return nil, err
	}
	return NewComm(be, lib, uid, rank, size, timeout)
}

func (c *Comm) Rank() int { return c.c.Rank() }
func (c *Comm) Size() int { return c.c.Size() }

// DeviceBytes is the device memory NCCL allocated for the communicator,
// outside the engine's allocator (measured from the driver's free count).
func (c *Comm) DeviceBytes() int64 { return c.held }

// Abort stops the communicator's work at once (a peer died); safe from
// another goroutine.
func (c *Comm) Abort() error { return c.c.Abort() }

// bound runs fn with the device current on a locked thread.
func (c *Comm) bound(what string, fn func(stream uintptr) error) error {
	unbind, err := c.b.dev.Bind()
	if err != nil {
		return err
	}
	defer unbind()
	c.b.idle.queued()
	if err := fn(uintptr(c.b.stream)); err != nil {
		return fmt.Errorf("gpu: %s: %w", what, err)
	}
	return nil
}

// pointers checks that ts live on this backend.
func (c *Comm) ptr(t *tensor.Tensor) (uintptr, error) { return c.b.ptr(t) }

// group queues sends and receives as one NCCL group.
func (c *Comm) group(what string, sends, recvs []*tensor.Tensor) error {
	n, me := c.Size(), c.Rank()
	return c.bound(what, func(stream uintptr) error {
		if sends[me] != nil && recvs[me] != nil {
			if sends[me].Bytes() != recvs[me].Bytes() {
				return fmt.Errorf("rank %d sends itself %d bytes into %d", me, sends[me].Bytes(), recvs[me].Bytes())
			}
			src, err := c.ptr(sends[me])
			if err != nil {
				return err
			}
			dst, err := c.ptr(recvs[me])
			if err != nil {
				return err
			}
			if err := c.b.dev.CopyD2DAsync(dst, src, sends[me].Bytes(), c.b.stream); err != nil {
				return err
			}
		}
		if err := c.c.GroupStart(); err != nil {
			return err
		}
		var first error
		for p := 0; p < n; p++ {
			if p == me {
				continue
			}
			if s := sends[p]; s != nil && first == nil {
				ptr, err := c.ptr(s)
				if err == nil {
					err = c.c.Send(ptr, int(s.Bytes()), nccl.Uint8, p, stream)
				}
				first = err
			}
			if r := recvs[p]; r != nil && first == nil {
				ptr, err := c.ptr(r)
				if err == nil {
					err = c.c.Recv(ptr, int(r.Bytes()), nccl.Uint8, p, stream)
				}
				first = err
			}
		}
		if err := c.c.GroupEnd(); first == nil {
			first = err
		}
		return first
	})
}

func (c *Comm) AllToAll(send, recv []*tensor.Tensor) error {
	if len(send) != c.Size() || len(recv) != c.Size() {
		return fmt.Errorf("gpu: all-to-all: %d sends and %d receives for %d ranks", len(send), len(recv), c.Size())
	}
	return c.group("all-to-all", send, recv)
}

// AllGather sends x to every peer straight into its recv slot: no
// staging buffer, and the same traffic as ncclAllGather.
func (c *Comm) AllGather(x *tensor.Tensor, recv []*tensor.Tensor) error {
	if len(recv) != c.Size() {
		return fmt.Errorf("gpu: all-gather: %d receives for %d ranks", len(recv), c.Size())
	}
	send := make([]*tensor.Tensor, c.Size())
	for p := range send {
		send[p] = x
	}
	return c.group("all-gather", send, recv)
}

func (c *Comm) AllReduceSum(x *tensor.Tensor) error {
	if x.DType() != tensor.F32 {
		return fmt.Errorf("gpu: all-reduce: %s, want f32", x.DType())
	}
	return c.bound("all-reduce", func(stream uintptr) error {
		p, err := c.ptr(x)
		if err != nil {
			return err
		}
		return c.c.AllReduce(p, p, x.Numel(), nccl.Float32, nccl.Sum, stream)
	})
}

func (c *Comm) Split(color, key int) (tensor.Comm, error) {
	var sub *nccl.Comm
	err := nccl.ErrNoSplit
	if !forceSplitByInit {
		err = c.bound("split", func(uintptr) error {
			var err error
			sub, err = c.c.Split(color, key)
			return err
		})
	}
	if errors.Is(err, nccl.ErrNoSplit) {
		sub, err = c.splitByInit(color, key)
	}
	if err != nil {
		return nil, err
	}
	cm := &Comm{b: c.b, lib: c.lib, c: sub, timeout: c.timeout}
	if err := cm.connect(); err != nil {
		sub.Abort()
		return nil, err
	}
	return cm, nil
}

// splitByInit is Split for a library without ncclCommSplit: the ranks
// share their colors and keys, each group's first rank makes a new id,
// and the ids travel to the others through this communicator.
func (c *Comm) splitByInit(color, key int) (*nccl.Comm, error) {
	n, me := c.Size(), c.Rank()
	s := tensor.NewScope(c.b)
	defer s.Close()
	var keys, ids []byte
	err := tensor.Catch(func() {
		var mine [16]byte
		binary.LittleEndian.PutUint64(mine[:], uint64(int64(color)))
		binary.LittleEndian.PutUint64(mine[8:], uint64(int64(key)))
		keys = c.gatherBytes(s, mine[:])
	})
	if err != nil {
		return nil, fmt.Errorf("gpu: split: %w", err)
	}
	colorOf := func(r int) int64 { return int64(binary.LittleEndian.Uint64(keys[16*r:])) }
	keyOf := func(r int) int64 { return int64(binary.LittleEndian.Uint64(keys[16*r+8:])) }
	var group []int
	for r := 0; r < n; r++ {
		if colorOf(r) == colorOf(me) {
			group = append(group, r)
		}
	}
	sort.SliceStable(group, func(i, j int) bool { return keyOf(group[i]) < keyOf(group[j]) })
	var id nccl.UniqueID
	if group[0] == me {
		if id, err = c.lib.NewUniqueID(); err != nil {
			return nil, err
		}
	}
	err = tensor.Catch(func() { ids = c.gatherBytes(s, id[:]) })
	if err != nil {
		return nil, fmt.Errorf("gpu: split: %w", err)
	}
	copy(id[:], ids[len(id)*group[0]:])
	return c.lib.NewComm(id, slices.Index(group, me), len(group), c.timeout, c.b.dev.Bind)
}

// gatherBytes is every rank's b (all the same length), rank by rank.
func (c *Comm) gatherBytes(s *tensor.Scope, b []byte) []byte {
	host, err := tensor.FromBytes(tensor.U8, b, len(b))
	if err != nil {
		tensor.Fail("split", "%v", err)
	}
	x := s.To(host)
	recv := make([]*tensor.Tensor, c.Size())
	for p := range recv {
		recv[p] = s.Empty(tensor.U8, len(b))
	}
	if err := c.AllGather(x, recv); err != nil {
		tensor.Fail("split", "%v", err)
	}
	var out []byte
	for _, r := range recv {
		out = append(out, tensor.ToHost(r).HostBytes()...)
	}
	return out
}

// forceSplitByInit, when set (by a test), makes Split take the path of a
// library without ncclCommSplit.
var forceSplitByInit bool

// Close destroys the communicator after the work queued on it.
func (c *Comm) Close() error {
	return c.bound("close", func(uintptr) error { return c.c.Destroy() })
}
