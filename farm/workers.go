package farm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Workers announce themselves in the bucket BucketWorkers, one key a
// worker, written again every WorkerBeat: an entry not written for
// WorkerTTL (a worker killed, its machine off or cut from the network)
// expires, and the worker no longer counts as live.
const (
	WorkerTTL  = 15 * time.Second
	WorkerBeat = WorkerTTL / 3
)

// WorkerInfo is a live worker: who it is and what it can run.
type WorkerInfo struct {
	Name string `json:"name"`
	// Instance is this run of the worker (a restart makes a new one).
	Instance string `json:"instance"`
	Host     string `json:"host,omitempty"`
	PID      int    `json:"pid,omitempty"`
	// Device is the compute device, GPUs the ordinals it runs on.
	Device string `json:"device,omitempty"`
	GPUs   []int  `json:"gpus,omitempty"`
	// Models is the model folder; Variants the transformer variants it
	// has (nil: it runs any); LoRAs the LoRA files it has.
	Models   string   `json:"models,omitempty"`
	Variants []string `json:"variants,omitempty"`
	LoRAs    []string `json:"loras,omitempty"`
	// DeviceBytes is its device memory budget, HostBytes its host budget.
	DeviceBytes int64  `json:"device_bytes,omitempty"`
	HostBytes   int64  `json:"host_bytes,omitempty"`
	Version     string `json:"version,omitempty"`
	// Job is the job it runs, if any, and Section the sections of it
	// finished.
	Job     string    `json:"job,omitempty"`
	Started time.Time `json:"started"`
	Seen    time.Time `json:"seen"`
}

// ValidWorkerName accepts names a worker can announce itself under.
func ValidWorkerName(name string) error {
	if name == "" || len(name) > 64 || strings.HasPrefix(name, ".") || strings.HasSuffix(name, ".") ||
		strings.ContainsFunc(name, func(r rune) bool {
			return !(r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r == '-' || r == '_' || r == '.')
		}) {
		return fmt.Errorf("worker name %q: want 1–64 letters, digits, '-', '_' or '.'", name)
	}
	return nil
}

// Announce writes w as live now. A worker calls it every WorkerBeat.
func (f *Farm) Announce(ctx context.Context, w *WorkerInfo) error {
	if err := ValidWorkerName(w.Name); err != nil {
		return err
	}
	w.Seen = time.Now().UTC()
	b, err := json.Marshal(w)
	if err != nil {
		return err
	}
	if err := retry(ctx, func(ctx context.Context) error { _, err := f.workers.Put(ctx, w.Name, b); return err }); err != nil {
		return fmt.Errorf("farm: announcing worker %s: %w", w.Name, err)
	}
	// Keep the progress acknowledgements in step with the consumer's ack
	// wait, which another process may have changed.
	f.refreshAckWait(ctx)
	return nil
}

// Withdraw removes worker name's entry, if it is still instance's (a
// worker that stops).
func (f *Farm) Withdraw(ctx context.Context, name, instance string) {
	e, err := f.workers.Get(ctx, name)
	if err != nil {
		return
	}
	var w WorkerInfo
	if json.Unmarshal(e.Value(), &w) == nil && w.Instance == instance {
		f.workers.Delete(ctx, name, jetstream.LastRevision(e.Revision()))
	}
}

// Workers lists the live workers, by name.
func (f *Farm) Workers(ctx context.Context) ([]*WorkerInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	lister, err := f.workers.ListKeys(ctx)
	if err != nil {
		if errors.Is(err, jetstream.ErrNoKeysFound) {
			return nil, nil
		}
		return nil, fmt.Errorf("farm: listing workers: %w", err)
	}
	var list []*WorkerInfo
	for k := range lister.Keys() {
		e, err := f.workers.Get(ctx, k)
		if err != nil {
			continue // expired meanwhile
		}
		var w WorkerInfo
		if json.Unmarshal(e.Value(), &w) != nil || time.Since(w.Seen) > WorkerTTL+time.Second {
			continue
		}
		list = append(list, &w)
	}
	slices.SortFunc(list, func(a, b *WorkerInfo) int { return strings.Compare(a.Name, b.Name) })
	return list, nil
}

// setRefusal records r in j, replacing the same worker's; it tells
// whether anything changed.
func setRefusal(j *Job, r Refusal) bool {
	for i, o := range j.Refusals {
		if o.Worker == r.Worker {
			if o.Instance == r.Instance && o.Reason == r.Reason {
				return false
			}
			j.Refusals[i] = r
			return true
		}
	}
	j.Refusals = append(j.Refusals, r)
	return true
}

// Unrunnable is why no live worker can run j: every worker of live
// refused it (a refusal of an earlier run of a worker does not count);
// "" while one may run it, or no worker is live to say.
func Unrunnable(j *Job, live []*WorkerInfo) string {
	if len(live) == 0 {
		return ""
	}
	var why []string
	for _, w := range live {
		i := slices.IndexFunc(j.Refusals, func(r Refusal) bool { return r.Worker == w.Name && r.Instance == w.Instance })
		if i < 0 {
			return ""
		}
		why = append(why, w.Name+": "+j.Refusals[i].Reason)
	}
	return "no live worker can run it (" + strings.Join(why, "; ") + ")"
}

// isLive tells whether a worker of that name is in live.
func isLive(live []*WorkerInfo, name string) bool {
	return slices.ContainsFunc(live, func(w *WorkerInfo) bool { return w.Name == name })
}
