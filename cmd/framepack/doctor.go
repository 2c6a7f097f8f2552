package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"

	"github.com/spf13/cobra"
)

func newDoctor() *cobra.Command {
	return &cobra.Command{
		Use:   "doctor",
		Short: "Report what this machine offers: CPU backend and BLAS, GPU libraries, devices, memory",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return doctor(cmd.OutOrStdout())
		},
	}
}

// doctorSection adds lines to the report; sections are registered by the
// files that know about each part of the engine.
type doctorSection struct {
	title string
	run   func(w io.Writer) error
}

var doctorSections = []doctorSection{
	{"system", doctorSystem},
}

func doctor(w io.Writer) error {
	for _, s := range doctorSections {
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
	if total, avail, ok := memInfo(); ok {
		fmt.Fprintf(w, "  memory:  %.1f GiB total, %.1f GiB available\n", gib(total), gib(avail))
	}
	return nil
}

func gib(b int64) float64 { return float64(b) / (1 << 30) }

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

func memInfo() (total, avail int64, ok bool) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var kb int64
		line := sc.Text()
		if n, _ := fmt.Sscanf(line, "MemTotal: %d kB", &kb); n == 1 {
			total = kb << 10
		}
		if n, _ := fmt.Sscanf(line, "MemAvailable: %d kB", &kb); n == 1 {
			avail = kb << 10
		}
	}
	return total, avail, total > 0
}
