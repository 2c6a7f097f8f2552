package localcomm

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/framepack-go/framepack/backend/cpu"
	"github.com/framepack-go/framepack/tensor"
)

// ranks runs fn on each rank of a group in its own goroutine, each
// with its own CPU backend, and returns their errors.
func ranks(n int, timeout time.Duration, fn func(c tensor.Comm, s *tensor.Scope) error) []error {
	return Run(NewWithTimeout(n, timeout), func(c tensor.Comm) error {
		s := tensor.NewScope(cpu.New())
		defer s.Close()
		return fn(c, s)
	})
}

func vals(base float32, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = base + float32(i)
	}
	return v
}

func TestLocalCollectives(t *testing.T) {
	const n = 4
	errs := ranks(n, time.Minute, func(c tensor.Comm, s *tensor.Scope) error {
		r := c.Rank()
		// All-to-all with sizes that differ by peer: rank r sends r+p+1
		// values to rank p, valued 100r+10p+i.
		send, recv := make([]*tensor.Tensor, n), make([]*tensor.Tensor, n)
		for p := 0; p < n; p++ {
			send[p] = s.To(tensor.FromFloat32(vals(float32(100*r+10*p), r+p+1), r+p+1))
			recv[p] = s.Empty(tensor.F32, p+r+1)
		}
		if err := c.AllToAll(send, recv); err != nil {
			return err
		}
		for p := 0; p < n; p++ {
			if got, want := fmt.Sprint(tensor.Float32s(recv[p])), fmt.Sprint(vals(float32(100*p+10*r), p+r+1)); got != want {
				return fmt.Errorf("all-to-all from %d: %s, want %s", p, got, want)
			}
		}
		// All-gather.
		g := make([]*tensor.Tensor, n)
		for p := range g {
			g[p] = s.Empty(tensor.BF16, 3)
		}
		if err := c.AllGather(s.Cast(s.To(tensor.FromFloat32(vals(float32(r), 3), 3)), tensor.BF16), g); err != nil {
			return err
		}
		for p := range g {
			if got, want := fmt.Sprint(tensor.Float32s(s.Cast(g[p], tensor.F32))), fmt.Sprint(vals(float32(p), 3)); got != want {
				return fmt.Errorf("all-gather from %d: %s, want %s", p, got, want)
			}
		}
		// All-reduce: 0+1+2+3 = 6 on every rank.
		x := s.To(tensor.FromFloat32([]float32{float32(r), 1}, 2))
		if err := c.AllReduceSum(x); err != nil {
			return err
		}
		if got := fmt.Sprint(tensor.Float32s(x)); got != "[6 4]" {
			return fmt.Errorf("all-reduce: %s", got)
		}
		// Split into even and odd ranks, ordered by descending key.
		sub, err := c.Split(r%2, -r)
		if err != nil {
			return err
		}
		if want := map[int]int{0: 1, 1: 1, 2: 0, 3: 0}[r]; sub.Size() != 2 || sub.Rank() != want {
			return fmt.Errorf("split: rank %d of %d, want %d of 2", sub.Rank(), sub.Size(), want)
		}
		y := s.To(tensor.FromFloat32([]float32{float32(r)}, 1))
		if err := sub.AllReduceSum(y); err != nil {
			return err
		}
		if got, want := tensor.Float32s(y)[0], float32(map[int]int{0: 2, 1: 4, 2: 2, 3: 4}[r]); got != want {
			return fmt.Errorf("split all-reduce: %v, want %v", got, want)
		}
		return sub.Close()
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// A rank that stops early, or that calls a different collective, makes the
// others fail with that reason at once instead of waiting.
func TestLocalFailsInsteadOfWaiting(t *testing.T) {
	began := time.Now()
	errs := ranks(3, time.Minute, func(c tensor.Comm, s *tensor.Scope) error {
		x := s.To(tensor.FromFloat32([]float32{1}, 1))
		if c.Rank() == 1 {
			return fmt.Errorf("rank 1 gave up")
		}
		return c.AllReduceSum(x)
	})
	if time.Since(began) > 30*time.Second {
		t.Fatalf("took %v", time.Since(began))
	}
	for _, r := range []int{0, 2} {
		if errs[r] == nil || !strings.Contains(errs[r].Error(), "rank 1 closed the communicator") {
			t.Errorf("rank %d: %v", r, errs[r])
		}
	}
	errs = ranks(2, time.Minute, func(c tensor.Comm, s *tensor.Scope) error {
		x := s.To(tensor.FromFloat32([]float32{1}, 1))
		if c.Rank() == 0 {
			return c.AllReduceSum(x)
		}
		return c.AllGather(x, []*tensor.Tensor{s.Empty(tensor.F32, 1), s.Empty(tensor.F32, 1)})
	})
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "is all-reduce on one rank and all-gather") && !strings.Contains(err.Error(), "is all-gather on one rank and all-reduce") {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	errs = ranks(2, 200*time.Millisecond, func(c tensor.Comm, s *tensor.Scope) error {
		if c.Rank() == 1 {
			time.Sleep(time.Second)
			return nil
		}
		return c.AllReduceSum(s.To(tensor.FromFloat32([]float32{1}, 1)))
	})
	if errs[0] == nil || !strings.Contains(errs[0].Error(), "waited") {
		t.Errorf("timeout: %v", errs[0])
	}
}

func TestLocalMismatchedSizes(t *testing.T) {
	errs := ranks(2, time.Minute, func(c tensor.Comm, s *tensor.Scope) error {
		send := []*tensor.Tensor{s.Empty(tensor.F32, 2), s.Empty(tensor.F32, 2)}
		recv := []*tensor.Tensor{s.Empty(tensor.F32, 2), s.Empty(tensor.F32, 3)}
		return c.AllToAll(send, recv)
	})
	if errs[0] == nil || !strings.Contains(errs[0].Error(), "2 f32 sent into 3 f32") {
		t.Errorf("rank 0: %v", errs[0])
	}
}
