package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/svc-dev/svc/app"
	"github.com/svc-dev/svc/fleetwire"
	"github.com/svc-dev/svc/worker"
)

func newWorker() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Run tasks of a fleet: svc worker start",
		Long: `A worker takes the tasks of its agents from a broker, runs them, and sends
each result back to the server that dispatched it (svc serve --broker).
See "svc worker start --help" and docs/distributed.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newWorkerStart())
	return cmd
}

type workerCmd struct {
	runtimeFlags
	brokerFlags
	allFrom     string
	agents      []string
	concurrency int
	prefetch    int
	heartbeat   float64
	consumerID  string
	runtimeID   string
	grace       time.Duration
	nested      bool
	reload      bool
}

func newWorkerStart() *cobra.Command {
	w := &workerCmd{}
	cmd := &cobra.Command{
		Use:   "start --broker URL (--all-from DIR | --specs DIR [--agents a,b])",
		Short: "Start a worker that runs the tasks of its agents from a broker",
		Long: `Start a worker of the distributed mode.

The worker loads agents from a specs directory (--all-from DIR serves every
agent of DIR; --specs DIR --agents a,b serves the ones named), joins each
agent's task subject (svc.tasks.AGENT) on the broker as one of a group of
competing consumers, runs every task it receives in its own runtime (budget
per task, depth, timeout, retries, tools and MCP servers as in svc serve),
publishes the result to the server that sent it, and only then acknowledges
the task: a worker that dies mid-task loses it to another worker after
--ack-wait. With --dispatch-nested, the runs its tasks start (spawn_agents
children, team delegates) go back on the broker and may run on any worker.
It announces itself with worker_started, a worker_heartbeat
every --heartbeat-seconds and worker_stopped, seen by every serve node.

With --reload it watches the specs directory and swaps in changed agent
definitions without a restart, as svc serve --reload does: tasks in flight
finish on the definitions they started with, and a change that does not
validate is logged with its file and line while the previous definitions
stay. The agents it takes tasks for are those of its start: an agent added
later is logged and served after a restart, and a change that removes one
it serves is refused (logged).

SIGINT or SIGTERM drains it: it stops taking tasks, lets the ones in flight
finish within --shutdown-grace, and gives the rest back to the broker, so
another worker runs them. A second signal exits at once.`,
		Example: `  svc serve --specs examples/specs --broker embedded    # a fleet's server with its own broker
  svc worker start --broker nats://127.0.0.1:4222 --all-from examples/specs`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return w.run(cmd) },
	}
	fs := cmd.Flags()
	w.runtimeFlags.register(fs, "")
	w.brokerFlags.register(fs, "the fleet's broker: nats://HOST:PORT (the embedded broker of svc serve --broker embedded listens on nats://127.0.0.1:4222), redis://HOST:PORT[/DB], kafka://HOST:PORT[,HOST:PORT], amqp://USER:PASS@HOST:PORT/VHOST or memory:// (required; default $SVC_BROKER)")
	fs.StringVar(&w.allFrom, "all-from", "", "serve every agent of this specs directory (instead of --specs with --agents)")
	fs.StringSliceVar(&w.agents, "agents", nil, "agents of --specs to serve, comma-separated or repeated (default: all of them)")
	fs.IntVar(&w.concurrency, "concurrency", worker.DefaultConcurrency, "tasks run at once, across all agents")
	fs.IntVar(&w.prefetch, "prefetch", 0, "tasks held per agent, waiting for a free slot (default: --concurrency)")
	fs.Float64Var(&w.heartbeat, "heartbeat-seconds", worker.DefaultHeartbeat.Seconds(), "seconds between worker_heartbeat events (0: none)")
	fs.StringVar(&w.consumerID, "consumer-id", "", "this worker's name in each agent's consumer group; keep it stable across restarts to take back pending tasks on Redis (default: the runtime id)")
	fs.StringVar(&w.runtimeID, "runtime-id", "", "the worker's id in its events (default: a new UUIDv7)")
	fs.BoolVar(&w.nested, "dispatch-nested", false, "send the runs nested in this worker's tasks (spawn_agents children, team delegates) back on the broker to run on any worker, with depth, token cap, cancellation and trace carried along (default: run them in this worker)")
	fs.BoolVar(&w.reload, "reload", false, "watch the spec files and swap in changed agent definitions without a restart, like svc serve --reload (default false)")
	fs.DurationVar(&w.grace, "shutdown-grace", 30*time.Second, "how long tasks in flight may take to finish on shutdown before they are given back to the broker")
	return cmd
}

