package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/http/client"
)

type submitCmd struct {
	connFlags
	taskFlags
	progress       progressFlag
	idempotencyKey string
	callbackURL    string
	wait           bool
}

func newSubmit() *cobra.Command {
	s := &submitCmd{}
	cmd := &cobra.Command{
		Use:   "submit TARGET --input JSON [--url URL | --specs DIR]",
		Short: "Submit a run of an agent or a group and print its run id",
		Long: `Submit one task to an agent or a group (TARGET) as a run (POST /submit)
and print the run's id on stdout; come back for it with svc runs show,
result, follow or cancel.

With --wait, svc submit then waits for the run to end, with a progress line
on stderr (when it is a terminal, see --progress) counting the invocations
completed, failed and running, and prints the result as svc run does; the
run id goes to stderr. Ctrl-C cancels the run (POST /runs/ID/cancel) and
waits for it to end; a second Ctrl-C exits at once.

In process (--specs DIR) a run lives as long as the process, so svc submit
always waits there.

Exit status: 0 when the run was submitted (with --wait: when it completed
with a successful result), 1 when the submit was refused or the run
failed or was cancelled, 2 for bad usage, 130 after a second interrupt.`,
		Example: `  svc submit echo --input '{"text":"hi"}'       # prints the run id
  svc submit panel --input '"plan"' --wait      # and waits for the result`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return s.run(cmd, args[0]) },
	}
	fs := cmd.Flags()
	s.connFlags.register(fs)
	s.progress.register(fs)
	s.taskFlags.register(cmd)
	fs.StringVar(&s.idempotencyKey, "idempotency-key", "", "Idempotency-Key: a retried submit with the same key and request returns the first run's id (default: none)")
	fs.BoolVar(&s.wait, "wait", false, "wait for the run to end and print its result (always in process) (default false)")
	fs.StringVar(&s.callbackURL, "callback-url", "", "an http(s) URL the server POSTs the run's status and result to, signed, when it ends (the server needs --webhook-key-file) (default none)")
	return cmd
}

func (s *submitCmd) run(cmd *cobra.Command, target string) error {
	usage := func(err error) error { return &exitError{code: 2, err: err} }
	task, err := s.task(cmd)
	if err != nil {
		return err
	}
	if err := s.progress.check(); err != nil {
		return usage(err)
	}
	switch svc.TargetKind(s.kind) {
	case "", svc.TargetAgent, svc.TargetGroup:
	default:
		return usage(fmt.Errorf("--kind %q: want agent or group", s.kind))
	}
	c, err := s.open(cmd)
	if err != nil {
		return err
	}
	defer c.close()
	ctx := cmd.Context()
	id, err := c.Submit(ctx, svc.SubmitRequest{Target: target, Kind: svc.TargetKind(s.kind), IdempotencyKey: s.idempotencyKey,
		Task: task, CallbackURL: s.callbackURL})
	if err != nil {
		return &exitError{code: 1, err: err}
	}
	if !s.wait && !c.inProcess {
		fmt.Fprintln(cmd.OutOrStdout(), id)
		return nil
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "svc: submitted run %s\n", id)
	st, err := waitRun(ctx, c, id, cmd.ErrOrStderr(), s.progress.enabled(cmd.ErrOrStderr()), target)
	if err != nil {
		return &exitError{code: 1, err: err}
	}
	return printRunResult(ctx, cmd.OutOrStdout(), c, st)
}

// runPoll bounds the wait between two status polls of waitRun: quick for
// short runs, at most one request a second for long ones.
const (
	runPollMin = 50 * time.Millisecond
	runPollMax = time.Second
)

// waitRun polls the run's status until it is terminal, drawing its
// progress on errw when progress is set. The first interrupt cancels the
// run (CancelRun) and the wait goes on until the run has ended; a second
// one exits at once.
func waitRun(ctx context.Context, b svc.RunBackend, id string, errw io.Writer, progress bool, label string) (svc.RunStatus, error) {
	line := newProgressLine(errw, progress, label+" (run "+id+")")
	defer line.stop()
	stopWatch := onInterrupt(errw, "run "+id, func() {
		line.setNote("cancelling")
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := b.CancelRun(cctx, id); err != nil {
			fmt.Fprintf(errw, "\r\x1b[Ksvc: cancelling run %s: %v\n", id, err)
		}
	})
	defer stopWatch()
	wait := runPollMin
	for {
		st, err := b.RunStatus(ctx, id)
		if err != nil {
			return st, err
		}
		if st.Progress != nil {
			line.set(*st.Progress)
		}
		if st.State.Terminal() {
			return st, nil
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return st, ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, runPollMax)
	}
}

