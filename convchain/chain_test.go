package convchain

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/framepack-go/framepack/backend/cpu"
	"github.com/framepack-go/framepack/internal/testmode"
	"github.com/framepack-go/framepack/tensor"
)

func TestMain(m *testing.M) {
	MaybeRunChild()
	testmode.WaitingTests(8) // the hang tests sleep out their deadlines
	os.Exit(m.Run())
}

// The searches registered here exist in the child too: it is this test
// binary started again.
func init() {
	RegisterSearch("optimized", func(_ context.Context, req SearchRequest) (*Plan, error) {
		data, _ := json.Marshal(map[string]any{"solution": 7, "exhaustive": req.Exhaustive, "pid": os.Getpid(), "key": req.Key.String()})
		return &Plan{Algorithm: "fake solver 7", Data: data}, nil
	})
	// spawner starts a process that holds the child's stdout open, notes
	// its pid, and hangs: the kill must reach the grandchild too.
	RegisterSearch("spawner", func(context.Context, SearchRequest) (*Plan, error) {
		cmd := exec.Command("sleep", "60")
		cmd.Stdout = os.Stdout
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		os.WriteFile(os.Getenv("CONVCHAIN_TEST_PIDFILE"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644)
		select {}
	})
	RegisterSearch("crashy", func(context.Context, SearchRequest) (*Plan, error) {
		fmt.Fprintln(os.Stderr, "driver exploded")
		os.Exit(3)
		return nil, nil
	})
	RegisterSearch("hungry", func(context.Context, SearchRequest) (*Plan, error) {
		return nil, fmt.Errorf("workspace of 64 MiB: %w", tensor.ErrOutOfMemory)
	})
	RegisterSearch("naivest", func(context.Context, SearchRequest) (*Plan, error) {
		return &Plan{Algorithm: "ConvDirectNaiveConvFwd", Naive: true}, nil
	})
}

// fakeTier computes the convolution with the CPU backend and counts what
// the chain asks of it. With search set, it has a registered search under
// its name and refuses to plan without its result.
type fakeTier struct {
	name     string
	be       tensor.Backend
	search   bool
	plans    int
	runs     int
	searched []*Plan
}

func (f *fakeTier) Name() string { return f.name }

func (f *fakeTier) Plan(k Key, searched *Plan) (*Plan, error) {
	f.plans++
	f.searched = append(f.searched, searched)
	if f.search {
		if searched == nil {
			return nil, errors.New("no search result")
		}
		return &Plan{Algorithm: searched.Algorithm, Naive: searched.Naive, Data: searched.Data}, nil
	}
	return &Plan{Algorithm: f.name + " kernel"}, nil
}

func (f *fakeTier) Run(_ *Plan, dst, x, w, bias *tensor.Tensor, p tensor.ConvParams) error {
	f.runs++
	return f.be.Conv3d(dst, x, w, bias, p)
}

type fixture struct {
	cpu   *cpu.Backend
	tiers []*fakeTier
	cache string
	log   *bytes.Buffer
	x, w  *tensor.Tensor
	b     *tensor.Tensor
	want  []float32
}

func newFixture(t *testing.T) *fixture {
	be := cpu.New()
	f := &fixture{cpu: be, cache: filepath.Join(t.TempDir(), "conv3d.json"), log: &bytes.Buffer{}}
	f.tiers = []*fakeTier{
		{name: "optimized", be: be, search: true},
		{name: "gemm", be: be},
		{name: "naive", be: be},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	rnd := func(shape ...int) *tensor.Tensor {
		v := make([]float32, tensor.Numel(shape))
		for i := range v {
			v[i] = rng.Float32()*2 - 1
		}
		return tensor.FromFloat32(v, shape...)
	}
	f.x, f.w, f.b = rnd(1, 4, 5, 8, 8), rnd(6, 4, 3, 3, 3), rnd(6)
	// The reference: the CPU backend's conv3d, not through any chain.
	s := tensor.NewScope(be)
	f.want = append([]float32(nil), tensor.Float32s(s.Conv3d(f.x, f.w, f.b, [3]int{1, 1, 1}, [3]int{1, 1, 1}))...)
	s.Close()
	return f
}

func (f *fixture) chain(t *testing.T, faults string, deadline time.Duration, extra ...Tier) *Chain {
	t.Helper()
	fl, err := ParseFaults(faults)
	if err != nil {
		t.Fatal(err)
	}
	var tiers []Tier
	for _, ft := range f.tiers {
		tiers = append(tiers, ft)
	}
	tiers = append(tiers, extra...)
	tiers = append(tiers, CPUTier(f.cpu))
	c, err := New(tiers, Options{Device: "test-device", CachePath: f.cache, SearchDeadline: deadline, Faults: fl,
		Log: slog.New(slog.NewTextHandler(f.log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// conv runs the fixture's convolution through c via a Scope on a backend
// whose Conv3d is the chain.
func (f *fixture) conv(t *testing.T, c *Chain) ([]float32, error) {
	t.Helper()
	s := tensor.NewScope(Wrap(f.cpu, c))
	defer s.Close()
	var out []float32
	err := tensor.Catch(func() {
		y := s.Conv3d(f.x, f.w, f.b, [3]int{1, 1, 1}, [3]int{1, 1, 1})
		out = append([]float32(nil), tensor.Float32s(y)...)
	})
	return out, err
}

// convOK runs the convolution through c and checks its result.
func (f *fixture) convOK(t *testing.T, c *Chain) {
	t.Helper()
	got, err := f.conv(t, c)
	if err != nil {
		t.Fatal(err)
	}
	f.check(t, got)
}

func (f *fixture) check(t *testing.T, got []float32) {
	t.Helper()
	if len(got) != len(f.want) {
		t.Fatalf("%d values, want %d", len(got), len(f.want))
	}
	for i := range got {
		if got[i] != f.want[i] {
			t.Fatalf("value %d = %v, want %v", i, got[i], f.want[i])
		}
	}
}

func (f *fixture) runs() []int {
	out := make([]int, len(f.tiers))
	for i, ft := range f.tiers {
		out[i] = ft.runs
	}
	return out
}

func TestOptimizedTierWithSearch(t *testing.T) {
	f := newFixture(t)
	c := f.chain(t, "", 20*time.Second)
	f.convOK(t, c)
	if r := f.runs(); r[0] != 1 || r[1]+r[2] != 0 {
		t.Fatalf("runs %v", r)
	}
	// The plan came from another process.
	var data struct {
		Solution   int
		Exhaustive bool
		Pid        int
	}
	if err := json.Unmarshal(f.tiers[0].searched[0].Data, &data); err != nil || data.Solution != 7 || data.Pid == os.Getpid() || data.Exhaustive {
		t.Fatalf("search result %+v %v", data, err)
	}
	// A second call of the same shape reuses the plan: no search, no Plan.
	if _, err := f.conv(t, c); err != nil {
		t.Fatal(err)
	}
	sum := c.Summary()
	if f.tiers[0].plans != 1 || sum[0].Convs != 2 || sum[0].Searches != 1 {
		t.Fatalf("plans %d, summary %+v", f.tiers[0].plans, sum[0])
	}
	c.LogSummary()
	if !regexp.MustCompile(`conv3d tier optimized: 2 convolutions in [0-9.]+ s, 1 searches in [0-9.]+ s`).MatchString(f.log.String()) ||
		!strings.Contains(f.log.String(), "conv3d tier cpu: 0 convolutions in 0.00 s") {
		t.Fatalf("summary log:\n%s", f.log)
	}
}

// A search that hangs is killed at the deadline and the chain goes on: the
// run finishes within deadline + 1 s with the same output.
func TestHungSearch(t *testing.T) {
	t.Parallel() // it sleeps out a deadline: beside the others that do
	f := newFixture(t)
	const deadline = 1500 * time.Millisecond
	c := f.chain(t, "conv3d.optimized=hang", deadline)
	start := time.Now()
	got, err := f.conv(t, c)
	elapsed := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	f.check(t, got)
	if elapsed < deadline || elapsed > deadline+time.Second {
		t.Fatalf("took %v with a %v deadline", elapsed, deadline)
	}
	if r := f.runs(); r[0] != 0 || r[1] != 1 {
		t.Fatalf("runs %v: want the gemm tier", r)
	}
	s := c.Summary()[0]
	if s.Skips["timeout"] != 1 || s.Searches != 1 {
		t.Fatalf("optimized summary %+v", s)
	}
	// The child was killed and reaped.
	m := regexp.MustCompile(`killed after 1.5s \(pid (\d+)\)`).FindStringSubmatch(f.log.String())
	if m == nil {
		t.Fatalf("log:\n%s", f.log)
	}
	pid, _ := strconv.Atoi(m[1])
	if alive(pid) {
		t.Fatalf("search child %d is still running", pid)
	}
	// A faulted run does not write the choices file.
	if _, err := os.Stat(f.cache); !os.IsNotExist(err) {
		t.Fatalf("choices written by a faulted run: %v", err)
	}
	t.Logf("hung search: run finished in %v", elapsed)
}

// A hang injected into a tier without a search still goes through a child
// killed at the deadline; the tier then runs its plan made without one.
func TestHangWithoutSearch(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	c := f.chain(t, "conv3d.optimized=error,conv3d.gemm=hang", time.Second)
	f.convOK(t, c)
	if r := f.runs(); r[1] != 1 || r[2] != 0 {
		t.Fatalf("runs %v: want the gemm tier, planned without its search", r)
	}
	if s := c.Summary()[1]; !s.SearchTimedOut || s.Searches != 1 || s.Skips["timeout"] != 0 {
		t.Fatalf("gemm summary %+v", s)
	}
}

func TestErrorAndOOMFallThrough(t *testing.T) {
	for _, tc := range []struct {
		faults string
		tier   int // the fake tier that should run; 3 is the CPU tier
		kinds  []string
	}{
		{"conv3d.optimized=error", 1, []string{"error"}},
		{"conv3d.optimized=oom", 1, []string{"oom"}},
		{"conv3d.optimized=error,conv3d.gemm=oom", 2, []string{"error", "oom"}},
		{"conv3d.optimized=naive,conv3d.gemm=error,conv3d.naive=oom", 3, []string{"naive", "error", "oom"}},
	} {
		t.Run(tc.faults, func(t *testing.T) {
			f := newFixture(t)
			c := f.chain(t, tc.faults, 20*time.Second)
			f.convOK(t, c)
			r := f.runs()
			for i := range r {
				if (i == tc.tier) != (r[i] == 1) {
					t.Fatalf("runs %v, want tier %d", r, tc.tier)
				}
			}
			sum := c.Summary()
			for i, kind := range tc.kinds {
				if sum[i].Skips[kind] != 1 {
					t.Fatalf("tier %s summary %+v, want a %s skip", sum[i].Tier, sum[i], kind)
				}
			}
			if sum[tc.tier].Convs != 1 {
				t.Fatalf("summary %+v", sum)
			}
		})
	}
}

func TestEveryTierFails(t *testing.T) {
	f := newFixture(t)
	fl, _ := ParseFaults("conv3d.optimized=error,conv3d.gemm=oom,conv3d.naive=error,conv3d.cpu=error")
	var tiers []Tier
	for _, ft := range f.tiers {
		tiers = append(tiers, ft)
	}
	c, err := New(append(tiers, CPUTier(f.cpu)), Options{Device: "d", CachePath: "off", Faults: fl, Log: slog.New(slog.NewTextHandler(f.log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.conv(t, c)
	var ce *Error
	if !errors.As(err, &ce) || len(ce.Skips) != 4 || !errors.Is(err, tensor.ErrOutOfMemory) {
		t.Fatalf("want a chain error wrapping the OOM, got %v", err)
	}
	for _, s := range []string{"every tier failed", "optimized: injected fault conv3d.optimized=error", "gemm: injected fault conv3d.gemm=oom", "cpu: injected"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q lacks %q", err, s)
		}
	}
}

func TestSearchFailures(t *testing.T) {
	f := newFixture(t)
	crashy := &fakeTier{name: "crashy", be: f.cpu, search: true}
	hungry := &fakeTier{name: "hungry", be: f.cpu, search: true}
	naivest := &fakeTier{name: "naivest", be: f.cpu, search: true}
	f.tiers = []*fakeTier{crashy, hungry, naivest, {name: "gemm", be: f.cpu}}
	c := f.chain(t, "", 20*time.Second)
	f.convOK(t, c)
	if r := f.runs(); r[3] != 1 || r[0]+r[1]+r[2] != 0 {
		t.Fatalf("runs %v", r)
	}
	sum := c.Summary()
	if sum[0].Skips["crash"] != 1 || sum[1].Skips["oom"] != 1 || sum[2].Skips["naive"] != 1 {
		t.Fatalf("summary %+v", sum)
	}
	for _, s := range []string{"exit status 3", "driver exploded", "workspace of 64 MiB", "ConvDirectNaiveConvFwd"} {
		if !strings.Contains(f.log.String(), s) {
			t.Errorf("log lacks %q:\n%s", s, f.log)
		}
	}
	// Skipped for lack of memory: not written to disk, so a later run
	// tries the tier again.
	if ch, _ := Remembered(f.cache); len(ch) != 0 {
		t.Fatalf("a choice made around an OOM was remembered: %v", ch)
	}
}

// The choice of one run is used by the next without a second search.
func TestRememberedChoice(t *testing.T) {
	f := newFixture(t)
	f.tiers[0].search = true
	c1 := f.chain(t, "", 20*time.Second)
	if _, err := f.conv(t, c1); err != nil {
		t.Fatal(err)
	}
	first := f.tiers[0].searched[0]

	c2 := f.chain(t, "", 20*time.Second)
	got, err := f.conv(t, c2)
	if err != nil {
		t.Fatal(err)
	}
	f.check(t, got)
	if s := c2.Summary()[0]; s.Searches != 0 || s.Convs != 1 {
		t.Fatalf("second run: %+v", s)
	}
	second := f.tiers[0].searched[1]
	if second == nil || !sameJSON(second.Data, first.Data) {
		t.Fatalf("the remembered plan was not handed to Plan: %v", second)
	}

	ch, err := Remembered(f.cache)
	if err != nil || len(ch) != 1 || ch[0].Tier != "optimized" || ch[0].Plan.Algorithm != "fake solver 7" {
		t.Fatalf("remembered %+v %v", ch, err)
	}
	if want := "test-device|f32|ncdhw|x1x4x5x8x8|w6x4x3x3x3|s1x1x1|p1x1x1|bias: optimized (fake solver 7)"; ch[0].String() != want {
		t.Fatalf("choice line %q, want %q", ch[0], want)
	}
}

// A choice remembered while searches were off is searched again once they
// are on; a searched one is not.
func TestRememberedWithoutSearch(t *testing.T) {
	f := newFixture(t)
	f.tiers[0].search = false // plans without a search result
	unsearched, err := New([]Tier{f.tiers[0], CPUTier(f.cpu)}, Options{Device: "test-device", CachePath: f.cache,
		NoSearch: true, Log: slog.New(slog.NewTextHandler(f.log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.conv(t, unsearched); err != nil {
		t.Fatal(err)
	}
	if ch, err := Remembered(f.cache); err != nil || len(ch) != 1 || ch[0].Plan.Searched {
		t.Fatalf("remembered %+v %v, want one choice not searched", ch, err)
	}
	f.tiers[0].search = true
	for i, want := range []int{1, 0} { // searched, then remembered as searched
		c := f.chain(t, "", 20*time.Second)
		got, err := f.conv(t, c)
		if err != nil {
			t.Fatal(err)
		}
		f.check(t, got)
		if s := c.Summary()[0]; s.Searches != want {
			t.Fatalf("run %d with searches on: %d searches, want %d", i+2, s.Searches, want)
		}
	}
	if ch, err := Remembered(f.cache); err != nil || len(ch) != 1 || !ch[0].Plan.Searched {
		t.Fatalf("remembered %+v %v, want the searched choice", ch, err)
	}
}

// A choice that skipped tiers keeps the reasons, and the next run starts
// at the chosen tier.
func TestRememberedSkips(t *testing.T) {
	f := newFixture(t)
	f.tiers[0].search = false
	f.tiers[0].name = "broken"
	broken := &brokenTier{}
	tiers := []Tier{broken, f.tiers[1], f.tiers[2], CPUTier(f.cpu)}
	mk := func() *Chain {
		c, err := New(tiers, Options{Device: "d", CachePath: f.cache, Faults: &Faults{}, Log: slog.New(slog.NewTextHandler(f.log, nil))})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	if _, err := f.conv(t, mk()); err != nil {
		t.Fatal(err)
	}
	if _, err := f.conv(t, mk()); err != nil {
		t.Fatal(err)
	}
	if broken.plans != 1 {
		t.Fatalf("the broken tier was planned %d times; the remembered choice should skip it", broken.plans)
	}
	ch, _ := Remembered(f.cache)
	if len(ch) != 1 || ch[0].Tier != "gemm" || len(ch[0].Skips) != 1 || ch[0].Skips[0].Kind != "error" || !strings.Contains(ch[0].Skips[0].Reason, "No suitable algorithm") {
		t.Fatalf("remembered %+v", ch)
	}
}

type brokenTier struct{ plans int }

func (*brokenTier) Name() string { return "broken" }
func (b *brokenTier) Plan(Key, *Plan) (*Plan, error) {
	b.plans++
	return nil, errors.New("No suitable algorithm was found to execute the required convolution")
}
func (*brokenTier) Run(*Plan, *tensor.Tensor, *tensor.Tensor, *tensor.Tensor, *tensor.Tensor, tensor.ConvParams) error {
	return errors.New("not reached")
}

func TestCorruptCache(t *testing.T) {
	f := newFixture(t)
	if err := os.WriteFile(f.cache, []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := f.chain(t, "", 20*time.Second)
	if !strings.Contains(f.log.String(), "ignoring the remembered choices in "+f.cache) {
		t.Fatalf("no warning:\n%s", f.log)
	}
	f.convOK(t, c)
	ch, err := Remembered(f.cache)
	if err != nil || len(ch) != 1 {
		t.Fatalf("the file was not rewritten: %v %v", ch, err)
	}
	// Other corruptions: wrong version, malformed entry.
	for _, bad := range []string{`{"version": 99, "choices": {}}`, `{"version": 1, "choices": {"k": {"tier": ""}}}`} {
		os.WriteFile(f.cache, []byte(bad), 0o644)
		if _, err := Remembered(f.cache); err == nil {
			t.Errorf("Remembered accepted %s", bad)
		}
	}
	// No file at all: nothing remembered, no error.
	if ch, err := Remembered(filepath.Join(t.TempDir(), "none.json")); err != nil || len(ch) != 0 {
		t.Fatalf("missing file: %v %v", ch, err)
	}
}

func TestExhaustiveIsPassed(t *testing.T) {
	f := newFixture(t)
	fl := &Faults{}
	var tiers []Tier
	for _, ft := range f.tiers {
		tiers = append(tiers, ft)
	}
	c, err := New(tiers, Options{Device: "d", CachePath: "off", Exhaustive: true, Faults: fl, Log: slog.New(slog.NewTextHandler(f.log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.conv(t, c); err != nil {
		t.Fatal(err)
	}
	var data struct{ Exhaustive bool }
	json.Unmarshal(f.tiers[0].searched[0].Data, &data)
	if !data.Exhaustive {
		t.Fatal("Exhaustive did not reach the search")
	}
}

func TestNewChecks(t *testing.T) {
	be := cpu.New()
	if _, err := New(nil, Options{}); err == nil {
		t.Error("no tiers")
	}
	if _, err := New([]Tier{CPUTier(be), CPUTier(be)}, Options{CachePath: "off", Faults: &Faults{}}); err == nil {
		t.Error("duplicate tier names")
	}
	fl, _ := ParseFaults("conv3d.miopen=hang")
	_, err := New([]Tier{CPUTier(be)}, Options{CachePath: "off", Faults: fl})
	if err == nil || !strings.Contains(err.Error(), "names conv3d.miopen, but the chain's tiers are cpu") {
		t.Errorf("unknown tier in faults: %v", err)
	}
	t.Setenv(FaultsEnv, "conv3d.cpu=sometimes")
	if _, err := New([]Tier{CPUTier(be)}, Options{CachePath: "off"}); err == nil || !strings.Contains(err.Error(), "unknown fault") {
		t.Errorf("bad FRAMEPACK_FAULTS: %v", err)
	}
}

func sameJSON(a, b []byte) bool {
	var ca, cb bytes.Buffer
	return json.Compact(&ca, a) == nil && json.Compact(&cb, b) == nil && bytes.Equal(ca.Bytes(), cb.Bytes())
}

func TestHungSearchWithGrandchild(t *testing.T) {
	if _, err := exec.LookPath("sleep"); err != nil {
		t.Skip("no sleep command")
	}
	f := newFixture(t)
	pidFile := filepath.Join(t.TempDir(), "pid")
	t.Setenv("CONVCHAIN_TEST_PIDFILE", pidFile)
	f.tiers = []*fakeTier{{name: "spawner", be: f.cpu, search: true}, {name: "gemm", be: f.cpu}}
	c := f.chain(t, "", time.Second)
	start := time.Now()
	f.convOK(t, c)
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("took %v with a 1 s deadline", el)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(string(b))
	// The grandchild is killed with its process group. Its parent is gone,
	// so it may linger as a zombie until init reaps it: dead either way.
	for i := 0; ; i++ {
		if !alive(pid) {
			break
		}
		if i == 50 {
			t.Fatalf("grandchild %d survived the kill", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// alive reports whether pid is a running (not zombie) process.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return syscall.Kill(pid, 0) == nil
	}
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] != 'Z'
}

// Without MaybeRunChild in main, starting this binary again would run the
// whole program: the chain refuses to, and skips the tier.
func TestNoChildHook(t *testing.T) {
	hooked.Store(false)
	defer hooked.Store(true)
	f := newFixture(t)
	c := f.chain(t, "", 20*time.Second)
	f.convOK(t, c)
	if r := f.runs(); r[0] != 0 || r[1] != 1 || !strings.Contains(f.log.String(), "does not call convchain.MaybeRunChild") {
		t.Fatalf("runs %v, log:\n%s", r, f.log)
	}
}
