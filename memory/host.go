package memory

import (
	"fmt"
	"path/filepath"
	"strings"
	"sync"
)

// Host is the host-memory budget: a limit (--ram-limit) and what each model
// holds in host memory now (heap copies, pinned staging of streamed
// weights). A model is charged with Set, which replaces its previous
// charge, so a model is counted once whatever moves it makes; its mapped
// file pages are not charged, as the loaders release them once copied.
// On a unified-memory device the device's allocations are host memory too:
// Unify makes them part of this one pool.
type Host struct {
	mu     sync.Mutex
	limit  int64
	total  int64 // MemTotal, 0 when unknown
	source string
	owners map[string]hostHolding
	order  []string
	peak   int64
	device *Backend // set by Unify
}

type hostHolding struct {
	bytes int64
	how   string
}

// hostMargin is what the default --ram-limit leaves to the OS, the page
// cache of the weights being read and other processes: max(2 GiB, an
// eighth of memory).
func hostMargin(memTotal int64) int64 { return max(2*GiB, memTotal/8) }

// DefaultRAMLimit is the host budget when --ram-limit is not given:
// MemAvailable less a margin (max(2 GiB, MemTotal/8)), at most MemTotal
// less the same margin, and never below a quarter of MemAvailable.
func DefaultRAMLimit(memTotal, memAvailable int64) int64 {
	if memTotal <= 0 {
		return 0
	}
	if memAvailable <= 0 || memAvailable > memTotal {
		memAvailable = memTotal
	}
	m := hostMargin(memTotal)
	return max(min(memAvailable-m, memTotal-m), memAvailable/4)
}

// NewHost is a host budget of limit bytes (≤ 0: unlimited) on a machine
// with total bytes of memory (0: unknown); source says where the figures
// came from.
func NewHost(limit, total int64, source string) *Host {
	return &Host{limit: limit, total: total, source: source, owners: map[string]hostHolding{}}
}

// HostFor reads /proc/meminfo under root ("/" normally) and applies the
// --ram-limit flag (unset: DefaultRAMLimit; "16G", or a fraction of
// MemTotal such as "0.5" or "50%"). Without /proc/meminfo (not Linux) and
// without a flag the budget is unlimited.
func HostFor(root string, ramLimit Size) (*Host, error) {
	path := filepath.Join(root, "proc", "meminfo")
	mi, err := readMeminfo(path)
	var total, avail int64
	if err == nil {
		total, avail = mi["MemTotal"], mi["MemAvailable"]
		if _, ok := mi["MemAvailable"]; !ok {
			avail = mi["MemFree"] + mi["Buffers"] + mi["Cached"]
		}
	}
	src := fmt.Sprintf("system memory %s, %s available", FormatBytes(total), FormatBytes(avail))
	if total <= 0 {
		src = "system memory unknown (" + path + " unreadable)"
	}
	if ramLimit.IsSet() {
		v, err := ramLimit.Of(total)
		if err != nil {
			return nil, fmt.Errorf("--ram-limit: %w", err)
		}
		if v <= 0 {
			return nil, fmt.Errorf("--ram-limit %s: the host budget must be above 0", ramLimit)
		}
		if total > 0 && v > total {
			return nil, fmt.Errorf("--ram-limit %s (%s) is more than the machine's %s of memory", ramLimit, FormatBytes(v), FormatBytes(total))
		}
		return NewHost(v, total, src+"; --ram-limit "+ramLimit.String()), nil
	}
	if total <= 0 {
		return NewHost(0, 0, src), nil
	}
	return NewHost(DefaultRAMLimit(total, avail), total, src), nil
}

// Unify makes mb's device allocations count against this budget (an
// integrated GPU's memory is system memory: one pool, counted once), and
// lowers mb's cap to the host limit when that is smaller.
func (h *Host) Unify(mb *Backend) {
	h.mu.Lock()
	h.device = mb
	limit := h.limit
	h.mu.Unlock()
	if b := mb.Budget(); limit > 0 && b.Cap > limit {
		b.Cap = limit
		b.Preserve = min(b.Preserve, b.Cap/2)
		mb.SetBudget(b)
	}
}

// Unified reports whether the device's memory is part of this pool.
func (h *Host) Unified() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.device != nil
}

// Limit is the budget (0: unlimited).
func (h *Host) Limit() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.limit
}

// Set charges owner with bytes of host memory held as how ("heap",
// "pinned"), replacing what it was charged before; 0 removes the charge.
func (h *Host) Set(owner string, bytes int64, how string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.owners[owner]; !ok {
		h.order = append(h.order, owner)
	}
	h.owners[owner] = hostHolding{max(0, bytes), how}
	h.peak = max(h.peak, h.inUse())
}

// Held is what owner holds in host memory.
func (h *Host) Held(owner string) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.owners[owner].bytes
}

// InUse is what the models hold in the pool: their host charges, plus the
// device's allocations when the pool is unified.
func (h *Host) InUse() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.inUse()
}

