//go:build cgo

package nccl

/*
#include <stdint.h>
#include <stddef.h>
#include <string.h>

// One table serves NCCL and RCCL: the same names and signatures.
enum { N_VERSION, N_UNIQUE_ID, N_INIT_RANK, N_SPLIT, N_DESTROY, N_ABORT, N_ASYNC_ERROR,
       N_GROUP_START, N_GROUP_END, N_SEND, N_RECV, N_ALL_GATHER, N_ALL_REDUCE,
       N_ERROR_STRING, N_LAST_ERROR, N_USER_RANK, N_COUNT, N_N };
static void* fp[N_N];
static void fp_set(int i, uintptr_t p) { fp[i] = (void*)p; }

typedef struct { char internal[128]; } id_t_;
typedef int (*version_t)(int*);
typedef int (*unique_id_t)(id_t_*);
typedef int (*init_rank_t)(void**, int, id_t_, int);
typedef int (*split_t)(void*, int, int, void**, void*);
typedef int (*comm_t)(void*);
typedef int (*async_error_t)(void*, int*);
typedef int (*group_t)(void);
typedef int (*send_t)(const void*, size_t, int, int, void*, void*);
typedef int (*all_gather_t)(const void*, void*, size_t, int, void*, void*);
typedef int (*all_reduce_t)(const void*, void*, size_t, int, int, void*, void*);
typedef const char* (*error_string_t)(int);
typedef const char* (*last_error_t)(void*);

static int n_version(int* v) { return ((version_t)fp[N_VERSION])(v); }
static int n_unique_id(void* out) { return ((unique_id_t)fp[N_UNIQUE_ID])((id_t_*)out); }
static int n_init_rank(uintptr_t* comm, int n, const void* id, int rank) {
	id_t_ v;
	memcpy(&v, id, sizeof v);
	void* c = 0;
	int r = ((init_rank_t)fp[N_INIT_RANK])(&c, n, v, rank);
	*comm = (uintptr_t)c;
	return r;
}
static int n_split(uintptr_t comm, int color, int key, uintptr_t* out) {
	void* c = 0;
	int r = ((split_t)fp[N_SPLIT])((void*)comm, color, key, &c, 0);
	*out = (uintptr_t)c;
	return r;
}
// n_free frees a communicator with N_DESTROY or N_ABORT.
static int n_free(int i, uintptr_t c) { return ((comm_t)fp[i])((void*)c); }
static int n_async_error(uintptr_t c, int* e) { return ((async_error_t)fp[N_ASYNC_ERROR])((void*)c, e); }
static int n_group_start(void) { return ((group_t)fp[N_GROUP_START])(); }
static int n_group_end(void) { return ((group_t)fp[N_GROUP_END])(); }
static int n_send(uintptr_t buf, size_t n, int dt, int peer, uintptr_t c, uintptr_t s) {
	return ((send_t)fp[N_SEND])((const void*)buf, n, dt, peer, (void*)c, (void*)s);
}
static int n_recv(uintptr_t buf, size_t n, int dt, int peer, uintptr_t c, uintptr_t s) {
	return ((send_t)fp[N_RECV])((void*)buf, n, dt, peer, (void*)c, (void*)s);
}
static int n_all_gather(uintptr_t in, uintptr_t out, size_t n, int dt, uintptr_t c, uintptr_t s) {
	return ((all_gather_t)fp[N_ALL_GATHER])((const void*)in, (void*)out, n, dt, (void*)c, (void*)s);
}
static int n_all_reduce(uintptr_t in, uintptr_t out, size_t n, int dt, int op, uintptr_t c, uintptr_t s) {
	return ((all_reduce_t)fp[N_ALL_REDUCE])((const void*)in, (void*)out, n, dt, op, (void*)c, (void*)s);
}
typedef int (*comm_int_t)(void*, int*);
static int n_user_rank(uintptr_t c, int* r) { return ((comm_int_t)fp[N_USER_RANK])((void*)c, r); }
static int n_count(uintptr_t c, int* n) { return ((comm_int_t)fp[N_COUNT])((void*)c, n); }
static const char* n_error_string(int r) { return ((error_string_t)fp[N_ERROR_STRING])(r); }
static const char* n_last_error(uintptr_t c) {
	return fp[N_LAST_ERROR] ? ((last_error_t)fp[N_LAST_ERROR])((void*)c) : 0;
}
*/
import "C"