// printRunResult prints the result of the terminal run st, indented, and
// returns the command's outcome: nil for a successful result, an exit 1
// for a failed one, a cancelled run or one without a result.
func printRunResult(ctx context.Context, out io.Writer, b svc.RunBackend, st svc.RunStatus) error {
	if st.State == svc.RunCancelled {
		return &exitError{code: 1, err: fmt.Errorf("run %s was cancelled", st.RunID)}
	}
	raw, err := b.RunResult(ctx, st.RunID)
	if err != nil {
		return &exitError{code: 1, err: fmt.Errorf("run %s %s: %w", st.RunID, st.State, err)}
	}
	var res svc.RunResult
	if err := json.Unmarshal(raw, &res); err != nil {
		return &exitError{code: 1, err: fmt.Errorf("run %s: the result is not an AgentResult or GroupResult: %w", st.RunID, err)}
	}
	if err := printJSON(out, json.RawMessage(raw), true); err != nil {
		return err
	}
	if !res.Success() || st.State != svc.RunCompleted {
		return &exitError{code: 1}
	}
	return nil
}

// runsFlags are the flags of svc runs and its subcommands: a server only,
// since the runs live in its run store.
type runsFlags struct {
	remoteFlags
}

func (r *runsFlags) register(cmd *cobra.Command) {
	r.remoteFlags.register(cmd.PersistentFlags(), "", urlUsage)
}

func (r *runsFlags) open(w io.Writer) (*client.Client, error) {
	c, err := r.client(w)
	if err != nil {
		return nil, &exitError{code: 2, err: err}
	}
	return c, nil
}

type runsCmd struct {
	runsFlags
	state  string
	tenant string
	limit  int
	cursor string
	json   bool
}

func newRuns() *cobra.Command {
	r := &runsCmd{}
	cmd := &cobra.Command{
		Use:   "runs [--state STATE] [--limit N] [--cursor C]",
		Short: "List submitted runs, or show, fetch, cancel or follow one",
		Long: `List the server's submitted runs, newest first (GET /runs), one line each:
run id, state, target, kind, progress (completed/failed/running of total)
and creation time. --state keeps one state; a page has at most --limit
runs, and when there are more, stderr says the --cursor of the next page.
--json prints the page as the server sent it instead.

The subcommands work on one run by its id (svc submit prints it): show
prints its status as JSON (state, progress, reason), result its result as
JSON (exit 1 when it failed), cancel cancels it (idempotent), follow prints
its events as JSON lines until it ends, resume answers a waiting run's
approval or question.

The runs live in the server's run store, so these commands need a server:
--url (default $SVC_URL, else ` + defaultURL + `).

Exit status: 0 on success, 1 when the server refused the call (an unknown
run, say), 2 for bad usage.`,
		Example: `  svc runs --state completed --limit 5
  svc runs show "$(svc submit echo --input '{"text":"hi"}')"`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return r.run(cmd) },
	}
	r.register(cmd)
	fs := cmd.Flags()
	fs.StringVar(&r.state, "state", "", "only runs in this state: pending, running, waiting, completed, failed or cancelled (default: all)")
	fs.StringVar(&r.tenant, "tenant", "", "only runs of this tenant (svc serve --api-keys): an admin key's filter; any other key lists its own tenant's runs (default: every run the key may see)")
	fs.IntVar(&r.limit, "limit", svc.DefaultRunPage, fmt.Sprintf("runs per page, 1 to %d", svc.MaxRunPage))
	fs.StringVar(&r.cursor, "cursor", "", "read the page after the one that printed this cursor (default: the first page)")
	fs.BoolVar(&r.json, "json", false, "print the page as JSON ({runs, next_cursor}) (default false)")
	cmd.AddCommand(newRunsShow(&r.runsFlags), newRunsResult(&r.runsFlags), newRunsCancel(&r.runsFlags), newRunsFollow(&r.runsFlags),
		newRunsResume(&r.runsFlags))
	return cmd
}

