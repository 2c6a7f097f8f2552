package convchain

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/framepack-go/framepack/tensor"
)

// sleepy's search never returns, as a driver's hung search does: only the
// chain's kill ends it.
func init() {
	RegisterSearch("sleepy", func(context.Context, SearchRequest) (*Plan, error) { select {} })
}

// shape is one convolution with its expected output (the CPU backend's).
type shape struct {
	x, w, b *tensor.Tensor
	want    []float32
}

// manyShapes are n convolutions of different input sizes.
func manyShapes(f *fixture, n int) []shape {
	rng := rand.New(rand.NewPCG(3, 4))
	rnd := func(dims ...int) *tensor.Tensor {
		v := make([]float32, tensor.Numel(dims))
		for i := range v {
			v[i] = rng.Float32()*2 - 1
		}
		return tensor.FromFloat32(v, dims...)
	}
	out := make([]shape, n)
	for i := range out {
		sh := shape{x: rnd(1, 3, 3+i%3, 4+i, 5), w: rnd(4, 3, 3, 3, 3), b: rnd(4)}
		s := tensor.NewScope(f.cpu)
		sh.want = append([]float32(nil), tensor.Float32s(s.Conv3d(sh.x, sh.w, sh.b, [3]int{1, 1, 1}, [3]int{1, 1, 1}))...)
		s.Close()
		out[i] = sh
	}
	return out
}

// convAll runs every shape through c and checks each result.
func convAll(t *testing.T, f *fixture, c *Chain, shapes []shape) {
	t.Helper()
	s := tensor.NewScope(Wrap(f.cpu, c))
	defer s.Close()
	for i, sh := range shapes {
		var got []float32
		if err := tensor.Catch(func() {
			got = tensor.Float32s(s.Conv3d(sh.x, sh.w, sh.b, [3]int{1, 1, 1}, [3]int{1, 1, 1}))
		}); err != nil {
			t.Fatalf("shape %d: %v", i, err)
		}
		for j := range got {
			if got[j] != sh.want[j] {
				t.Fatalf("shape %d value %d = %v, want %v", i, j, got[j], sh.want[j])
			}
		}
	}
}

var timeoutLine = regexp.MustCompile(`conv3d: tier (\w+) search timed out once; (\d+) other shapes? did not wait \(([0-9.]+) s in all\)`)

// A search that hangs at every tier, or at any one tier, costs one deadline
// in all: after the first timeout no shape waits on that tier's search, and
// the tier plans from its heuristics. Many shapes finish within one
// deadline plus 1 s.
func TestHangEveryTierManyShapes(t *testing.T) {
	t.Parallel() // its searches sleep out their deadlines: side by side
	const deadline = time.Second
	const n = 12
	cases := []struct {
		faults string
		hung   string // the tier whose search times out and then runs
	}{
		{"conv3d.vendor=hang,conv3d.gemm=hang,conv3d.naive=hang,conv3d.cpu=hang", "vendor"},
		{"conv3d.vendor=hang", "vendor"},
		{"conv3d.vendor=error,conv3d.gemm=hang", "gemm"},
		{"conv3d.vendor=error,conv3d.gemm=error,conv3d.naive=hang", "naive"},
		{"conv3d.vendor=error,conv3d.gemm=error,conv3d.naive=error,conv3d.cpu=hang", "cpu"},
	}
	for _, tc := range cases {
		t.Run(tc.faults, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			// Fake tiers with plans of their own (heuristics) and no
			// registered search: only the injected hangs search.
			f.tiers[0].name = "vendor"
			for _, ft := range f.tiers {
				ft.search = false
			}
			shapes := manyShapes(f, n)
			c := f.chain(t, tc.faults, deadline)
			start := time.Now()
			convAll(t, f, c, shapes)
			el := time.Since(start)
			if el > deadline+time.Second {
				t.Errorf("%d shapes took %v with a %v deadline, want at most one deadline plus 1 s", n, el, deadline)
			}
			var hung TierSummary
			for _, s := range c.Summary() {
				if s.Tier == tc.hung {
					hung = s
				} else if s.Searches != 0 {
					t.Errorf("tier %s searched: %+v", s.Tier, s)
				}
			}
			if hung.Searches != 1 || !hung.SearchTimedOut || hung.Unwaited != n-1 || hung.Convs != n {
				t.Fatalf("tier %s: %+v, want one timed-out search, %d shapes planned without one and %d convolutions", tc.hung, hung, n-1, n)
			}
			c.LogSummary()
			m := timeoutLine.FindStringSubmatch(f.log.String())
			if m == nil || m[1] != tc.hung || m[2] != strconv.Itoa(n-1) {
				t.Fatalf("no timeout line for tier %s in the log:\n%s", tc.hung, f.log)
			}
			if secs, _ := strconv.ParseFloat(m[3], 64); secs < deadline.Seconds() || secs > (deadline+time.Second).Seconds() {
				t.Errorf("searches took %s s in all, want one deadline", m[3])
			}
			t.Logf("%s (%d shapes in %v)", m[0], n, el.Round(time.Millisecond))
		})
	}
}

