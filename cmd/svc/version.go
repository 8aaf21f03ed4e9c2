package main

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/svc-dev/svc"
)

func newVersion() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of svc",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintf(cmd.OutOrStdout(), "svc %s (%s %s/%s)\n", svc.Version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
		},
	}
}