func (r *runsCmd) run(cmd *cobra.Command) error {
	switch s := svc.RunState(r.state); s {
	case "", svc.RunPending, svc.RunRunning, svc.RunWaiting, svc.RunCompleted, svc.RunFailed, svc.RunCancelled:
	default:
		return &exitError{code: 2, err: fmt.Errorf("--state %q: want pending, running, waiting, completed, failed or cancelled", r.state)}
	}
	if r.limit < 1 || r.limit > svc.MaxRunPage {
		return &exitError{code: 2, err: fmt.Errorf("--limit %d: want 1 to %d", r.limit, svc.MaxRunPage)}
	}
	c, err := r.open(cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	page, err := c.ListRuns(cmd.Context(), svc.RunFilter{State: svc.RunState(r.state), Tenant: r.tenant, Limit: r.limit, Cursor: r.cursor})
	if err != nil {
		return &exitError{code: 1, err: err}
	}
	if r.json {
		if page.Runs == nil {
			page.Runs = []svc.RunSummary{}
		}
		return printJSON(cmd.OutOrStdout(), page, true)
	}
	tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN_ID\tSTATE\tTARGET\tKIND\tPROGRESS\tCREATED")
	for _, run := range page.Runs {
		prog := "-"
		if p := run.Progress; p != nil {
			prog = fmt.Sprintf("%d/%d/%d of %d", p.Completed, p.Failed, p.Running, p.Total)
		}
		state := string(run.State)
		if run.Reason != "" {
			state += " (" + run.Reason + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", run.RunID, state, run.Target, run.Kind, prog, run.CreatedAt.Local().Format(time.RFC3339))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if page.NextCursor != "" {
		fmt.Fprintf(cmd.ErrOrStderr(), "svc: more runs: svc runs --cursor %s\n", page.NextCursor)
	}
	return nil
}

func newRunsShow(f *runsFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "show ID",
		Short: "Print a run's status as JSON",
		Long: `Print a run's status (GET /runs/ID/status) as JSON: run_id, state,
progress {total, completed, failed, running} and, for a run that failed or
was cancelled, the reason.

Exit status: 0 when printed, 1 for an unknown run or a refused call, 2 for
bad usage.`,
		Example: `  svc runs show "$(svc submit echo --input '{"text":"hi"}')"`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.open(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			defer func() { _ = c.Close() }()
			st, err := c.RunStatus(cmd.Context(), args[0])
			if err != nil {
				return &exitError{code: 1, err: err}
			}
			return printJSON(cmd.OutOrStdout(), st, true)
		},
	}
}

func newRunsResult(f *runsFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "result ID",
		Short: "Print a finished run's result as JSON",
		Long: `Print the result of a finished run (GET /runs/ID/result): its AgentResult,
or GroupResult, as JSON.

Exit status: 0 for a successful result, 1 for a failed one (still
printed), for a run still pending or running or cancelled (it has no
result), an unknown run or a refused call, 2 for bad usage.`,
		Example: `  RUN=$(svc submit echo --input '{"text":"hi"}') && svc runs follow "$RUN" >/dev/null && svc runs result "$RUN"`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.open(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			defer func() { _ = c.Close() }()
			st, err := c.RunStatus(cmd.Context(), args[0])
			if err != nil {
				return &exitError{code: 1, err: err}
			}
			if !st.State.Terminal() {
				return &exitError{code: 1, err: fmt.Errorf("run %s is %s: no result yet (svc runs follow %s waits for it)", st.RunID, st.State, st.RunID)}
			}
			return printRunResult(cmd.Context(), cmd.OutOrStdout(), c, st)
		},
	}
}

func newRunsCancel(f *runsFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "cancel ID",
		Short: "Cancel a run",
		Long: `Cancel a run (POST /runs/ID/cancel): its invocations in flight are
stopped and it ends cancelled. Cancelling a run that already ended does
nothing. It prints what it did: "run ID cancelled", or "run ID already
ended (status completed)" (or failed, cancelled) when there was nothing
to cancel.

Exit status: 0 when the server took the cancel, 1 for an unknown run or a
refused call, 2 for bad usage.`,
		Example: `  svc runs cancel "$(svc submit panel --input '"plan"')"`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.open(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			defer func() { _ = c.Close() }()
			msg, err := cancelRun(cmd.Context(), c, args[0])
			if err != nil {
				return &exitError{code: 1, err: err}
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), msg)
			return err
		},
	}
}