// A search timeout is remembered beside the choices: a later chain on the
// same device plans the tier without searching, for new shapes too, until
// ForgetSearchTimeouts; another device still searches.
func TestSearchTimeoutRemembered(t *testing.T) {
	t.Parallel()
	const deadline = time.Second
	f := newFixture(t)
	f.tiers = []*fakeTier{{name: "sleepy", be: f.cpu}, {name: "gemm", be: f.cpu}}
	shapes := manyShapes(f, 4)
	mk := func(device string) *Chain {
		var tiers []Tier
		for _, ft := range f.tiers {
			tiers = append(tiers, ft)
		}
		c, err := New(append(tiers, CPUTier(f.cpu)), Options{Device: device, CachePath: f.cache, SearchDeadline: deadline,
			Faults: &Faults{}, Log: slog.New(slog.NewTextHandler(f.log, nil))})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	c1 := mk("dev")
	convAll(t, f, c1, shapes[:2])
	if s := c1.Summary()[0]; s.Searches != 1 || s.Unwaited != 1 || s.Convs != 2 {
		t.Fatalf("first run: %+v", s)
	}
	tos, err := SearchTimeouts(f.cache)
	if err != nil || len(tos) != 1 || tos[0].Device != "dev" || tos[0].Tier != "sleepy" || tos[0].Deadline != 1 {
		t.Fatalf("remembered timeouts %+v %v", tos, err)
	}
	t.Log(tos[0])

	// A later run: remembered shapes and a new one, none searched.
	c2 := mk("dev")
	start := time.Now()
	convAll(t, f, c2, shapes[:3])
	if el := time.Since(start); el > deadline/2 {
		t.Errorf("a run after a remembered timeout took %v", el)
	}
	if s := c2.Summary()[0]; s.Searches != 0 || s.Convs != 3 || s.SearchTimedOut {
		t.Fatalf("second run: %+v", s)
	}
	if !strings.Contains(f.log.String(), "tier sleepy's search overran its deadline on this device") {
		t.Errorf("no line about the remembered timeout:\n%s", f.log)
	}
	// Another device searches (and times out) on its own.
	if s := func() TierSummary { c := mk("other"); convAll(t, f, c, shapes[3:]); return c.Summary()[0] }(); s.Searches != 1 {
		t.Fatalf("another device: %+v", s)
	}

	n, err := ForgetSearchTimeouts(f.cache)
	if err != nil || n != 2 {
		t.Fatalf("forgot %d, %v; want the 2 devices' timeouts", n, err)
	}
	if tos, _ := SearchTimeouts(f.cache); len(tos) != 0 {
		t.Fatalf("still remembered: %v", tos)
	}
	if ch, _ := Remembered(f.cache); len(ch) != 4 {
		t.Fatalf("the choices must stay: %d", len(ch))
	}
	// Searched again: a choice made without a search is searched once
	// searches are back.
	c3 := mk("dev")
	convAll(t, f, c3, shapes[:1])
	if s := c3.Summary()[0]; s.Searches != 1 || !s.SearchTimedOut {
		t.Fatalf("after forgetting: %+v", s)
	}
}

// A bound context that is cancelled kills the search child at once; the
// convolution fails with the context's error, nothing is skipped or
// remembered, and no later search starts while it stays cancelled.
func TestBindCancelsSearch(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.tiers = []*fakeTier{{name: "sleepy", be: f.cpu}, {name: "gemm", be: f.cpu}}
	var tiers []Tier
	for _, ft := range f.tiers {
		tiers = append(tiers, ft)
	}
	c, err := New(append(tiers, CPUTier(f.cpu)), Options{Device: "dev", CachePath: f.cache, SearchDeadline: time.Minute,
		Faults: &Faults{}, Log: slog.New(slog.NewTextHandler(f.log, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	unbind := Bind(Wrap(f.cpu, c), ctx)
	defer unbind()
	time.AfterFunc(300*time.Millisecond, cancel)
	start := time.Now()
	_, err = f.conv(t, c)
	el := time.Since(start)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("want an error wrapping context.Canceled, got %v", err)
	}
	if el > 300*time.Millisecond+time.Second {
		t.Errorf("the search stopped %v after the start, 300 ms after which its context was cancelled", el)
	}
	m := regexp.MustCompile(`\(pid (\d+)\)`).FindStringSubmatch(err.Error())
	if m == nil {
		t.Fatalf("no pid in %v", err)
	}
	pid, _ := strconv.Atoi(m[1])
	for i := 0; alive(pid); i++ {
		if i == 50 {
			t.Fatalf("search child %d survived the cancellation", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
	s := c.Summary()
	if len(s[0].Skips) != 0 || s[0].SearchTimedOut || s[1].Convs != 0 {
		t.Fatalf("a cancelled search must not skip the tier or move on: %+v", s)
	}
	if _, err := os.Stat(f.cache); !os.IsNotExist(err) {
		t.Fatalf("a cancelled search wrote the choices file: %v", err)
	}
	// Still cancelled: fails at once without a search.
	start = time.Now()
	if _, err := f.conv(t, c); !errors.Is(err, context.Canceled) || time.Since(start) > 100*time.Millisecond {
		t.Fatalf("after the cancel: %v in %v", err, time.Since(start))
	}
	if n := c.Summary()[0].Searches; n != 1 {
		t.Fatalf("%d searches, want the one cancelled", n)
	}
	t.Logf("cancelled search: %v after the start (cancel at 300 ms): %v", el.Round(time.Millisecond), err)

	// Unbound, the chain searches again (and times out on its own).
	unbind()
	c.opt.SearchDeadline = 500 * time.Millisecond
	f.convOK(t, c)
	if s := c.Summary()[0]; s.Searches != 2 || !s.SearchTimedOut {
		t.Fatalf("unbound: %+v", s)
	}

	// A context bound to every chain (a command's signals) stops a chain
	// made after it too.
	all, cancelAll := context.WithCancel(context.Background())
	defer BindAll(all)()
	cancelAll()
	f.cache = t.TempDir() + "/other.json"
	c2, err := New(append(tiers, CPUTier(f.cpu)), Options{Device: "dev", CachePath: f.cache, Faults: &Faults{}, Log: c.log})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.conv(t, c2); !errors.Is(err, context.Canceled) {
		t.Fatalf("BindAll: %v", err)
	}
}
