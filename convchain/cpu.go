package convchain

import (
	"fmt"

	"github.com/framepack-go/framepack/tensor"
)

// CPUTier is the last tier: the CPU backend's conv3d on host copies of the
// operands, the result uploaded into dst.
func CPUTier(cpu tensor.Backend) Tier { return cpuTier{cpu} }

type cpuTier struct{ cpu tensor.Backend }

func (cpuTier) Name() string { return "cpu" }

func (t cpuTier) Plan(Key, *Plan) (*Plan, error) {
	return &Plan{Algorithm: t.cpu.Name() + " backend on host copies"}, nil
}

func (t cpuTier) Run(_ *Plan, dst, x, w, bias *tensor.Tensor, p tensor.ConvParams) error {
	hx, hw := tensor.ToHost(x), tensor.ToHost(w)
	var hb *tensor.Tensor
	if bias != nil {
		hb = tensor.ToHost(bias)
	}
	if dst.OnHost() {
		return t.cpu.Conv3d(dst, hx, hw, hb, p)
	}
	out := tensor.New(dst.DType(), dst.Shape()...)
	if err := t.cpu.Conv3d(out, hx, hw, hb, p); err != nil {
		return err
	}
	if err := dst.Backend().Upload(dst.Buffer(), 0, out.HostBytes()); err != nil {
		return fmt.Errorf("uploading the CPU result: %w", err)
	}
	return nil
}