type resumeCmd struct {
	f              *runsFlags
	request        string
	approve, deny  bool
	answer, reason string
}

func newRunsResume(f *runsFlags) *cobra.Command {
	rc := &resumeCmd{f: f}
	cmd := &cobra.Command{
		Use:   "resume ID (--approve | --deny | --answer JSON) [--request REQ] [--reason TEXT]",
		Short: "Approve, deny or answer what a waiting run waits for",
		Long: `Answer one request of a waiting run (POST /runs/ID/resume) and let it go
on. A run waits when its agent calls a tool its spec lists under approval:
(--approve makes the call, --deny tells the model it was refused, with
--reason), or calls ask_human (--answer gives the answer, any JSON value:
a string is '"blue"'). --request names the request; without it, the run's
only open request is answered (svc runs show ID lists them under
"waiting"), and a run still pending or running is waited for (up to 30 s)
until it waits. It prints the run's status after the resume as JSON.

Exit status: 0 when the run resumed, 1 when the server refused (the run is
not waiting, the request is unknown or was answered, the answer does not
fit), 2 for bad usage.`,
		Example: `  RUN=$(svc submit approver --input '"now?"') && svc runs resume "$RUN" --approve`,
		Args:    cobra.ExactArgs(1),
		RunE:    func(cmd *cobra.Command, args []string) error { return rc.run(cmd, args[0]) },
	}
	fs := cmd.Flags()
	fs.StringVar(&rc.request, "request", "", "the request to answer (default: the run's only open request)")
	fs.BoolVar(&rc.approve, "approve", false, "approve the tool call the run waits for")
	fs.BoolVar(&rc.deny, "deny", false, "deny the tool call the run waits for (the model is told, with --reason)")
	fs.StringVar(&rc.answer, "answer", "", "answer the question the run waits for: a JSON value, e.g. '\"blue\"'")
	fs.StringVar(&rc.reason, "reason", "", "why, with --deny (or --approve): given to the model")
	return cmd
}

