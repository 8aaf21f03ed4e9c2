package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/svc-dev/svc"
)

// svc batch: the batches of a server (POST /batches and the routes under
// it). Like svc runs, a server only: a batch lives in its run store.

func newBatch() *cobra.Command {
	f := &runsFlags{}
	var limit int
	var cursor string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "batch [--limit N] [--cursor C]",
		Short: "Submit a batch of tasks that outlives the connection, or list, show, fetch or cancel one",
		Long: `A batch is a gather the server keeps: svc batch submit uploads the tasks
(POST /batches), and once the server has stored every one it prints the
batch's id and returns; the server runs them, with --max-concurrency at
most at once, and stores each result as it finishes. Come back with svc
batch status, results or cancel. A batch survives a restart of the server
(with a persistent --store): it goes on where it stopped, and no task whose
result was stored runs again.

Without a subcommand, svc batch lists the server's batches, newest first
(GET /batches), one line each: batch id, state, target, done (succeeded/
failed of total) and creation time; when there are more than --limit,
stderr says the --cursor of the next page.

The batches live in the server's run store, so these commands need a
server: --url (default $SVC_URL, else ` + defaultURL + `).

Exit status: 0 on success, 1 when the server refused the call (an unknown
batch or agent, say), 2 for bad usage.`,
		Example: `  seq 1 100 | sed 's/.*/{"input": &}/' | svc batch submit - --target echo   # prints the batch id
  svc batch --limit 5`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 1 || limit > svc.MaxBatchPage {
				return &exitError{code: 2, err: fmt.Errorf("--limit %d: want 1 to %d", limit, svc.MaxBatchPage)}
			}
			c, err := f.open(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			defer func() { _ = c.Close() }()
			page, err := c.ListBatches(cmd.Context(), cursor, limit)
			if err != nil {
				return &exitError{code: 1, err: err}
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), page, true)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "BATCH_ID\tSTATE\tTARGET\tDONE\tCREATED")
			for _, b := range page.Batches {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d of %d\t%s\n", b.BatchID, b.State, b.Target, b.Counts.Succeeded, b.Counts.Failed,
					b.Counts.Total, b.CreatedAt.Local().Format(time.RFC3339))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if page.NextCursor != "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "svc: more batches: svc batch --cursor %s\n", page.NextCursor)
			}
			return nil
		},
	}
	f.register(cmd)
	fs := cmd.Flags()
	fs.IntVar(&limit, "limit", svc.DefaultBatchPage, fmt.Sprintf("batches per page, 1 to %d", svc.MaxBatchPage))
	fs.StringVar(&cursor, "cursor", "", "read the page after the one that printed this cursor (default: the first page)")
	fs.BoolVar(&asJSON, "json", false, "print the page as JSON ({batches, next_cursor}) (default false)")
	cmd.AddCommand(newBatchSubmit(f), newBatchStatus(f), newBatchResults(f), newBatchCancel(f))
	return cmd
}

func newBatchSubmit(f *runsFlags) *cobra.Command {
	var target, mode, callback string
	var conc int
	cmd := &cobra.Command{
		Use:   "submit FILE --target NAME [--max-concurrency N] [--mode runtime|provider]",
		Short: "Upload a batch of tasks (NDJSON) and print its id",
		Long: `Upload the tasks of FILE (- for stdin), one TaskSpec a line as JSON
({"input": ..., "id": ..., "metadata": {...}}; blank lines are skipped), as
a batch on the agent NAME (POST /batches). The server answers once every
task is stored; the batch id goes to stdout. A line that is not a task
fails as its own result, not the batch.

--mode provider sends the tasks' model calls to the provider's batch API
(OpenAI's Batch API, Anthropic's Message Batches) at half the price, with
the provider's latency (minutes to 24 hours): only for an agent whose run
is one model call without tools; the server refuses any other.

Exit status: 0 when the batch was stored, 1 when the server refused it (an
unknown agent, say) or the upload failed, 2 for bad usage.`,
		Example: `  seq 1 1000 | sed 's/.*/{"input": &}/' | svc batch submit - --target echo --max-concurrency 50`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if target == "" {
				return &exitError{code: 2, err: errors.New("--target NAME is required (the agent that runs the tasks)")}
			}
			if _, err := svc.CheckGatherConcurrency(conc); err != nil {
				return &exitError{code: 2, err: fmt.Errorf("--max-concurrency: %w", err)}
			}
			m, err := svc.CheckBatchMode(svc.BatchMode(mode))
			if err != nil {
				return &exitError{code: 2, err: fmt.Errorf("--mode: %w", err)}
			}
			var in io.Reader = cmd.InOrStdin()
			if args[0] != "-" {
				file, err := os.Open(args[0])
				if err != nil {
					return &exitError{code: 2, err: err}
				}
				defer file.Close()
				in = file
			}
			c, err := f.open(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			defer func() { _ = c.Close() }()
			var readErr error
			tasks := func(yield func(svc.TaskSpec) bool) {
				br := bufio.NewReaderSize(in, 64<<10)
				for line := 1; ; line++ {
					b, err := br.ReadBytes('\n')
					if b = bytes.TrimSpace(b); len(b) > 0 {
						var t svc.TaskSpec
						if jerr := json.Unmarshal(b, &t); jerr != nil {
							t = svc.TaskSpec{Invalid: fmt.Errorf("line %d: %w", line, jerr)}
						}
						if !yield(t) {
							return
						}
					}
					if err != nil {
						if !errors.Is(err, io.EOF) {
							readErr = err
						}
						return
					}
				}
			}
			acc, err := c.SubmitBatch(cmd.Context(), target, tasks, svc.BatchOptions{MaxConcurrency: conc, Mode: m, CallbackURL: callback})
			if readErr != nil {
				return &exitError{code: 1, err: fmt.Errorf("reading %s: %w", args[0], readErr)}
			}
			if err != nil {
				return &exitError{code: 1, err: err}
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "svc: batch of %d tasks stored\n", acc.Total)
			_, err = fmt.Fprintln(cmd.OutOrStdout(), acc.BatchID)
			return err
		},
	}
	cmd.Flags().StringVar(&target, "target", "", "the agent that runs the tasks (required)")
	cmd.Flags().IntVar(&conc, "max-concurrency", svc.DefaultGatherConcurrency, fmt.Sprintf("tasks in flight at most, 1 to %d", svc.MaxGatherConcurrency))
	cmd.Flags().StringVar(&callback, "callback-url", "", "an http(s) URL the server POSTs the batch's summary to, signed, when it ends (the server needs --webhook-key-file) (default none)")
	cmd.Flags().StringVar(&mode, "mode", "runtime", "runtime (run each task here) or provider (the provider's batch API: half price, up to 24 h)")
	return cmd
}

