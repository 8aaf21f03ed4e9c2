package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"iter"
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
		Use:   "gather AGENT --inputs FILE.jsonl [--specs DIR | --url URL]",
		Short: "Run many tasks on one agent and stream one result per line",
		Long: `Run one task on AGENT per line of --inputs, at most --max-concurrency at
once, and print each result as soon as it finishes, one JSON line each:
{"index": N, "result": AgentResult}, where N is the task's place among the
inputs (0-based, blank lines not counted). The results come in the order
they finish, not the order of the file.

--inputs is JSON lines: each non-blank line is one task's input, any JSON
value (the whole line is the input: {"input": 1} is an object input, not a
TaskSpec). - reads standard input. The inputs are read as the tasks run,
never more than a bounded window ahead, so a file of any size streams in
bounded memory. A file is checked first: a line that is not JSON is an
error naming the file and the line, and nothing runs. On standard input,
which cannot be read twice, such a line fails its task instead.

In process with --specs DIR, or on a running server with --url (POST
/agents/AGENT/gather, streamed both ways as application/x-ndjson). While it
lasts a progress line on stderr (when it is a terminal, see --progress)
counts the tasks completed and failed (in process, and running). Ctrl-C cancels the gather and waits
for it to end; a second Ctrl-C exits at once.

Exit status: 0 when every task succeeded, 1 when one failed (all results
are still printed) or the call was refused or cancelled, 2 for bad usage
or bad input, 130 after a second interrupt.`,
		Example: `  printf '1\n2\n3\n' | svc gather echo --inputs - --specs examples/specs`,
		Args:    cobra.ExactArgs(1),
		RunE:    func(cmd *cobra.Command, args []string) error { return g.run(cmd, args[0]) },
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

// maxInputLine bounds one line of --inputs.
const maxInputLine = 64 << 20

// checkInputs reads a JSON lines file of task inputs through, without
// keeping it, and reports the first line that is not JSON; name is how
// errors call it ("FILE:LINE: ..."). It returns the number of inputs.
func checkInputs(name string, r io.Reader) (int, error) {
	n := 0
	for line, err := range inputLines(name, r) {
		if err != nil {
			return 0, err
		}
		if !json.Valid(line.text) {
			var v any
			jerr := json.Unmarshal(line.text, &v)
			return 0, fmt.Errorf("%s:%d: not a JSON value: %v", name, line.no, jerr)
		}
		n++
	}
	if n == 0 {
		return 0, fmt.Errorf("%s: no inputs (want one JSON value per line)", name)
	}
	return n, nil
}

// inputLine is one non-blank line of --inputs, trimmed, and its number.
type inputLine struct {
	text []byte
	no   int
}

// inputLines yields the non-blank lines of r; the text is valid until the
// next line. A read error, or a line longer than maxInputLine, ends it
// with an error naming the file and the line.
func inputLines(name string, r io.Reader) iter.Seq2[inputLine, error] {
	return func(yield func(inputLine, error) bool) {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), maxInputLine)
		n := 0
		for sc.Scan() {
			n++
			if t := bytes.TrimSpace(sc.Bytes()); len(t) > 0 {
				if !yield(inputLine{text: t, no: n}, nil) {
					return
				}
			}
		}
		if err := sc.Err(); err != nil {
			yield(inputLine{}, fmt.Errorf("%s:%d: %w", name, n+1, err))
		}
	}
}

// inputTasks yields one task per input line of r. A line that is not JSON
// is a task with Invalid set; a read error ends the tasks and is kept in
// *readErr.
func inputTasks(name string, r io.Reader, requestID string, readErr *error) iter.Seq[svc.TaskSpec] {
	return func(yield func(svc.TaskSpec) bool) {
		for line, err := range inputLines(name, r) {
			if err != nil {
				*readErr = err
				return
			}
			task := svc.TaskSpec{RequestID: requestID}
			if json.Valid(line.text) {
				task.Input = json.RawMessage(bytes.Clone(line.text))
			} else {
				task.Invalid = svc.Errorf(svc.KindSpecValidation, "%s:%d: not a JSON value", name, line.no)
			}
			if !yield(task) {
				return
			}
		}
	}
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
	label := fmt.Sprintf("gather %s", agent)
	if g.inputs != "-" {
		f, err := os.Open(g.inputs)
		if err != nil {
			return usage(fmt.Errorf("--inputs: %w", err))
		}
		defer f.Close()
		n, err := checkInputs(g.inputs, f)
		if err != nil {
			return usage(err)
		}
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return usage(fmt.Errorf("--inputs: %w", err))
		}
		in, name = f, g.inputs
		label = fmt.Sprintf("gather %s (%d tasks)", agent, n)
	}
	c, err := g.open(cmd)
	if err != nil {
		return err
	}
	defer c.close()
	gs, ok := c.backend.(svc.GatherStreamer)
	if !ok {
		return &exitError{code: 1, err: fmt.Errorf("the backend (%T) does not stream gathers", c.backend)}
	}
	ctx, cancel := context.WithCancel(cmd.Context())
	defer cancel()
	errw := cmd.ErrOrStderr()
	line := newProgressLine(errw, g.progress.enabled(errw), label)
	defer line.stop()
	stopWatch := onInterrupt(errw, "the gather", func() { line.setNote("cancelling"); cancel() })
	defer stopWatch()

	var readErr error
	tasks := inputTasks(name, in, g.requestID, &readErr)
	w := bufio.NewWriter(cmd.OutOrStdout())
	var sum svc.GatherSummary
	var prog svc.RunProgress
	var runErr error
	for item, err := range gs.GatherStream(svc.WithProgress(ctx, line.set), agent, tasks, g.concurrency) {
		if err != nil {
			runErr = err
			continue
		}
		sum.Add(&item.Result)
		if !c.inProcess {
			// In process the runtime counts (WithProgress below), running
			// tasks included; from a server only the results tell.
			if item.Result.Success {
				prog.Completed++
			} else {
				prog.Failed++
			}
			line.set(prog)
		}
		if err := writeStreamLine(w, item); err != nil {
			return err
		}
		if !item.More {
			// Nothing else is waiting: let the reader see this one now.
			if err := w.Flush(); err != nil {
				return err
			}
		}
	}
	line.stop()
	if err := w.Flush(); err != nil {
		return err
	}
	switch {
	case runErr != nil:
		if ctx.Err() != nil {
			runErr = fmt.Errorf("the gather was cancelled (interrupt): %w", runErr)
		}
		return &exitError{code: 1, err: runErr}
	case readErr != nil:
		return &exitError{code: 1, err: fmt.Errorf("--inputs: %w (the tasks before it ran)", readErr)}
	case sum.TaskCount == 0:
		return usage(fmt.Errorf("%s: no inputs (want one JSON value per line)", name))
	case sum.FailureCount > 0:
		return &exitError{code: 1, err: fmt.Errorf("%d of %d tasks failed", sum.FailureCount, sum.TaskCount)}
	}
	return nil
}

// writeStreamLine writes {"index": N, "result": ...} and a newline.
func writeStreamLine(w *bufio.Writer, item svc.GatherItem) error {
	data, err := json.Marshal(svc.StreamLine{Index: &item.Index, Result: &item.Result})
	if err != nil {
		return err
	}
	data = append(data, '\n')
	_, err = w.Write(data)
	return err
}
