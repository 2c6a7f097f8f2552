package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/framepack-go/framepack"
)

// buildVersion describes this binary (framepack.ReadBuildVersion).
type buildVersion = framepack.BuildVersion

func readBuildVersion() buildVersion { return framepack.ReadBuildVersion() }

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
