package tensor

// Comm connects the ranks of a group, each rank with its own backend: a
// process per GPU through NCCL or RCCL (backend/gpu), or goroutines sharing
// memory (package parallel). Every method is collective: all ranks of the
// group call it in the same order with matching shapes and dtypes. Tensors
// are contiguous and live on the calling rank's backend; the exchange is
// queued on that backend in order with its other work, so the results can
// be used by the next op without a sync.
type Comm interface {
	// Rank is this rank's index in the group, 0 ≤ Rank < Size.
	Rank() int
	Size() int
	// AllToAll sends send[p] to rank p and fills recv[p] with what rank p
	// sent to this rank, for every p (send[Rank] lands in recv[Rank]).
	// send[p] here and recv[Rank] on rank p have the same dtype and element
	// count; sizes may differ from peer to peer.
	AllToAll(send, recv []*Tensor) error
	// AllGather fills recv[p] with rank p's x; every rank's x has the same
	// dtype and element count.
	AllGather(x *Tensor, recv []*Tensor) error
	// AllReduceSum replaces x (F32) with its elementwise sum over the ranks.
	AllReduceSum(x *Tensor) error
	// Split divides the group into subgroups: the ranks that pass the same
	// color form one, ordered by key (then by rank in this group).
	Split(color, key int) (Comm, error)
	// Close releases the communicator (not the ranks' backends).
	Close() error
}
