package gpu

import (
	"fmt"
	"testing"
	"time"

	"github.com/framepack-go/framepack/nccl"
	"github.com/framepack-go/framepack/tensor"
)

// A communicator of one rank runs every collective through NCCL on the
// backend's stream: the self-exchanges are copies and the reduction is the
// identity. TestNCCLRanks runs several GPUs.
func TestNCCLOneRank(t *testing.T) {
	b := newGPU(t, Options{})
	lib, err := OpenNCCL(b)
	if err != nil {
		t.Skipf("no NCCL: %v (%s points at one)", err, nccl.EnvPath(b.dev.Vendor))
	}
	id, err := lib.NewUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewComm(b, lib, id, 0, 1, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %d bytes of device memory", lib, c.DeviceBytes())
	s := tensor.NewScope(b)
	defer s.Close()
	x := s.To(tensor.FromFloat32([]float32{1, -2, 3.5, 4}, 4))
	y := s.Empty(tensor.F32, 4)
	if err := c.AllToAll([]*tensor.Tensor{x}, []*tensor.Tensor{y}); err != nil {
		t.Fatal(err)
	}
	g := s.Empty(tensor.F32, 4)
	if err := c.AllGather(x, []*tensor.Tensor{g}); err != nil {
		t.Fatal(err)
	}
	if err := c.AllReduceSum(x); err != nil {
		t.Fatal(err)
	}
	sub, err := c.Split(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	z := s.Empty(tensor.F32, 4)
	if err := sub.AllGather(x, []*tensor.Tensor{z}); err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]*tensor.Tensor{"all-to-all": y, "all-gather": g, "all-reduce": x, "split all-gather": z} {
		if got := fmt.Sprint(tensor.Float32s(v)); got != "[1 -2 3.5 4]" {
			t.Errorf("%s: %s", name, got)
		}
	}
	if err := c.AllToAll([]*tensor.Tensor{x}, []*tensor.Tensor{s.Empty(tensor.F32, 3)}); err == nil {
		t.Error("4 values into 3: want an error")
	}
	if err := sub.Close(); err != nil {
		t.Error(err)
	}
	if err := c.Close(); err != nil {
		t.Error(err)
	}
}

// A rank whose peers never join gets an error within the timeout instead
// of waiting forever.
func TestNCCLPeersNeverJoin(t *testing.T) {
	b := newGPU(t, Options{})
	lib, err := OpenNCCL(b)
	if err != nil {
		t.Skipf("no NCCL: %v", err)
	}
	id, err := lib.NewUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	_, err = NewComm(b, lib, id, 0, 2, 3*time.Second)
	if err == nil {
		t.Fatal("rank 0 of 2 alone: want an error")
	}
	if d := time.Since(began); d > 30*time.Second {
		t.Errorf("took %v", d)
	}
	t.Logf("%v", err)
}

// Every GPU of the machine (up to 4) as one rank each, in one process: the
// exchanges move what they should between real devices, with the pairs
// made by ncclCommSplit and as a library without it makes them.
func TestNCCLRanks(t *testing.T) {
	t.Run("split", func(t *testing.T) { testNCCLRanks(t) })
	t.Run("split by init", func(t *testing.T) {
		forceSplitByInit = true
		defer func() { forceSplitByInit = false }()
		testNCCLRanks(t)
	})
}

func testNCCLRanks(t *testing.T) {
	var bs []*Backend
	for i := 0; i < 4; i++ {
		b, err := New(Options{Device: i})
		if err != nil {
			break
		}
		t.Cleanup(func() { b.Close() })
		bs = append(bs, b)
	}
	if len(bs) < 2 {
		t.Skipf("%d GPUs: the exchanges need 2 or more", len(bs))
	}
	n := len(bs)
	ids := make(chan string, n)
	// count is how many values rank r sends rank p: sizes differ by pair.
	count := func(r, p int) int { return 1 + r + 2*p }
	value := func(r, p, i int) float32 { return float32(100*r + 10*p + i) }
	err := parallelRanks(n, func(r int) error {
		var id string
		publish := func(s string) error {
			for i := 1; i < n; i++ {
				ids <- s
			}
			return nil
		}
		if r > 0 {
			id = <-ids
		}
		c, err := Join(bs[r], r, n, id, publish, time.Minute)
		if err != nil {
			return err
		}
		defer c.Close()
		s := tensor.NewScope(bs[r])
		defer s.Close()
		send, recv := make([]*tensor.Tensor, n), make([]*tensor.Tensor, n)
		for p := 0; p < n; p++ {
			v := make([]float32, count(r, p))
			for i := range v {
				v[i] = value(r, p, i)
			}
			send[p] = s.To(tensor.FromFloat32(v, len(v)))
			recv[p] = s.Empty(tensor.F32, count(p, r))
		}
		if err := c.AllToAll(send, recv); err != nil {
			return err
		}
		x := s.To(tensor.FromFloat32([]float32{float32(r), 1}, 2))
		gathered := make([]*tensor.Tensor, n)
		for p := range gathered {
			gathered[p] = s.Empty(tensor.F32, 2)
		}
		if err := c.AllGather(x, gathered); err != nil {
			return err
		}
		if err := c.AllReduceSum(x); err != nil {
			return err
		}
		// Pairs of ranks {0,1}, {2,3}: a sum over the pair.
		pair, err := c.Split(r/2, r)
		if err != nil {
			return err
		}
		defer pair.Close()
		y := s.To(tensor.FromFloat32([]float32{float32(r)}, 1))
		if err := pair.AllReduceSum(y); err != nil {
			return err
		}
		for p := 0; p < n; p++ {
			got := tensor.Float32s(recv[p])
			for i, g := range got {
				if w := value(p, r, i); g != w {
					return fmt.Errorf("rank %d: all-to-all from %d [%d] = %v, want %v", r, p, i, g, w)
				}
			}
			if got := fmt.Sprint(tensor.Float32s(gathered[p])); got != fmt.Sprint([]float32{float32(p), 1}) {
				return fmt.Errorf("rank %d: all-gather from %d = %s", r, p, got)
			}
		}
		if got, want := fmt.Sprint(tensor.Float32s(x)), fmt.Sprint([]float32{float32(n * (n - 1) / 2), float32(n)}); got != want {
			return fmt.Errorf("rank %d: all-reduce %s, want %s", r, got, want)
		}
		lo := r / 2 * 2
		want := float32(lo)
		if lo+1 < n {
			want += float32(lo + 1)
		}
		if got := tensor.Float32s(y)[0]; got != want {
			return fmt.Errorf("rank %d: pair all-reduce %v, want %v", r, got, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d GPUs exchanged", n)
}

// parallelRanks runs fn for ranks 0..n-1 at once and returns the first
// error.
func parallelRanks(n int, fn func(rank int) error) error {
	errs := make(chan error, n)
	for r := 0; r < n; r++ {
		go func() { errs <- fn(r) }()
	}
	var first error
	for r := 0; r < n; r++ {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}