func (h *Host) inUse() int64 {
	var n int64
	for _, o := range h.owners {
		n += o.bytes
	}
	if h.device != nil {
		n += h.device.Stats().InUse
	}
	return n
}

// Available is the room left in the budget (a very large number when it is
// unlimited).
func (h *Host) Available() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.limit <= 0 {
		return 1 << 62
	}
	return max(0, h.limit-h.inUse())
}

// StreamSource is where streamed weights are read from for each upload.
type StreamSource uint8

const (
	// StreamPinned: a copy of the streamed weights in page-locked host
	// memory, uploaded asynchronously ahead of use (fast; the weights'
	// size in host memory).
	StreamPinned StreamSource = iota
	// StreamMapped: each block read from the memory-mapped checkpoint when
	// it is needed, the next one read ahead, its pages released after the
	// upload (slower; about one block in host memory).
	StreamMapped
)

func (s StreamSource) String() string {
	if s == StreamMapped {
		return "mapped file"
	}
	return "pinned host memory"
}

// HostWorkReserve is left in the host budget beside streamed weights for
// the host side of a job: history latents, decoded pixels, the encoders'
// outputs, the runtime's own allocations.
const HostWorkReserve = 2 * GiB

// PlanStream chooses where owner's streamed weights of bytes live: a
// pinned copy when it fits the budget beside HostWorkReserve (what owner
// holds now is counted as freed, since the new placement replaces it),
// else streaming from the mapped file. The reason is for the log.
func (h *Host) PlanStream(owner string, bytes int64) (StreamSource, string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.limit <= 0 {
		return StreamPinned, "host memory is not limited"
	}
	room := h.limit - (h.inUse() - h.owners[owner].bytes) - HostWorkReserve
	if bytes <= room {
		return StreamPinned, fmt.Sprintf("%s of streamed weights fit the %s host budget beside %s for the job",
			FormatBytes(bytes), FormatBytes(h.limit), FormatBytes(HostWorkReserve))
	}
	return StreamMapped, fmt.Sprintf("%s of streamed weights do not fit the %s host budget (%s free beside %s for the job); blocks stream from the mapped file with read-ahead",
		FormatBytes(bytes), FormatBytes(h.limit), FormatBytes(max(0, room)), FormatBytes(HostWorkReserve))
}

// HostStats is a snapshot of the host budget.
type HostStats struct {
	Limit, Total, InUse, Peak int64
	Device                    int64 // the device's allocations, when unified
	Unified                   bool
	Owners                    []HostHolding
	// RSS and RSSPeak are the process's resident set now and its peak
	// (VmRSS, VmHWM), -1 when unknown: what the budget is measured by.
	RSS, RSSPeak int64
}

// HostHolding is what one model holds in host memory.
type HostHolding struct {
	Owner string
	Bytes int64
	How   string
}

// Stats is the budget's accounting now, with the process's resident set.
func (h *Host) Stats() HostStats {
	rss, hwm := ReadRSS()
	h.mu.Lock()
	defer h.mu.Unlock()
	s := HostStats{Limit: h.limit, Total: h.total, InUse: h.inUse(), Peak: h.peak, Unified: h.device != nil, RSS: rss, RSSPeak: hwm}
	if h.device != nil {
		s.Device = h.device.Stats().InUse
	}
	for _, o := range h.order {
		s.Owners = append(s.Owners, HostHolding{o, h.owners[o].bytes, h.owners[o].how})
	}
	return s
}

// String is the one-line report: "host: limit 16.0 GiB, models 12.1 GiB,
// rss 12.9 GiB (peak 13.2 GiB); transformer 12.1 GiB pinned, vae 0 B".
func (s HostStats) String() string {
	var sb strings.Builder
	lim := "unlimited"
	if s.Limit > 0 {
		lim = FormatBytes(s.Limit)
	}
	pool := "host"
	if s.Unified {
		pool = "host and device (one pool)"
	}
	fmt.Fprintf(&sb, "%s: limit %s, models %s", pool, lim, FormatBytes(s.InUse))
	if s.Unified {
		fmt.Fprintf(&sb, " (device %s)", FormatBytes(s.Device))
	}
	if s.RSS >= 0 {
		fmt.Fprintf(&sb, ", rss %s (peak %s)", FormatBytes(s.RSS), FormatBytes(s.RSSPeak))
	}
	for i, o := range s.Owners {
		fmt.Fprintf(&sb, "%s%s %s", listSep(i), o.Owner, FormatBytes(o.Bytes))
		if o.How != "" && o.Bytes > 0 {
			sb.WriteString(" " + o.How)
		}
	}
	return sb.String()
}

// ReadRSS is the process's resident set now and its peak (VmRSS and VmHWM
// of /proc/self/status), -1 each where the system does not say.
func ReadRSS() (rss, peak int64) {
	rss, peak = -1, -1
	st, err := readMeminfo("/proc/self/status")
	if err != nil {
		return rss, peak
	}
	if v, ok := st["VmRSS"]; ok {
		rss = v
	}
	if v, ok := st["VmHWM"]; ok {
		peak = v
	}
	return rss, peak
}
