package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/svc-dev/svc"
)

func newVersion() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version and commit of svc",
		Long: `Print one line: the version of svc, the commit it was built from, and
the Go version and platform, as "svc --version" does:

  svc 0.0.0 (commit 3f2a…c9, go1.24.0 linux/amd64)

The commit is the VCS revision go build stamped into the binary, with
"-dirty" when the work tree had changes, or "unknown" when the binary
carries none (built outside a repository, or with -buildvcs=false; then
-ldflags "-X main.commit=SHA" sets it).`,
		Example: `  svc version`,
		Args:    cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintln(cmd.OutOrStdout(), versionLine())
		},
	}
}

// commit, when set at link time (go build -ldflags "-X main.commit=SHA"),
// is the commit printed, for builds that carry no VCS stamp (GOFLAGS
// -buildvcs=false, a source tarball).
var commit string

// versionLine is what svc version and svc --version print.
func versionLine() string {
	c := commit
	if c == "" {
		info, _ := debug.ReadBuildInfo()
		c = commitOf(info)
	}
	return fmt.Sprintf("svc %s (commit %s, %s %s/%s)", svc.Version, c, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// commitOf is the VCS revision in info, "-dirty" appended when the build
// had uncommitted changes, or "unknown".
func commitOf(info *debug.BuildInfo) string {
	if info == nil {
		return "unknown"
	}
	var rev string
	dirty := false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "unknown"
	}
	if dirty {
		rev += "-dirty"
	}
	return rev
}
