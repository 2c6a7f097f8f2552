package main

import (
	"fmt"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

// buildVersion describes this binary from the build information the Go
// toolchain embeds: the module version ("(devel)" for a build from a
// checkout), the VCS revision and whether the tree had changes, and the
// Go version.
type buildVersion struct {
	Module   string `json:"module"`
	Version  string `json:"version"`
	Revision string `json:"revision,omitempty"`
	Time     string `json:"time,omitempty"`
	Modified bool   `json:"modified,omitempty"`
	Go       string `json:"go"`
}

func readBuildVersion() buildVersion {
	v := buildVersion{Module: "github.com/framepack-go/framepack", Version: "unknown"}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	v.Go = bi.GoVersion
	if bi.Main.Path != "" {
		v.Module, v.Version = bi.Main.Path, bi.Main.Version
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.time":
			v.Time = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}

// String is one line: "framepack (devel) rev 301ee1f2c4a1 (modified) 2026-… go1.26.8".
func (v buildVersion) String() string {
	parts := []string{"framepack", v.Version}
	if v.Revision != "" {
		rev := v.Revision
		if len(rev) > 12 {
			rev = rev[:12]
		}
		parts = append(parts, "rev "+rev)
		if v.Modified {
			parts = append(parts, "(modified)")
		}
		if v.Time != "" {
			parts = append(parts, v.Time)
		}
	}
	if v.Go != "" {
		parts = append(parts, v.Go)
	}
	return strings.Join(parts, " ")
}

func versionLine() string { return readBuildVersion().String() }

func newVersion() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version: module version, VCS revision, modified tree, Go version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), versionLine())
			return err
		},
	}
}