import (
	"fmt"
	"time"
	"unsafe"

	"github.com/framepack-go/framepack/internal/dynlib"
)

var symbolTable = (&[C.N_N]dynlib.Symbol{
	C.N_VERSION:      {Name: "ncclGetVersion"},
	C.N_UNIQUE_ID:    {Name: "ncclGetUniqueId"},
	C.N_INIT_RANK:    {Name: "ncclCommInitRank"},
	C.N_SPLIT:        {Name: "ncclCommSplit", Optional: true}, // 2.18; older RCCL (ROCm 5) lacks it
	C.N_DESTROY:      {Name: "ncclCommDestroy"},
	C.N_ABORT:        {Name: "ncclCommAbort"},
	C.N_ASYNC_ERROR:  {Name: "ncclCommGetAsyncError"},
	C.N_GROUP_START:  {Name: "ncclGroupStart"},
	C.N_GROUP_END:    {Name: "ncclGroupEnd"},
	C.N_SEND:         {Name: "ncclSend"},
	C.N_RECV:         {Name: "ncclRecv"},
	C.N_ALL_GATHER:   {Name: "ncclAllGather"},
	C.N_ALL_REDUCE:   {Name: "ncclAllReduce"},
	C.N_ERROR_STRING: {Name: "ncclGetErrorString"},
	C.N_LAST_ERROR:   {Name: "ncclGetLastError", Optional: true},
	C.N_USER_RANK:    {Name: "ncclCommUserRank"},
	C.N_COUNT:        {Name: "ncclCommCount"},
})[:]

func init() { libs.Symbols, libs.Init = symbols, initLib }

func symbols(Vendor) []dynlib.Symbol { return symbolTable }

// One process loads one of the two; the table is shared.
func initLib(v Vendor, t *dynlib.Table) (*Lib, error) {
	for i, p := range t.Addrs {
		C.fp_set(C.int(i), C.uintptr_t(p))
	}
	l := &Lib{vendor: v, path: t.Path, hasSplit: t.Addrs[C.N_SPLIT] != 0}
	var ver C.int
	if err := l.check("ncclGetVersion", 0, C.n_version(&ver)); err != nil {
		return nil, err
	}
	l.version = int(ver)
	if l.version < 20700 {
		return nil, fmt.Errorf("nccl: %s is version %d; ncclSend and ncclRecv need 2.7 or later", t.Path, l.version)
	}
	return l, nil
}

func (l *Lib) check(fn string, comm uintptr, r C.int) error {
	if r == 0 {
		return nil
	}
	text := C.GoString(C.n_error_string(r))
	if comm != 0 {
		if last := C.n_last_error(C.uintptr_t(comm)); last != nil && C.GoString(last) != "" {
			text += ": " + C.GoString(last)
		}
	}
	return &Error{Lib: "nccl", Func: fn, Status: int(r), Name: text}
}

// Comm is one rank's communicator. Its calls are made from a goroutine
// bound to the rank's device (hip.Device.Bind).
type Comm struct {
	lib        *Lib
	h          uintptr
	rank, size int
}

func (c *Comm) Rank() int { return c.rank }
func (c *Comm) Size() int { return c.size }

// NewUniqueID makes a new communicator's id (rank 0).
func (l *Lib) NewUniqueID() (UniqueID, error) {
	var id UniqueID
	err := l.check("ncclGetUniqueId", 0, C.n_unique_id(unsafe.Pointer(&id[0])))
	return id, err
}

// NewComm joins rank of size to the communicator id. ncclCommInitRank
// blocks until every rank has joined, so it runs on a thread of its own,
// made to use the rank's device by bind; the wait is bounded by timeout,
// after which NewComm returns an error and leaves that thread behind (the
// process is expected to exit: its peers are gone).
func (l *Lib) NewComm(id UniqueID, rank, size int, timeout time.Duration, bind func() (unbind func(), err error)) (*Comm, error) {
	if size < 1 || rank < 0 || rank >= size {
		return nil, fmt.Errorf("nccl: rank %d of %d", rank, size)
	}
	type result struct {
		h   uintptr
		err error
	}
	done := make(chan result, 1)
	go func() {
		unbind, err := bind()
		if err != nil {
			done <- result{err: err}
			return
		}
		defer unbind()
		var h C.uintptr_t
		r := C.n_init_rank(&h, C.int(size), unsafe.Pointer(&id[0]), C.int(rank))
		done <- result{uintptr(h), l.check("ncclCommInitRank", 0, r)}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			return nil, r.err
		}
		return &Comm{lib: l, h: r.h, rank: rank, size: size}, nil
	case <-time.After(timeout):
		return nil, fmt.Errorf("nccl: rank %d of %d: the other ranks did not join within %v", rank, size, timeout)
	}
}

