package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/svc-dev/svc"
)

type gatherCmd struct {
	connFlags
	progress    progressFlag
	inputs      string
	concurrency int
	requestID   string
}

func newGather() *cobra.Command {
	g := &gatherCmd{}
	cmd := &cobra.Command{
		Use:   "gather AGENT --inputs FILE.jsonl (--specs DIR | --url URL)",
		Short: "Run many tasks on one agent and print one result per line",
		Long: `Run one task on AGENT per line of --inputs, at most --max-concurrency at
once, and print the AgentResults as JSON lines, one per input line, in the
order of the file.

--inputs is JSON lines: each non-blank line is one task's input, any JSON
value (the whole line is the input: {"input": 1} is an object input, not a
TaskSpec). - reads standard input. A line that is not JSON is an error
naming the file and the line, and nothing runs.

In process with --specs DIR, or on a running server with --url (POST
/agents/AGENT/gather). While it lasts a progress line on stderr (when it
is a terminal, see --progress) counts the tasks completed, failed and
running (in process; on a server, the elapsed time). Ctrl-C cancels the
gather and waits for it to end; a second Ctrl-C exits at once.

Exit status: 0 when every task succeeded, 1 when one failed (all results
are still printed) or the call was refused or cancelled, 2 for bad usage
or bad input, 130 after a second interrupt.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return g.run(cmd, args[0]) },
	}
	fs := cmd.Flags()
	g.connFlags.register(fs)
	g.progress.register(fs)
	fs.StringVar(&g.inputs, "inputs", "", "JSON lines file, one task input per line (-: standard input); required, no default")
	fs.IntVar(&g.concurrency, "max-concurrency", svc.DefaultGatherConcurrency, fmt.Sprintf("tasks running at once, 1 to %d", svc.MaxGatherConcurrency))
	fs.StringVar(&g.requestID, "request-id", "", "request id, the trace_id of every task's events (default: a new UUIDv7)")
	_ = cmd.MarkFlagRequired("inputs")
	return cmd
}

// readInputs reads a JSON lines file of task inputs; name is how errors
// call it ("FILE:LINE: ...").
func readInputs(name string, r io.Reader, requestID string) ([]svc.TaskSpec, error) {
	br := bufio.NewReader(r)
	var tasks []svc.TaskSpec
	for n := 1; ; n++ {
		line, err := br.ReadBytes('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s:%d: %w", name, n, err)
		}
		if trimmed := bytes.TrimSpace(line); len(trimmed) > 0 {
			if !json.Valid(trimmed) {
				var v any
				jerr := json.Unmarshal(trimmed, &v)
				return nil, fmt.Errorf("%s:%d: not a JSON value: %v", name, n, jerr)
			}
			tasks = append(tasks, svc.TaskSpec{Input: json.RawMessage(bytes.Clone(trimmed)), RequestID: requestID})
		}
		if err != nil { // io.EOF: the last line had no newline
			break
		}
	}
	if len(tasks) == 0 {
		return nil, fmt.Errorf("%s: no inputs (want one JSON value per line)", name)
	}
	return tasks, nil
}

func (g *gatherCmd) run(cmd *cobra.Command, agent string) error {
	usage := func(err error) error { return &exitError{code: 2, err: err} }
	if err := g.progress.check(); err != nil {
		return usage(err)
	}
	if g.concurrency < 1 || g.concurrency > svc.MaxGatherConcurrency {
		return usage(fmt.Errorf("--max-concurrency %d: want 1 to %d", g.concurrency, svc.MaxGatherConcurrency))
	}
	in, name := cmd.InOrStdin(), "stdin"
	if g.inputs != "-" {
		f, err := os.Open(g.inputs)
		if err != nil {
			return usage(fmt.Errorf("--inputs: %w", err))
		}
		defer f.Close()
		in, name = f, g.inputs
	}
	tasks, err := readInputs(name, in, g.requestID)
	if err != nil {
		return usage(err)
	}
	c, err := g.open(cmd)
	if err != nil {
		return err
	}
	defer c.close()
	ctx, cancel := context.WithCancel(cmd.Context())
	defer cancel()
	errw := cmd.ErrOrStderr()
	line := newProgressLine(errw, g.progress.enabled(errw), fmt.Sprintf("gather %s (%d tasks)", agent, len(tasks)))
	defer line.stop()
	stopWatch := onInterrupt(errw, "the gather", func() { line.setNote("cancelling"); cancel() })
	defer stopWatch()
	results, err := c.Gather(svc.WithProgress(ctx, line.set), agent, tasks, g.concurrency)
	line.stop()
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("the gather was cancelled (interrupt): %w", err)
		}
		return &exitError{code: 1, err: err}
	}
	w := bufio.NewWriter(cmd.OutOrStdout())
	failed := 0
	for _, res := range results {
		if !res.Success {
			failed++
		}
		if err := printJSON(w, res, false); err != nil {
			return err
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if failed > 0 {
		return &exitError{code: 1, err: fmt.Errorf("%d of %d tasks failed", failed, len(results))}
	}
	return nil
}
