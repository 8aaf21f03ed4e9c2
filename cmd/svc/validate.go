package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/svc-dev/svc/app"
	"github.com/svc-dev/svc/model/providers"
	"github.com/svc-dev/svc/spec"
)

func newValidate() *cobra.Command {
	var filesRoot string
	cmd := &cobra.Command{
		Use:   "validate DIR",
		Short: "Check the spec files of a directory",
		Long: `Check DIR/runtime.yaml, DIR/templates/*.yaml, DIR/agents/*.yaml and
DIR/groups/*.yaml without running anything. An agent that names a template
is checked with the template applied; an unknown template, or one whose
file has errors, is reported at the agent's template key. Groups are checked against the agents of DIR: the agents
their nodes name, their edges, cycles, entry and terminal nodes, and their
CEL expressions. Agents are compiled the way serve registers them (their
models, JSON Schemas, tools and MCP server settings): validate and serve load
specs through the same function, so a directory validate accepts serve
starts with, and one serve refuses validate reports with file and line.

Prints one line per file (runtime.yaml, then the templates, the agents and
the groups):
"[ok] FILE" or "[error] FILE:LINE: message".
Exit status: 0 when every file is valid, 1 when any is not or when DIR has
no agents or groups ("no agents or groups found in DIR"), 2 when DIR is
missing or not a directory.`,
		Example: `  svc validate examples/specs`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			results, err := spec.Validate(args[0], app.SpecEnv(providers.Default(), filesRoot, nil))
			if err != nil {
				return &exitError{code: 2, err: err}
			}
			out := cmd.OutOrStdout()
			bad := 0
			for _, r := range results {
				if r.Err == nil {
					fmt.Fprintf(out, "[ok] %s\n", r.File)
					continue
				}
				bad++
				fmt.Fprintf(out, "[error] %s\n", r.Err)
			}
			for _, r := range results {
				if errors.Is(r.Err, spec.ErrNoSpecs) {
					return &exitError{code: 1, err: r.Err}
				}
			}
			if bad > 0 {
				return &exitError{code: 1, err: fmt.Errorf("%d of %d files have errors", bad, len(results))}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&filesRoot, "files-root", "", "directory the file tools are confined to, as for serve (default: none)")
	return cmd
}
