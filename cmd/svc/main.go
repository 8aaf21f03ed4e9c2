// Command svc runs LLM agents as a service: `svc serve` starts the HTTP
// server on a directory of YAML specs, `svc run` runs one task, `svc
// validate` checks spec files, `svc version` prints the version.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

// exitError carries a process exit code through cobra.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit %d", e.code)
	}
	return e.err.Error()
}

func main() {
	root := newRoot()
	if err := root.Execute(); err != nil {
		var ee *exitError
		if errors.As(err, &ee) {
			if ee.err != nil {
				fmt.Fprintln(os.Stderr, "svc:", ee.err)
			}
			os.Exit(ee.code)
		}
		fmt.Fprintln(os.Stderr, "svc:", err)
		os.Exit(1)
	}
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "svc",
		Short: "svc runs LLM agents and groups of agents as a service",
		Long: `svc runs LLM agents as a service.

  svc serve --specs examples/specs     start the HTTP server (no API key needed for test:* models)
  svc run echo --input '{"text":"hi"}' --specs examples/specs
  svc validate examples/specs          check spec files
  svc version`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newServe(), newRun(), newValidate(), newVersion())
	return root
}
