package envconfig

import "testing"

func TestRead(t *testing.T) {
	t.Setenv(GPU, "CUDA")
	t.Setenv(BLAS, "Gonum")
	t.Setenv(Kernels, "compile")
	t.Setenv(Attn, "kernel")
	t.Setenv(OpByOp, "1")
	t.Setenv(Faults, "conv3d.cpu=error")
	t.Setenv(Conv3d, "conv2d,cpu")
	c := Read()
	if c.GPU != "cuda" || !c.GonumBLAS || !c.RuntimeCompile || !c.KernelAttention || c.GenericAttention || !c.OpByOp || c.Faults != "conv3d.cpu=error" || c.Conv3d != "conv2d,cpu" {
		t.Errorf("%+v", c)
	}
	t.Setenv(BLAS, "plain")
	if c := Read(); !c.PlainBLAS || c.Lt || c.GonumBLAS {
		t.Errorf("FRAMEPACK_BLAS=plain: %+v", c)
	}
	t.Setenv(Attn, "generic")
	t.Setenv(OpByOp, "0")
	if c := Read(); !c.KernelAttention || !c.GenericAttention || c.OpByOp {
		t.Errorf("generic attention, op by op off: %+v", c)
	}
}
