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
// identity. (Several ranks are proven by the whole job on several GPUs.)
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