func newBatchStatus(f *runsFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "status ID",
		Short: "Print a batch's status as JSON",
		Long: `Print a batch's status (GET /batches/ID) as JSON: state (queued, running,
completed, cancelled, failed), counts {total, succeeded, failed, running},
tokens_used and cost_usd so far.

Exit status: 0 when printed, 1 for an unknown batch or a refused call, 2
for bad usage.`,
		Example: `  svc batch status "$(seq 1 10 | sed 's/.*/{"input": &}/' | svc batch submit - --target echo)"`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.open(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			defer func() { _ = c.Close() }()
			st, err := c.BatchStatus(cmd.Context(), args[0])
			if err != nil {
				return &exitError{code: 1, err: err}
			}
			return printJSON(cmd.OutOrStdout(), st, true)
		},
	}
}

func newBatchResults(f *runsFlags) *cobra.Command {
	var order string
	var after int64
	var follow bool
	cmd := &cobra.Command{
		Use:   "results ID [--order index|finish] [--after N] [--follow]",
		Short: "Print a batch's results as JSON lines",
		Long: `Print the results a batch has so far (GET /batches/ID/results), one JSON
object a line: {"index": i, "seq": s, "result": AgentResult}. --order index
(the default) prints them by task index, --order finish in the order they
finished (seq counts them from 1). --after resumes after the last index
(or, by finish, seq) printed. --follow waits for the results to come until
the batch ends; by index it prints each one after those before it.

Exit status: 0 when printed, 1 for an unknown batch or a refused call, 2
for bad usage.`,
		Example: `  svc batch results "$(seq 1 10 | sed 's/.*/{"input": &}/' | svc batch submit - --target echo)" --follow`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o := svc.BatchOrder(order)
			if o != svc.BatchByIndex && o != svc.BatchByFinish {
				return &exitError{code: 2, err: fmt.Errorf("--order %q: want index or finish", order)}
			}
			if after < -1 {
				return &exitError{code: 2, err: fmt.Errorf("--after %d: must not be negative", after)}
			}
			if after == -1 && o == svc.BatchByFinish {
				after = 0
			}
			c, err := f.open(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			defer func() { _ = c.Close() }()
			w := bufio.NewWriter(cmd.OutOrStdout())
			defer w.Flush()
			for r, err := range c.BatchResults(cmd.Context(), args[0], o, after, follow) {
				if err != nil {
					_ = w.Flush()
					return &exitError{code: 1, err: err}
				}
				b, err := json.Marshal(svc.BatchResultLine{Index: r.Index, Seq: r.Seq, Result: r.Result})
				if err != nil {
					return err
				}
				_, _ = w.Write(append(b, '\n'))
				if !r.More {
					if err := w.Flush(); err != nil {
						return err
					}
				}
			}
			return w.Flush()
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&order, "order", "index", "index (by task) or finish (as they finished)")
	fs.Int64Var(&after, "after", -1, "print only the results after this index (by finish: this seq) (default -1: all)")
	fs.BoolVar(&follow, "follow", false, "wait for the results to come until the batch ends (default false)")
	return cmd
}

func newBatchCancel(f *runsFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "cancel ID",
		Short: "Cancel a batch",
		Long: `Cancel a batch (POST /batches/ID/cancel): its tasks in flight are stopped
and no more start; the results stored so far stay. Cancelling a batch that
already ended does nothing.

Exit status: 0 when the server took the cancel, 1 for an unknown batch or
a refused call, 2 for bad usage.`,
		Example: `  svc batch cancel "$(seq 1 10 | sed 's/.*/{"input": &}/' | svc batch submit - --target echo)"`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.open(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			defer func() { _ = c.Close() }()
			if err := c.CancelBatch(cmd.Context(), args[0]); err != nil {
				return &exitError{code: 1, err: err}
			}
			st, err := c.BatchStatus(cmd.Context(), args[0])
			if err != nil {
				return &exitError{code: 1, err: err}
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "batch %s %s\n", st.BatchID, st.State)
			return err
		},
	}
}