func (rc *resumeCmd) run(cmd *cobra.Command, id string) error {
	n := 0
	for _, set := range []bool{rc.approve, rc.deny, cmd.Flags().Changed("answer")} {
		if set {
			n++
		}
	}
	if n != 1 {
		return &exitError{code: 2, err: errors.New("give one of --approve, --deny or --answer JSON")}
	}
	d := svc.Decision{RequestID: rc.request, Reason: rc.reason}
	switch {
	case rc.approve:
		d.Approve = &rc.approve
	case rc.deny:
		no := false
		d.Approve = &no
	default:
		if !json.Valid([]byte(rc.answer)) {
			return &exitError{code: 2, err: fmt.Errorf("--answer %q: not a JSON value (a string is written '\"text\"')", rc.answer)}
		}
		d.Answer = json.RawMessage(rc.answer)
	}
	c, err := rc.f.open(cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	if d.RequestID == "" {
		st, err := c.RunStatus(cmd.Context(), id)
		for deadline := time.Now().Add(30 * time.Second); err == nil && (st.State == svc.RunPending || st.State == svc.RunRunning) && time.Now().Before(deadline); {
			// Just submitted: give it the time to reach its wait.
			time.Sleep(100 * time.Millisecond)
			st, err = c.RunStatus(cmd.Context(), id)
		}
		if err != nil {
			return &exitError{code: 1, err: err}
		}
		switch len(st.Waiting) {
		case 0:
			return &exitError{code: 1, err: fmt.Errorf("run %s is %s: it waits for nothing", id, st.State)}
		case 1:
			d.RequestID = st.Waiting[0].ID
		default:
			ids := make([]string, len(st.Waiting))
			for i, w := range st.Waiting {
				ids[i] = w.ID + " (" + string(w.Kind) + " of " + w.Tool + ")"
			}
			return &exitError{code: 2, err: fmt.Errorf("run %s waits for %d requests: name one with --request: %s", id, len(ids), strings.Join(ids, ", "))}
		}
	}
	st, err := c.ResumeRun(cmd.Context(), id, d)
	if err != nil {
		return &exitError{code: 1, err: err}
	}
	return printJSON(cmd.OutOrStdout(), st, true)
}

type followCmd struct {
	f        *runsFlags
	progress progressFlag
	after    int64
}

func newRunsFollow(f *runsFlags) *cobra.Command {
	fc := &followCmd{f: f}
	cmd := &cobra.Command{
		Use:   "follow ID",
		Short: "Print a run's events as JSON lines until it ends",
		Long: `Follow a run's events (GET /runs/ID/stream): those so far, then the new
ones as they happen, one JSON object per line on stdout ({seq, type,
run_id, agent, task_id, error, timestamp}), until the run ends. A progress
line on stderr (when it is a terminal, see --progress) counts its
invocations completed, failed and running.

Ctrl-C cancels the run (POST /runs/ID/cancel) and follows it to its end;
a second Ctrl-C exits at once.

Exit status: 0 when the run completed, 1 when it failed or was cancelled,
for an unknown run or a refused call, 2 for bad usage, 130 after a second
interrupt.`,
		Example: `  svc runs follow "$(svc submit pipeline --input '"draft"')"`,
		Args:    cobra.ExactArgs(1),
		RunE:    func(cmd *cobra.Command, args []string) error { return fc.run(cmd, args[0]) },
	}
	fc.progress.register(cmd.Flags())
	cmd.Flags().Int64Var(&fc.after, "after", 0, "print only the events with a sequence number above this one (default 0: all)")
	return cmd
}

func (fc *followCmd) run(cmd *cobra.Command, id string) error {
	if err := fc.progress.check(); err != nil {
		return &exitError{code: 2, err: err}
	}
	if fc.after < 0 {
		return &exitError{code: 2, err: fmt.Errorf("--after %d: must not be negative", fc.after)}
	}
	c, err := fc.f.open(cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	ctx := cmd.Context()
	errw := cmd.ErrOrStderr()
	// An unknown run is refused here, before anything is drawn.
	if _, err := c.RunStatus(ctx, id); err != nil {
		return &exitError{code: 1, err: err}
	}
	events, err := c.RunEvents(ctx, id, fc.after)
	if err != nil {
		return &exitError{code: 1, err: err}
	}
	line := newProgressLine(errw, fc.progress.enabled(errw), "run "+id)
	defer line.stop()
	stopWatch := onInterrupt(errw, "run "+id, func() {
		line.setNote("cancelling")
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := c.CancelRun(cctx, id); err != nil {
			fmt.Fprintf(errw, "\r\x1b[Ksvc: cancelling run %s: %v\n", id, err)
		}
	})
	defer stopWatch()
	out := cmd.OutOrStdout()
	// The progress comes from the status, read again after an event at
	// most every progressRefresh: events are what change it.
	var polled time.Time
	for ev := range events {
		if err := printJSON(out, ev, false); err != nil {
			return err
		}
		if fc.progress.enabled(errw) && time.Since(polled) >= progressRefresh {
			polled = time.Now()
			if st, err := c.RunStatus(ctx, id); err == nil && st.Progress != nil {
				line.set(*st.Progress)
			}
		}
	}
	line.stop()
	// The stream ends after the run's terminal event, or when it broke:
	// the status says which.
	st, err := c.RunStatus(ctx, id)
	if err != nil {
		return &exitError{code: 1, err: err}
	}
	switch st.State {
	case svc.RunCompleted:
		return nil
	case svc.RunFailed, svc.RunCancelled:
		why := string(st.State)
		if st.Reason != "" {
			why += " (" + st.Reason + ")"
		}
		return &exitError{code: 1, err: fmt.Errorf("run %s %s", id, why)}
	}
	return &exitError{code: 1, err: errors.New("the event stream ended before the run did (the server went away?)")}
}

// cancelRun cancels a run and says what that did. POST /runs/ID/cancel
// answers 204 for any known run, ended or not, so the state is read
// before (a run that already ended is left as it is) and after (a run
// that ended on its own while the cancel was on its way).
func cancelRun(ctx context.Context, b svc.RunBackend, id string) (string, error) {
	st, err := b.RunStatus(ctx, id)
	if err != nil {
		return "", err
	}
	if !st.State.Terminal() {
		if err := b.CancelRun(ctx, id); err != nil {
			return "", err
		}
		if st, err = b.RunStatus(ctx, id); err != nil {
			return "", err
		}
		if !st.State.Terminal() || st.State == svc.RunCancelled {
			return fmt.Sprintf("run %s cancelled", id), nil
		}
	}
	return fmt.Sprintf("run %s already ended (status %s)", id, st.State), nil
}
