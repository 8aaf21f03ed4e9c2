// Package mcpserver serves a svc.Backend's agents and groups as Model
// Context Protocol tools, so that MCP clients (editors, desktop assistants,
// other agent frameworks) can call them: over stdio (`svc mcp`) or
// streamable HTTP (`svc serve --mcp`, at /mcp).
//
// One tool per agent, named as the agent, and one per group, named
// "group_" + the group's name, unless the definition's MCP block says
// otherwise (Options.Definitions): expose false leaves it out, a name and
// a description replace the defaults. The prefix keeps groups apart from agents
// (a name may be both), and uses "_" rather than "." because the model
// APIs MCP clients hand tools to (OpenAI, Anthropic) accept only
// [a-zA-Z0-9_-] in a function name. An agent or group whose tool name is
// not a valid MCP tool name, or a group whose tool name an agent already
// has, is left out (and logged).
//
// A tool's input schema is the agent's input_type when that is an object
// schema; any other input_type (or none) is wrapped as the property
// "input" of an object, since MCP requires object arguments. A group's
// schema is that of its entry agent when it has one entry node, any value
// otherwise.
//
// Every call is a normal run (Backend.Run, Backend.RunGroup) with the
// call's context: its events, budget, depth and timeout are those of any
// run, and a client's cancellation notification cancels it. The result is
// the AgentResult or GroupResult, as structured content and as JSON text;
// a failed run or a refused call is a tool result with IsError set (the
// error kind and message in the text), as MCP asks of tool errors, so the
// calling model sees it.
package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"

	"github.com/svc-dev/svc"
)

// GroupPrefix starts the tool name of every group.
const GroupPrefix = "group_"

// InputProperty is the argument that carries an agent's input when its
// input_type is not an object schema.
const InputProperty = "input"

// Options configure New and Handler. Zero fields take the defaults noted.
type Options struct {
	// Name and Version describe the server to clients; "svc" and "dev".
	Name, Version string
	// Logger receives what is left out and why; nop when nil.
	Logger *zap.Logger
	// Definitions, when set, gives the definitions of the backend's
	// agents and groups, whose MCP field (svc.MCPExposure) decides
	// whether each is listed, under which tool name and description.
	// *supervisor.Runtime is one. Nil: every one is listed under its
	// default name.
	Definitions Definitions
}

// Definitions looks up registered agent and group definitions.
type Definitions interface {
	Agent(name string) (svc.Agent, bool)
	Group(name string) (svc.Group, bool)
}

// toolName is the MCP tool name rule (SEP-986): 1 to 128 of these.
var toolName = regexp.MustCompile(`^[A-Za-z0-9_.\-]{1,128}$`)

