package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/framepack-go/framepack/backend/cpu"
	"github.com/framepack-go/framepack/backend/gpu"
	"github.com/framepack-go/framepack/convchain"
	"github.com/framepack-go/framepack/hip"
	"github.com/framepack-go/framepack/internal/envconfig"
	"github.com/framepack-go/framepack/kernels"
	"github.com/framepack-go/framepack/memory"
	"github.com/framepack-go/framepack/miopen"
	"github.com/framepack-go/framepack/rocblas"
)

func init() {
	doctorSections = append(doctorSections,
		doctorSection{title: "cpu backend", run: doctorCPU},
		doctorSection{title: "gpu", run: doctorGPU},
		doctorSection{title: "precompiled kernels", line: kernels.Summary},
		doctorSection{title: "conv3d choices remembered", run: doctorConv3d},
	)
}

func doctorCPU(w io.Writer) error {
	be, err := cpu.NewWithOptions(cpu.Options{})
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "  gemm:    %s\n", be.BLAS())
	return nil
}

func doctorGPU(w io.Writer) error {
	for _, v := range []hip.Vendor{hip.AMD, hip.NVIDIA} {
		rep, err := hip.Load(v)
		if err != nil {
			fmt.Fprintf(w, "  %-14s not available: %v\n", hip.Platform(v)+":", err)
			continue
		}
		fmt.Fprintf(w, "  %-14s %v\n", hip.Platform(v)+":", rep.Libraries)
		if len(rep.MissingOptional) > 0 {
			fmt.Fprintf(w, "  %-14s optional entry points missing: %v\n", "", rep.MissingOptional)
		}
	}
	d, err := hip.Open(0)
	if err != nil {
		if errors.Is(err, hip.ErrNoGPU) {
			fmt.Fprintf(w, "  device:  none — the CPU backend is used (%v)\n", err)
			return nil
		}
		return err
	}
	defer d.Close()
	fmt.Fprintf(w, "  device:  %s, %s, %d multiprocessors, integrated %v\n", d.Name, d.Arch, d.Multiprocessors, d.Integrated)
	free, total, err := d.MemGetInfo()
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "  memory:  %s total, %s free (as the runtime reports)\n", memory.FormatBytes(int64(total)), memory.FormatBytes(int64(free)))
	b, err := memory.BudgetFor(memory.DeviceInfo{
		Name: d.Name, Arch: d.Arch, Integrated: d.Integrated,
		TotalMem: int64(total), FreeMem: int64(free),
	}, "/")
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "  budget:  %s\n", b)
	// FP8 compute (--weights fp8) multiplies through the Lt library on GPUs
	// with FP8 tensor cores; without it the codes are widened.
	if lt, err := rocblas.OpenLt(d.Vendor); err != nil {
		fmt.Fprintf(w, "  lt:      not available (FP8 weights widened on the fly): %v\n", err)
	} else {
		fmt.Fprintf(w, "  lt:      %s\n", lt)
	}
	fmt.Fprintf(w, "  attention: %s\n", doctorAttention(d))
	return doctorPaths(w, d.Arch)
}

// doctorArch is doctor --arch: the paths a GPU of architecture arch takes.
func doctorArch(w io.Writer, arch string) error {
	fmt.Fprintf(w, "as %s:\n", arch)
	return doctorPaths(w, arch)
}

// doctorPaths prints the conv3d chain's tier order and the GEMM library
// for arch, and why (FRAMEPACK_CONV3D and FRAMEPACK_BLAS applied).
func doctorPaths(w io.Writer, arch string) error {
	o, err := gpu.ConvOrder(arch, gpu.ConvOptions{})
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "  conv3d tiers: %s\n", o)
	fmt.Fprintf(w, "    why: %s\n", o.Why)
	env := envconfig.Read()
	c := gpu.BLASFor(arch)
	switch {
	case env.Lt:
		fmt.Fprintf(w, "  gemm: Lt library for bf16/f16 Linear layers (FRAMEPACK_BLAS=lt); the plain BLAS for the rest\n")
	case env.PlainBLAS:
		fmt.Fprintf(w, "  gemm: the plain BLAS (FRAMEPACK_BLAS=plain)\n")
	default:
		fmt.Fprintf(w, "  gemm: %s\n", c.Why)
	}
	return nil
}

// doctorAttention says which attention runs: cuDNN's fused attention and
// whether its FP8 engine (--fp8-attention) takes a probe shape, or
// framepack's kernels.
func doctorAttention(d *hip.Device) string {
	if d.Vendor != hip.NVIDIA {
		return "framepack's kernels"
	}
	lib, err := miopen.OpenVendor(miopen.NVIDIA)
	if err != nil {
		return fmt.Sprintf("framepack's kernels (no cuDNN: %v)", err)
	}
	if !lib.HasFusedAttention() {
		return fmt.Sprintf("framepack's kernels (%v has no fused attention: cuDNN 9.13 or later needed)", lib)
	}
	unbind, err := d.Bind()
	if err != nil {
		return fmt.Sprintf("cuDNN %v (the device could not be bound: %v)", lib, err)
	}
	defer unbind()
	st, err := d.NewStream()
	if err != nil {
		return fmt.Sprintf("cuDNN %v (no stream: %v)", lib, err)
	}
	defer d.DestroyStream(st)
	h, err := lib.NewHandle(uintptr(st))
	if err != nil {
		return fmt.Sprintf("cuDNN %v (no handle: %v)", lib, err)
	}
	defer h.Close()
	fp8 := "FP8 (--fp8-attention) available"
	probe := miopen.AttnDesc{B: 1, Lq: 128, Lk: 128, Hq: 2, Hkv: 2, D: 128, FP8: true}
	if _, err := h.PlanAttention(probe); err != nil {
		fp8 = "no FP8 engine (--fp8-attention runs bf16)"
	}
	return fmt.Sprintf("cuDNN fused attention, %v; %s", lib, fp8)
}

func doctorConv3d(w io.Writer) error {
	if tos, err := convchain.SearchTimeouts(""); err == nil {
		for _, to := range tos {
			fmt.Fprintf(w, "  search off: %s (planned from its heuristics; `framepack doctor --retry-searches` searches again)\n", to)
		}
	}
	choices, err := convchain.Remembered("")
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			fmt.Fprintln(w, "  none yet")
			return nil
		}
		return err
	}
	if len(choices) == 0 {
		fmt.Fprintln(w, "  none yet")
	}
	for _, c := range choices {
		fmt.Fprintf(w, "  %s → %s", c.Key, c.Tier)
		for _, s := range c.Skips {
			fmt.Fprintf(w, "; skipped %v", s)
		}
		fmt.Fprintln(w)
	}
	return nil
}

// retrySearches forgets the conv3d search timeouts remembered.
func retrySearches(w io.Writer) error {
	n, err := convchain.ForgetSearchTimeouts("")
	if err != nil {
		return err
	}
	if n == 0 {
		fmt.Fprintln(w, "no conv3d search timeouts remembered")
		return nil
	}
	fmt.Fprintf(w, "forgot %d conv3d search timeouts: the next run searches again\n", n)
	return nil
}
