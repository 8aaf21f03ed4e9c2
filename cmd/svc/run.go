package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/app"
	"github.com/svc-dev/svc/http/client"
)

type runCmd struct {
	runtimeFlags
	input     string
	taskID    string
	requestID string
	url       string
	authToken string
	timeout   time.Duration
}

func newRun() *cobra.Command {
	r := &runCmd{}
	cmd := &cobra.Command{
		Use:   "run AGENT --input JSON (--specs DIR | --url URL)",
		Short: "Run one task on an agent and print the AgentResult",
		Long: `Run one task on an agent and print its AgentResult as JSON.

In process with --specs DIR (the agents of DIR/agents, no server needed), or
against a running server with --url. --input is a JSON value; @FILE reads it
from a file and - from standard input.

Exit status: 0 when the result is a success, 1 when the agent failed (the
result is still printed) or the call was refused, 2 for bad usage.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return r.run(cmd, args[0]) },
	}
	fs := cmd.Flags()
	r.register(fs, "")
	fs.StringVar(&r.input, "input", "", "task input as JSON (@FILE: from a file, -: from stdin); required, no default")
	fs.StringVar(&r.taskID, "task-id", "", "task id (default: a new UUIDv7)")
	fs.StringVar(&r.requestID, "request-id", "", "request id, the trace_id of every event (default: a new UUIDv7)")
	fs.StringVar(&r.url, "url", "", "run against the server at this URL instead of in process (default: none, in process with --specs)")
	fs.StringVar(&r.authToken, "auth-token", envOr("SVC_AUTH_TOKEN", ""), "bearer token for --url (default $SVC_AUTH_TOKEN)")
	fs.DurationVar(&r.timeout, "timeout", 30*time.Second, "HTTP client timeout for --url")
	_ = cmd.MarkFlagRequired("input")
	return cmd
}

func (r *runCmd) readInput(stdin io.Reader) (json.RawMessage, error) {
	data := []byte(r.input)
	var err error
	switch {
	case r.input == "-":
		data, err = io.ReadAll(stdin)
	case strings.HasPrefix(r.input, "@"):
		data, err = os.ReadFile(r.input[1:])
	}
	if err != nil {
		return nil, fmt.Errorf("--input: %w", err)
	}
	if !json.Valid(data) {
		return nil, fmt.Errorf("--input is not valid JSON: %.80q", data)
	}
	return json.RawMessage(data), nil
}

func (r *runCmd) run(cmd *cobra.Command, agentName string) error {
	usage := func(err error) error { return &exitError{code: 2, err: err} }
	input, err := r.readInput(cmd.InOrStdin())
	if err != nil {
		return usage(err)
	}
	if (r.url == "") == (r.specs == "") {
		return usage(fmt.Errorf("give --specs DIR (in process) or --url URL (a server), one of them"))
	}
	var b svc.Backend
	if r.url != "" {
		c, err := client.New(r.url, client.WithAuthToken(r.authToken), client.WithTimeout(r.timeout))
		if err != nil {
			return usage(err)
		}
		defer func() { _ = c.Close() }()
		b = c
	} else {
		// In process, the log (and the events in it) goes to stderr at warn
		// level and above unless --log-level asks otherwise: the result on
		// stdout is what a run is for.
		if !cmd.Flags().Changed("log-level") {
			r.logLevel = "warn"
		}
		log, err := r.logger()
		if err != nil {
			return usage(err)
		}
		defer func() { _ = log.Sync() }()
		// The process without its server and stores: runs in memory, no
		// event store, nothing listening.
		o := r.appOptions(cmd.Flags(), log)
		o.NoListen, o.Store, o.Events = true, "memory", "none"
		a, err := app.New(o)
		if err != nil {
			return appError(r.specs, err)
		}
		if err := a.Start(); err != nil {
			return appError(r.specs, err)
		}
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_ = a.Shutdown(ctx)
		}()
		b = a.Backend()
	}
	res, err := b.Run(context.Background(), agentName, svc.TaskSpec{ID: r.taskID, Input: input, RequestID: r.requestID})
	if err != nil {
		return &exitError{code: 1, err: err}
	}
	enc := json.NewEncoder(cmd.OutOrStdout())
	enc.SetIndent("", "  ")
	if err := enc.Encode(res); err != nil {
		return err
	}
	if !res.Success {
		return &exitError{code: 1}
	}
	return nil
}