// Split is ncclCommSplit: the ranks passing the same color form a new
// communicator, ordered by key. It returns ErrNoSplit where the library
// lacks ncclCommSplit (before 2.18).
func (c *Comm) Split(color, key int) (*Comm, error) {
	if !c.lib.hasSplit {
		return nil, ErrNoSplit
	}
	var h C.uintptr_t
	if err := c.lib.check("ncclCommSplit", c.h, C.n_split(C.uintptr_t(c.h), C.int(color), C.int(key), &h)); err != nil {
		return nil, err
	}
	n := &Comm{lib: c.lib, h: uintptr(h)}
	var rank, size C.int
	if err := c.lib.check("ncclCommUserRank", n.h, C.n_user_rank(h, &rank)); err != nil {
		return nil, err
	}
	if err := c.lib.check("ncclCommCount", n.h, C.n_count(h, &size)); err != nil {
		return nil, err
	}
	n.rank, n.size = int(rank), int(size)
	return n, nil
}

// Destroy frees the communicator after its queued work.
func (c *Comm) Destroy() error { return c.free(C.N_DESTROY) }

// Abort frees the communicator at once, stopping its queued and running
// work (a peer died); safe from another goroutine.
func (c *Comm) Abort() error { return c.free(C.N_ABORT) }

// free frees the communicator with the table's call i (ncclCommDestroy or
// ncclCommAbort).
func (c *Comm) free(i C.int) error {
	if c == nil || c.h == 0 {
		return nil
	}
	err := c.lib.check(symbolTable[i].Name, 0, C.n_free(i, C.uintptr_t(c.h)))
	c.h = 0
	return err
}

// AsyncError reports an error the communicator met in the background.
func (c *Comm) AsyncError() error {
	var e C.int
	if err := c.lib.check("ncclCommGetAsyncError", c.h, C.n_async_error(C.uintptr_t(c.h), &e)); err != nil {
		return err
	}
	return c.lib.check("async", c.h, e)
}

func (c *Comm) GroupStart() error { return c.lib.check("ncclGroupStart", 0, C.n_group_start()) }
func (c *Comm) GroupEnd() error   { return c.lib.check("ncclGroupEnd", c.h, C.n_group_end()) }

// Send queues count elements at buf to peer on stream.
func (c *Comm) Send(buf uintptr, count int, dt DType, peer int, stream uintptr) error {
	return c.lib.check("ncclSend", c.h, C.n_send(C.uintptr_t(buf), C.size_t(count), C.int(dt), C.int(peer), C.uintptr_t(c.h), C.uintptr_t(stream)))
}

// Recv queues the receipt of count elements from peer into buf on stream.
func (c *Comm) Recv(buf uintptr, count int, dt DType, peer int, stream uintptr) error {
	return c.lib.check("ncclRecv", c.h, C.n_recv(C.uintptr_t(buf), C.size_t(count), C.int(dt), C.int(peer), C.uintptr_t(c.h), C.uintptr_t(stream)))
}

// AllGather gathers count elements of every rank into out, rank by rank.
func (c *Comm) AllGather(in, out uintptr, count int, dt DType, stream uintptr) error {
	return c.lib.check("ncclAllGather", c.h, C.n_all_gather(C.uintptr_t(in), C.uintptr_t(out), C.size_t(count), C.int(dt), C.uintptr_t(c.h), C.uintptr_t(stream)))
}

// AllReduce reduces count elements over the ranks into out.
func (c *Comm) AllReduce(in, out uintptr, count int, dt DType, op RedOp, stream uintptr) error {
	return c.lib.check("ncclAllReduce", c.h, C.n_all_reduce(C.uintptr_t(in), C.uintptr_t(out), C.size_t(count), C.int(dt), C.int(op), C.uintptr_t(c.h), C.uintptr_t(stream)))
}
