package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"

	"github.com/spf13/cobra"

	"github.com/framepack-go/framepack/memory"
)

func newDoctor() *cobra.Command {
	var retry bool
	var arch string
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Report what this machine offers: CPU backend and BLAS, GPU libraries, devices, memory",
		Long: `Report what this machine offers: CPU backend and BLAS, GPU libraries, devices, memory, and the
conv3d choices remembered for each convolution shape and device.

A conv3d algorithm search that overran its deadline turns that tier's searches off on the device: its
shapes are planned from the library's heuristics, in later runs too. --retry-searches forgets those
timeouts (the choices stay), so the next run searches again, shapes planned without a search included.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if retry {
				return retrySearches(cmd.OutOrStdout())
			}
			if arch != "" {
				return doctorArch(cmd.OutOrStdout(), arch)
			}
			return doctor(cmd.OutOrStdout())
		},
	}
	cmd.Flags().BoolVar(&retry, "retry-searches", false, "forget the conv3d search timeouts remembered, so that the next run searches again")
	cmd.Flags().StringVar(&arch, "arch", "", "report only what a GPU of this architecture runs (gfx1100, gfx1151, gfx1201, sm_90 …): its conv3d tier order and GEMM library, and why")
	return cmd
}

// doctorSection adds lines to the report; sections are registered by the
// files that know about each part of the engine.
type doctorSection struct {
	title string
	run   func(w io.Writer) error
	// line, when set, makes the section one line: "title: line()".
	line func() string
}

var doctorSections = []doctorSection{
	{title: "system", run: doctorSystem},
}

func doctor(w io.Writer) error {
	for _, s := range doctorSections {
		if s.line != nil {
			fmt.Fprintf(w, "%s: %s\n", s.title, s.line())
			continue
		}
		fmt.Fprintf(w, "%s:\n", s.title)
		if err := s.run(w); err != nil {
			fmt.Fprintf(w, "  error: %v\n", err)
		}
	}
	return nil
}

func doctorSystem(w io.Writer) error {
	fmt.Fprintf(w, "  go:      %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	fmt.Fprintf(w, "  cpu:     %s, %d logical cores\n", cpuModel(), runtime.NumCPU())
	m, err := memory.ReadSysMem("/", "", 0)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "  memory:  %s total, %s available\n", memory.FormatBytes(m.MemTotal), memory.FormatBytes(m.MemAvailable))
	fmt.Fprintf(w, "  host budget: %s (default --ram-limit)\n", memory.FormatBytes(memory.DefaultRAMLimit(m.MemTotal, m.MemAvailable)))
	if m.Card != "" {
		fmt.Fprintf(w, "  amdgpu:  %s: VRAM %s, GTT %s\n", m.Card, memory.FormatBytes(m.VRAMTotal), memory.FormatBytes(m.GTTTotal))
	}
	return nil
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}
