package convchain

import (
	"errors"
	"strings"
	"testing"

	"github.com/framepack-go/framepack/backend/cpu"
	"github.com/framepack-go/framepack/tensor"
)

func TestParseFaults(t *testing.T) {
	f, err := ParseFaults(" conv3d.optimized=hang, conv3d.gemm=error,conv3d.naive=oom,conv3d.cpu=naive,alloc.nth=57 ")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Fault{"optimized": FaultHang, "gemm": FaultError, "naive": FaultOOM, "cpu": FaultNaive}
	if len(f.Conv3d) != len(want) || f.AllocNth != 57 {
		t.Fatalf("%+v", f)
	}
	for k, v := range want {
		if f.Conv3d[k] != v {
			t.Fatalf("%s = %s, want %s", k, f.Conv3d[k], v)
		}
	}
	if got := f.String(); got != "conv3d.cpu=naive,conv3d.gemm=error,conv3d.naive=oom,conv3d.optimized=hang,alloc.nth=57" {
		t.Fatalf("String() = %q", got)
	}
	if f, err := ParseFaults(""); err != nil || f.Any() {
		t.Fatalf("empty: %+v %v", f, err)
	}
	for _, c := range []struct{ in, msg string }{
		{"conv3d.optimized", "no '='"},
		{"conv3d.optimized=slow", `unknown fault "slow"`},
		{"conv3d.=hang", "bad tier name"},
		{"conv3d.Opt imized=hang", "bad tier name"},
		{"alloc.nth=0", "positive integer"},
		{"alloc.nth=x", "positive integer"},
		{"alloc.nth=3,alloc.nth=4", "given twice"},
		{"conv3d.gemm=error,conv3d.gemm=oom", "given twice"},
		{"gpu.melt=yes", `unknown key "gpu.melt"`},
	} {
		_, err := ParseFaults(c.in)
		if err == nil || !strings.Contains(err.Error(), c.msg) || !strings.Contains(err.Error(), FaultsEnv) {
			t.Errorf("ParseFaults(%q) = %v; want an error with %q", c.in, err, c.msg)
		}
	}
}

func TestAllocNth(t *testing.T) {
	f, _ := ParseFaults("alloc.nth=3")
	be := f.WrapBackend(cpu.New())
	s := tensor.NewScope(be)
	defer s.Close()
	a := s.Full(tensor.F32, 1, 4)
	b := s.Full(tensor.F32, 2, 4)
	err := tensor.Catch(func() { s.Add(a, b) }) // the third allocation
	if !errors.Is(err, tensor.ErrOutOfMemory) || !strings.Contains(err.Error(), "alloc.nth=3") {
		t.Fatalf("third allocation: %v", err)
	}
	if got := tensor.Float32s(s.Add(a, b))[0]; got != 3 { // the fourth succeeds
		t.Fatalf("1+2 = %v", got)
	}
	if (&Faults{}).WrapBackend(be) != be {
		t.Fatal("no alloc fault must not wrap")
	}
}