func (w *workerCmd) run(cmd *cobra.Command) error {
	fs := cmd.Flags()
	log, err := w.logger()
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	defer func() { _ = log.Sync() }()
	switch {
	case w.broker == "":
		return &exitError{code: 2, err: errors.New("--broker is required (nats://HOST:PORT, redis://HOST:PORT, kafka://HOST:PORT, amqp://HOST:PORT or memory://)")}
	case w.allFrom == "" && w.specs == "":
		return &exitError{code: 2, err: errors.New("give the agents to serve: --all-from DIR, or --specs DIR (with --agents to pick some)")}
	case w.allFrom != "" && w.specs != "":
		return &exitError{code: 2, err: errors.New("--all-from and --specs are two ways to say the same thing: give one")}
	case w.allFrom != "" && len(w.agents) > 0:
		return &exitError{code: 2, err: errors.New("--agents goes with --specs; --all-from serves every agent")}
	case w.concurrency < 1 || w.prefetch < 0 || w.heartbeat < 0 || w.grace < 0:
		return &exitError{code: 2, err: errors.New("--concurrency must be at least 1; --prefetch, --heartbeat-seconds and --shutdown-grace must not be negative")}
	}
	if err := w.brokerFlags.check(fs); err != nil {
		return &exitError{code: 2, err: err}
	}
	if w.allFrom != "" {
		w.specs = w.allFrom
	}
	o := w.appOptions(fs, log)
	o.Broker, o.AckWait, o.MaxDeliver = w.broker, w.ackWait, w.maxDeliver
	o.Reload = w.reload
	keys, err := w.keyring()
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	o.BrokerKeys = keys
	// A worker keeps no submitted runs and no event store: its runs are
	// the publisher's.
	o.Store, o.Events = "memory", "none"
	hb := time.Duration(w.heartbeat * float64(time.Second))
	if hb == 0 {
		hb = -1
	}
	o.Worker = &app.WorkerOptions{Agents: w.agents, Concurrency: w.concurrency, Prefetch: w.prefetch,
		Heartbeat: hb, RuntimeID: w.runtimeID, ConsumerID: w.consumerID, DispatchNested: w.nested}
	a, err := app.New(o)
	if err != nil {
		return appError(w.specs, err)
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := a.Start(); err != nil {
		return appError(w.specs, err)
	}
	banner(cmd.ErrOrStderr(), a)
	<-ctx.Done()
	stop() // a second signal kills the process
	graceCtx, cancel := context.WithTimeout(context.Background(), w.grace)
	defer cancel()
	if err := a.Shutdown(graceCtx); err != nil {
		return &exitError{code: 1, err: fmt.Errorf("shutdown within --shutdown-grace %s: %w", w.grace, err)}
	}
	return nil
}

// banner tells the operator, on stderr, what this worker is.
func banner(out io.Writer, a *app.App) {
	wk := a.Worker()
	cfg := wk.Config()
	subjects := wk.Subjects()
	names := make([]string, 0, len(subjects))
	width := 0
	for n := range subjects {
		names = append(names, n)
		width = max(width, len(n))
	}
	slices.Sort(names)
	var b strings.Builder
	fmt.Fprintf(&b, "svc worker\n")
	fmt.Fprintf(&b, "  broker       %s\n", redactURL(a.BrokerURL()))
	fmt.Fprintf(&b, "  runtime id   %s\n", wk.RuntimeID())
	fmt.Fprintf(&b, "  consumer id  %s\n", cfg.ConsumerID)
	fmt.Fprintf(&b, "  concurrency  %d (prefetch %d per agent)\n", cfg.Concurrency, cfg.Prefetch)
	fmt.Fprintf(&b, "  results      to the reply subject of each task (%s)\n", fleetwire.ResultSubject("{publisher}"))
	if len(cfg.Keys) > 0 {
		ids := slices.Sorted(maps.Keys(cfg.Keys))
		fmt.Fprintf(&b, "  signing      results with key %s; tasks must be signed with one of %s\n", cfg.SignKeyID, strings.Join(ids, ", "))
	} else {
		fmt.Fprintf(&b, "  signing      off: any task on the broker runs (--broker-keys)\n")
	}
	fmt.Fprintf(&b, "  agents       %d\n", len(names))
	for _, n := range names {
		fmt.Fprintf(&b, "    %-*s  ← %s\n", width, n, subjects[n])
	}
	_, _ = io.WriteString(out, b.String())
	if f, ok := out.(*os.File); ok {
		_ = f.Sync()
	}
}

// redactURL hides a password in a broker URL.
func redactURL(raw string) string {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return raw
	}
	creds, host, ok := strings.Cut(rest, "@")
	if !ok {
		return raw
	}
	if user, _, hasPass := strings.Cut(creds, ":"); hasPass {
		return scheme + "://" + user + ":xxxxx@" + host
	}
	return scheme + "://xxxxx@" + host
}
