package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/svc-dev/svc"
)

type runCmd struct {
	connFlags
	taskFlags
	progress progressFlag
}

// taskFlags are the flags of one task, shared by svc run and svc submit.
type taskFlags struct {
	input     string
	taskID    string
	requestID string
	kind      string
}

func (t *taskFlags) register(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&t.input, "input", "", "task input as JSON (@FILE: from a file, -: from stdin); required, no default")
	fs.StringVar(&t.taskID, "task-id", "", "task id (default: a new UUIDv7)")
	fs.StringVar(&t.requestID, "request-id", "", "request id, the trace_id of every event (default: a new UUIDv7)")
	fs.StringVar(&t.kind, "kind", "", "agent or group, for a name that is both (default: whichever TARGET names)")
	_ = cmd.MarkFlagRequired("input")
}

// task reads --input (inline, @FILE or -) and returns the task; a bad
// input is a usage error.
func (t *taskFlags) task(cmd *cobra.Command) (svc.TaskSpec, error) {
	input, err := readInput("--input", t.input, cmd.InOrStdin())
	if err != nil {
		return svc.TaskSpec{}, &exitError{code: 2, err: err}
	}
	return svc.TaskSpec{ID: t.taskID, Input: input, RequestID: t.requestID}, nil
}

func newRun() *cobra.Command {
	r := &runCmd{}
	cmd := &cobra.Command{
		Use:   "run TARGET --input JSON [--specs DIR | --url URL]",
		Short: "Run one task on an agent or a group and print the result",
		Long: `Run one task on an agent or a group (TARGET) and wait for the result: an
AgentResult as JSON, or a GroupResult when several terminal nodes of a
group fired.

In process with --specs DIR (the agents and groups of DIR, no server
needed), or on a running server with --url. --input is a JSON value; @FILE
reads it from a file and - from standard input. A name that is both an
agent and a group needs --kind.

While the run lasts, a progress line on stderr (when it is a terminal, see
--progress) shows the invocations completed, failed and running (in
process; on a server only the elapsed time, a synchronous call reports no
progress: use svc submit --wait for that). Ctrl-C cancels the run and
waits for it to end; a second Ctrl-C exits at once.

Exit status: 0 when the result is a success, 1 when the run failed or was
cancelled (the result is still printed when there is one) or the call was
refused, 2 for bad usage, 130 after a second interrupt.`,
		Example: `  svc run echo --input '{"text":"hi"}' --specs examples/specs     # in process
  svc run pipeline --input '"draft"'            # on the server`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return r.run(cmd, args[0]) },
	}
	fs := cmd.Flags()
	r.connFlags.register(fs)
	r.progress.register(fs)
	r.taskFlags.register(cmd)
	return cmd
}

// readInput reads a JSON value given as --input: inline, @FILE or -.
func readInput(flag, value string, stdin io.Reader) (json.RawMessage, error) {
	data := []byte(value)
	var err error
	switch {
	case value == "-":
		data, err = io.ReadAll(stdin)
	case strings.HasPrefix(value, "@"):
		data, err = os.ReadFile(value[1:])
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	if !json.Valid(data) {
		return nil, fmt.Errorf("%s is not valid JSON: %.80q", flag, data)
	}
	return json.RawMessage(data), nil
}

func (r *runCmd) run(cmd *cobra.Command, target string) error {
	task, err := r.task(cmd)
	if err != nil {
		return err
	}
	if err := r.progress.check(); err != nil {
		return &exitError{code: 2, err: err}
	}
	c, err := r.open(cmd)
	if err != nil {
		return err
	}
	defer c.close()
	ctx, cancel := context.WithCancel(cmd.Context())
	defer cancel()
	kind, err := kindOf(ctx, c, target, r.kind)
	if err != nil {
		return err
	}
	errw := cmd.ErrOrStderr()
	line := newProgressLine(errw, r.progress.enabled(errw), string(kind)+" "+target)
	defer line.stop()
	// A synchronous call has no run id to cancel: cancelling its context
	// stops it (in process), or ends the request, which the server takes
	// for a cancellation.
	stopWatch := onInterrupt(errw, "the run", func() { line.setNote("cancelling"); cancel() })
	defer stopWatch()
	var res svc.RunResult
	if kind == svc.TargetGroup {
		res, err = c.RunGroup(svc.WithProgress(ctx, line.set), target, task)
	} else {
		var a svc.AgentResult
		a, err = c.Run(ctx, target, task)
		res.Agent = &a
	}
	line.stop()
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("the run was cancelled (interrupt): %w", err)
		}
		return &exitError{code: 1, err: err}
	}
	if err := printJSON(cmd.OutOrStdout(), res, true); err != nil {
		return err
	}
	if !res.Success() {
		return &exitError{code: 1}
	}
	return nil
}

// printJSON writes v as JSON and a newline, indented when indent is set.
func printJSON(w io.Writer, v any, indent bool) error {
	enc := json.NewEncoder(w)
	if indent {
		enc.SetIndent("", "  ")
	}
	return enc.Encode(v)
}
