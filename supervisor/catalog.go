package supervisor

import (
	"context"

	"github.com/svc-dev/svc"
)

var (
	_ svc.ToolCatalog = (*Runtime)(nil)
	_ svc.RunLister   = (*Runtime)(nil)
)

// Tools describes the tools of the registered agents and team
// coordinators, one descriptor per tool name and source, listing the
// agents that have it. Tools of MCP servers appear once their server has
// started (listing them must not start a lazy server).
func (rt *Runtime) Tools(ctx context.Context) ([]svc.ToolDescriptor, error) {
	reg := rt.reg.Load()
	return reg.Tools(rt.mcp.Catalog(ctx, reg)), nil
}

// ToolServers reports the MCP tool servers of the registered agents.
func (rt *Runtime) ToolServers(context.Context) ([]svc.ToolServerStatus, error) {
	return rt.mcp.Status(), nil
}

// ListRuns lists submitted runs from the run store, newest first.
func (rt *Runtime) ListRuns(ctx context.Context, f svc.RunFilter) (svc.RunPage, error) {
	rl, ok := rt.store.(svc.RunLister)
	if !ok {
		return svc.RunPage{}, svc.Errorf(svc.KindRegistry, "the run store (%T) cannot list runs", rt.store)
	}
	page, err := rl.ListRuns(ctx, f)
	for i, r := range page.Runs {
		page.Runs[i].Progress = settledProgress(r.State, r.Progress)
	}
	return page, err
}
