package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/app"
	"github.com/svc-dev/svc/http/mcpserver"
)

type mcpCmd struct {
	runtimeFlags
}

func newMCP() *cobra.Command {
	m := &mcpCmd{}
	cmd := &cobra.Command{
		Use:   "mcp --specs DIR",
		Short: "Serve the agents and groups of DIR as MCP tools over stdio",
		Long: `Serve the agents and groups of a specs directory as Model Context Protocol
tools on standard input and output, for an MCP client that starts svc as a
subprocess (an editor, a desktop assistant, another agent framework).

One tool per agent, named as the agent, and one per group, named
group_NAME; an agent's or group's mcp block changes that: expose: false
leaves it out, name and description replace the defaults. A tool's input schema is the agent's input_type when it is an
object schema; any other input goes in the argument "input". A group
takes the schema of its entry agent. The result is the AgentResult (or
GroupResult) as structured content and as JSON text; a failed run or a
refused call (bad input, budget, depth, timeout) is a tool error with the
error kind and message. Every call is a normal run in this process's
runtime, with the runtime options of runtime.yaml and the flags; a
client's cancellation cancels the run.

The log goes to stderr (warn and above unless --log-level says
otherwise); stdout carries the protocol only. svc exits when the client
closes standard input, or on SIGINT or SIGTERM. svc serve --mcp serves
the same tools over streamable HTTP at /mcp.`,
		Example: `  svc mcp --specs examples/specs </dev/null     # an MCP client starts it and talks on stdin`,
		Args:    cobra.NoArgs,
		RunE:    func(cmd *cobra.Command, _ []string) error { return m.run(cmd) },
	}
	m.runtimeFlags.register(cmd.Flags(), "")
	_ = cmd.MarkFlagRequired("specs")
	return cmd
}

func (m *mcpCmd) run(cmd *cobra.Command) error {
	usage := func(err error) error { return &exitError{code: 2, err: err} }
	if m.specs == "" {
		return usage(errors.New("--specs DIR is required"))
	}
	if !cmd.Flags().Changed("log-level") {
		m.logLevel = "warn"
	}
	log, err := m.logger()
	if err != nil {
		return usage(err)
	}
	defer func() { _ = log.Sync() }()
	// The runtime without a server: runs in memory, no event store.
	o := m.appOptions(cmd.Flags(), log)
	o.NoListen, o.Store, o.Events = true, "memory", "none"
	a, err := app.New(o)
	if err != nil {
		return appError(m.specs, err)
	}
	if err := a.Start(); err != nil {
		return appError(m.specs, err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = a.Shutdown(ctx)
	}()
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv, err := mcpserver.New(ctx, a.Backend(), mcpserver.Options{Version: svc.Version, Logger: log.Named("mcp"), Definitions: a.Runtime()})
	if err != nil {
		return &exitError{code: 1, err: err}
	}
	// Run returns when the client closes stdin (nil) or ctx ends.
	if err := srv.Run(ctx, &mcp.StdioTransport{}); err != nil && ctx.Err() == nil {
		return &exitError{code: 1, err: fmt.Errorf("mcp: %w", err)}
	}
	return nil
}