// New builds an MCP server with one tool per agent and group b has now.
// Agents or groups registered later need a new server (Handler builds
// one per session).
func New(ctx context.Context, b svc.Backend, o Options) (*mcp.Server, error) {
	if b == nil {
		return nil, errors.New("mcpserver: nil backend")
	}
	if o.Name == "" {
		o.Name = "svc"
	}
	if o.Version == "" {
		o.Version = "dev"
	}
	log := o.Logger
	if log == nil {
		log = zap.NewNop()
	}
	agents, err := b.Agents(ctx)
	if err != nil {
		return nil, fmt.Errorf("mcpserver: list agents: %w", err)
	}
	groups, err := b.Groups(ctx)
	if err != nil {
		return nil, fmt.Errorf("mcpserver: list groups: %w", err)
	}
	s := mcp.NewServer(&mcp.Implementation{Name: o.Name, Version: o.Version},
		&mcp.ServerOptions{Instructions: "Each tool runs one svc agent (named as the agent) or group (group_NAME) on its input and returns the run's result."})
	taken := map[string]bool{}
	for _, name := range agents {
		var x svc.MCPExposure
		if o.Definitions != nil {
			if a, ok := o.Definitions.Agent(name); ok {
				x = a.MCP
			}
		}
		if !x.Exposed() {
			continue
		}
		tool := name
		if x.Name != "" {
			tool = x.Name
		}
		if !toolName.MatchString(tool) || taken[tool] {
			log.Warn("mcp: agent left out: its tool name is not a valid MCP tool name or another agent has it", zap.String("agent", name), zap.String("tool", tool))
			continue
		}
		sch, err := b.AgentSchema(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("mcpserver: schema of agent %q: %w", name, err)
		}
		in, wrapped, err := inputSchema(sch.Input)
		if err != nil {
			return nil, fmt.Errorf("mcpserver: agent %q: %w", name, err)
		}
		taken[tool] = true
		desc := fmt.Sprintf("Run the svc agent %q on one task and return its AgentResult (agent_name, task_id, success, output, error, metadata).", name)
		if x.Description != "" {
			desc = x.Description
		}
		s.AddTool(&mcp.Tool{Name: tool, InputSchema: in, Description: desc + wrapNote(wrapped)},
			agentHandler(b, name, wrapped))
	}
	for _, name := range groups {
		var x svc.MCPExposure
		if o.Definitions != nil {
			if g, ok := o.Definitions.Group(name); ok {
				x = g.MCP
			}
		}
		if !x.Exposed() {
			continue
		}
		tool := GroupPrefix + name
		if x.Name != "" {
			tool = x.Name
		}
		if !toolName.MatchString(tool) || taken[tool] {
			log.Warn("mcp: group left out: its tool name is not valid or an agent or group has it", zap.String("group", name), zap.String("tool", tool))
			continue
		}
		in, wrapped, err := groupSchema(ctx, b, name)
		if err != nil {
			return nil, err
		}
		taken[tool] = true
		desc := fmt.Sprintf("Run the svc group %q on one task: an AgentResult when one terminal node fired, a GroupResult (group, outputs by terminal node, success, metadata) when several did.", name)
		if x.Description != "" {
			desc = x.Description
		}
		s.AddTool(&mcp.Tool{Name: tool, InputSchema: in, Description: desc + wrapNote(wrapped)},
			groupHandler(b, name, wrapped))
	}
	return s, nil
}

// Handler serves b over MCP's streamable HTTP transport. Each new session
// gets a server built by New at that moment, so it lists the agents and
// groups registered then (a reload shows in the next session). Put it
// behind the same authentication as the rest of the API.
func Handler(b svc.Backend, o Options) http.Handler {
	log := o.Logger
	if log == nil {
		log = zap.NewNop()
	}
	return mcp.NewStreamableHTTPHandler(func(r *http.Request) *mcp.Server {
		s, err := New(r.Context(), b, o)
		if err != nil {
			// The SDK answers a nil server with 400.
			log.Error("mcp: build server", zap.Error(err))
			return nil
		}
		return s
	}, nil)
}

func wrapNote(wrapped bool) string {
	if !wrapped {
		return ""
	}
	return " The task input goes in the argument \"" + InputProperty + "\"."
}

// inputSchema is the tool input schema for an agent's input schema, and
// whether the input is wrapped in the "input" property.
func inputSchema(in json.RawMessage) (map[string]any, bool, error) {
	var m map[string]any
	if len(in) > 0 {
		var v any
		if err := json.Unmarshal(in, &v); err != nil {
			return nil, false, fmt.Errorf("input schema: %w", err)
		}
		switch v := v.(type) {
		case map[string]any:
			m = v
		case bool:
			// true accepts anything, false nothing: both fit as the
			// schema of the wrapped input.
			return wrap(map[string]any{}, v), true, nil
		}
	}
	if m == nil {
		m = map[string]any{}
	}
	if m["type"] == "object" {
		return m, false, nil
	}
	return wrap(m, m), true, nil
}

// wrap makes schema the "input" property of an object schema. Definitions
// move to the root, where the "#/$defs/..." references inside schema
// resolve.
func wrap(m map[string]any, schema any) map[string]any {
	root := map[string]any{"type": "object", "required": []any{InputProperty}}
	for _, k := range []string{"$schema", "$defs", "definitions"} {
		if v, ok := m[k]; ok {
			root[k] = v
			delete(m, k)
		}
	}
	root["properties"] = map[string]any{InputProperty: schema}
	return root
}

