package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/framepack-go/framepack/backend/cpu"
	"github.com/framepack-go/framepack/convchain"
	"github.com/framepack-go/framepack/hip"
	"github.com/framepack-go/framepack/kernels"
	"github.com/framepack-go/framepack/memory"
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
	return nil
}

func doctorConv3d(w io.Writer) error {
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
