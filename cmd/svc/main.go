// Command svc runs LLM agents as a service: `svc serve` starts the HTTP
// server on a directory of YAML specs, `svc status` follows its runtime
// events, `svc run` runs one task on an agent or a group, `svc gather`
// many tasks on an agent, `svc submit` and `svc runs` submit runs and come
// back for them, `svc validate` checks spec files, `svc version` prints the
// version and commit. docs/cli.md describes them all.
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

// runError marks an error returned by a command's own RunE, so that main can
// tell it from the errors cobra returns before any RunE runs (unknown
// command or flag, bad flag value, wrong number of arguments, missing
// required flag), which are all bad usage.
type runError struct{ err error }

func (e *runError) Error() string { return e.err.Error() }
func (e *runError) Unwrap() error { return e.err }

// exitCode is the process exit status for what Execute returned: the code of
// an exitError, 1 for any other failure of a command, 2 for bad usage.
func exitCode(err error) int {
	var ee *exitError
	var re *runError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.code
	case errors.As(err, &re):
		return 1
	}
	return 2
}

func main() {
	cmd, err := newRoot().ExecuteC()
	if err == nil {
		return
	}
	var ee *exitError
	var re *runError
	switch {
	case errors.As(err, &ee) && ee.err == nil:
		// The command already said what happened (a failed result, say).
	case errors.As(err, &ee), errors.As(err, &re):
		fmt.Fprintln(os.Stderr, "svc:", err)
	default:
		fmt.Fprintf(os.Stderr, "svc: %v\nRun '%s --help' for usage.\n", err, cmd.CommandPath())
	}
	os.Exit(exitCode(err))
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "svc",
		Short: "svc runs LLM agents and groups of agents as a service",
		Long: `svc runs LLM agents as a service: svc serve starts the HTTP server on a
directory of specs, the other commands talk to it or run in process.

--url is the base URL of a server for every command that talks to one,
else $SVC_URL, else http://127.0.0.1:8420.

Exit status: 0 on success, 1 when a run failed or was cancelled or a call
was refused, 2 for bad usage (unknown command or flag, bad flag value, bad
input), 130 after a second interrupt of a command waiting for a run.`,
		// Every line of every Example is run by TestHelpExamples.
		Example: `  svc serve --specs examples/specs              # start the HTTP server (no API key needed for test:* models)
  svc status                                    # follow the server's runtime events, one line each
  svc run echo --input '{"text":"hi"}' --specs examples/specs     # in process, no server
  svc run pipeline --input '"draft"'            # on the server
  printf '1\n2\n' | svc gather echo --inputs - --specs examples/specs
  svc submit panel --input '"plan"' --wait      # submit a run to the server and wait for it
  svc runs --state completed                    # list the server's runs; svc runs --help for one run
  svc validate examples/specs                   # check spec files
  svc mcp --specs examples/specs </dev/null     # serve the agents and groups as MCP tools on stdio
  svc version`,
		Version:       versionLine(),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.AddCommand(newServe(), newWorker(), newStatus(), newRun(), newGather(), newSubmit(), newRuns(), newBatch(), newValidate(), newMCP(), newKeys(), newVersion())
	wrapRunE(root)
	return root
}

// wrapRunE marks the errors of every command's RunE, subcommands
// included, as runErrors.
func wrapRunE(parent *cobra.Command) {
	for _, c := range parent.Commands() {
		wrapRunE(c)
		if c.RunE == nil {
			continue
		}
		runE := c.RunE
		c.RunE = func(cmd *cobra.Command, args []string) error {
			if err := runE(cmd, args); err != nil {
				return &runError{err: err}
			}
			return nil
		}
	}
}