// groupSchema is the input schema of a group's tool: its entry agent's
// when it has one entry node.
func groupSchema(ctx context.Context, b svc.Backend, name string) (map[string]any, bool, error) {
	top, err := b.GroupTopology(ctx, name)
	if err != nil {
		return nil, false, fmt.Errorf("mcpserver: topology of group %q: %w", name, err)
	}
	var in json.RawMessage
	if len(top.Entry) == 1 {
		for _, n := range top.Nodes {
			if n.Name == top.Entry[0] && n.Agent != "" {
				sch, err := b.AgentSchema(ctx, n.Agent)
				if err == nil {
					in = sch.Input
				}
			}
		}
	}
	s, wrapped, err := inputSchema(in)
	if err != nil {
		return nil, false, fmt.Errorf("mcpserver: group %q: %w", name, err)
	}
	return s, wrapped, nil
}

// taskOf is the task of a call's arguments.
func taskOf(req *mcp.CallToolRequest, wrapped bool) (svc.TaskSpec, error) {
	args := json.RawMessage(`{}`)
	if req.Params != nil {
		if raw := req.Params.Arguments; len(raw) > 0 && string(raw) != "null" {
			args = raw
		}
	}
	if !wrapped {
		return svc.TaskSpec{Input: args}, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(args, &m); err != nil {
		return svc.TaskSpec{}, svc.Errorf(svc.KindSpecValidation, "arguments are not an object: %v", err)
	}
	in, ok := m[InputProperty]
	if !ok {
		return svc.TaskSpec{}, svc.Errorf(svc.KindSpecValidation, "missing argument %q", InputProperty)
	}
	return svc.TaskSpec{Input: in}, nil
}

func agentHandler(b svc.Backend, name string, wrapped bool) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		task, err := taskOf(req, wrapped)
		if err != nil {
			return errorResult(err), nil
		}
		res, err := b.Run(ctx, name, task)
		if err != nil {
			return errorResult(err), nil
		}
		return runResult(svc.RunResult{Agent: &res})
	}
}

func groupHandler(b svc.Backend, name string, wrapped bool) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		task, err := taskOf(req, wrapped)
		if err != nil {
			return errorResult(err), nil
		}
		res, err := b.RunGroup(ctx, name, task)
		if err != nil {
			return errorResult(err), nil
		}
		return runResult(res)
	}
}

// runResult is the tool result of a finished run: the result JSON as
// structured content and as text, and for a failed run IsError and a
// first text naming the failures.
func runResult(res svc.RunResult) (*mcp.CallToolResult, error) {
	data, err := json.Marshal(res)
	if err != nil {
		return nil, fmt.Errorf("mcpserver: encode result: %w", err)
	}
	out := &mcp.CallToolResult{StructuredContent: json.RawMessage(data)}
	if !res.Success() {
		out.IsError = true
		out.Content = append(out.Content, &mcp.TextContent{Text: "run failed: " + failures(res)})
	}
	out.Content = append(out.Content, &mcp.TextContent{Text: string(data)})
	return out, nil
}

// failures says why a run failed: "Kind: message" of each failed result.
func failures(res svc.RunResult) string {
	var rs map[string]svc.AgentResult
	switch {
	case res.Group != nil:
		rs = res.Group.Outputs
	case res.Agent != nil:
		rs = map[string]svc.AgentResult{"": *res.Agent}
	}
	var keys []string
	for k := range rs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		r := rs[k]
		if r.Success {
			continue
		}
		msg := "failed"
		if r.Error != nil {
			msg = r.Error.Type + ": " + r.Error.Message
		} else if r.Err != nil {
			msg = string(svc.KindOf(r.Err)) + ": " + r.Err.Error()
		}
		if k != "" {
			msg = k + ": " + msg
		}
		parts = append(parts, msg)
	}
	if len(parts) == 0 {
		return "no successful result"
	}
	return strings.Join(parts, "; ")
}

// ErrorPayload is the structured content of a refused call: the error's
// kind (its wire name, as in problem bodies) and message.
type ErrorPayload struct {
	Error svc.ErrorInfo `json:"error"`
}

// errorResult is the tool result of a call the backend refused (bad
// input, unknown agent, budget, depth, timeout, cancellation).
func errorResult(err error) *mcp.CallToolResult {
	kind := svc.KindOf(err)
	info := svc.ErrorInfo{Type: string(kind), Message: err.Error(), Reason: svc.ReasonOf(err)}
	return &mcp.CallToolResult{
		IsError:           true,
		StructuredContent: ErrorPayload{Error: info},
		Content:           []mcp.Content{&mcp.TextContent{Text: string(kind) + ": " + err.Error()}},
	}
}
