package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"

	"github.com/svc-dev/svc"
)

// tool is one tool of an MCP server, as an svc.Tool. Its calls go through
// the server's actor.
type tool struct {
	srv         *server
	name        string // the name the model calls: prefix + remote
	remote      string // the name on the server
	description string
	schema      json.RawMessage
	access      svc.Access
}

func (t *tool) Name() string                 { return t.name }
func (t *tool) Description() string          { return t.description }
func (t *tool) InputSchema() json.RawMessage { return t.schema }
func (t *tool) Access() svc.Access           { return t.access }

// Idempotent is the server's idempotent setting (svc.IdempotentTool).
func (t *tool) Idempotent() bool { return t.srv.cfg.Idempotent == nil || *t.srv.cfg.Idempotent }

// Call runs the tool on the server. A result the server marks isError is a
// ToolExecutionError carrying the server's text, which the model sees.
func (t *tool) Call(ctx context.Context, args json.RawMessage) (json.RawMessage, error) {
	args = bytes.TrimSpace(args)
	if len(args) > 0 && (args[0] != '{' || !json.Valid(args)) && string(args) != "null" {
		return nil, svc.Errorf(svc.KindToolExecution, "tool %s: arguments must be a JSON object", t.name)
	}
	return t.srv.call(ctx, t, args)
}

var objectSchema = json.RawMessage(`{"type":"object"}`)

// convert turns a server's tool list into svc.Tools named prefix + name,
// skipping names the runtime cannot carry and duplicates.
func (s *server) convert(list []*sdk.Tool) ([]svc.Tool, []string) {
	tools := make([]svc.Tool, 0, len(list))
	names := make([]string, 0, len(list))
	seen := map[string]bool{}
	for _, mt := range list {
		if mt == nil {
			continue
		}
		name := s.cfg.Prefix + mt.Name
		if !svc.ValidName(name) || seen[name] {
			s.log.Warn("skipping mcp tool with an unusable or duplicate name", zap.String("tool", name))
			continue
		}
		seen[name] = true
		schema := objectSchema
		if mt.InputSchema != nil {
			if b, err := json.Marshal(mt.InputSchema); err == nil && string(b) != "null" {
				schema = b
			}
		}
		desc := mt.Description
		if desc == "" {
			desc = mt.Title
		}
		tools = append(tools, &tool{srv: s, name: name, remote: mt.Name, description: desc,
			schema: schema, access: accessOf(mt.Annotations)})
		names = append(names, name)
	}
	return tools, names
}

// accessOf maps a tool's annotations to the access the trust gate checks;
// see the package documentation.
func accessOf(a *sdk.ToolAnnotations) svc.Access {
	if a != nil && a.ReadOnlyHint {
		return svc.AccessNetwork
	}
	return svc.AccessWrite
}

// result turns a CallToolResult into the JSON the model sees: the
// structured content if there is any, else the content blocks, a lone text
// block as a JSON string and several blocks as a list (text blocks as
// strings, others as their MCP JSON).
func (t *tool) result(res *sdk.CallToolResult) (json.RawMessage, error) {
	if res == nil {
		return json.RawMessage("null"), nil
	}
	if res.IsError {
		msg := strings.TrimSpace(texts(res.Content))
		if msg == "" {
			msg = "tool " + t.name + " failed"
		}
		return nil, svc.Errorf(svc.KindToolExecution, "%s", msg)
	}
	if res.StructuredContent != nil {
		b, err := json.Marshal(res.StructuredContent)
		if err != nil {
			return nil, svc.Wrap(svc.KindToolExecution, err, "tool "+t.name+": structured content")
		}
		return b, nil
	}
	var v any
	switch len(res.Content) {
	case 0:
		return json.RawMessage("null"), nil
	case 1:
		v = block(res.Content[0])
	default:
		list := make([]any, len(res.Content))
		for i, c := range res.Content {
			list[i] = block(c)
		}
		v = list
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, svc.Wrap(svc.KindToolExecution, err, "tool "+t.name+": content")
	}
	return b, nil
}

// block is one content block as the model sees it.
func block(c sdk.Content) any {
	if tc, ok := c.(*sdk.TextContent); ok {
		return tc.Text
	}
	return c // the SDK's content types marshal to their MCP JSON
}

// texts joins the text blocks of an error result.
func texts(content []sdk.Content) string {
	var parts []string
	for _, c := range content {
		if tc, ok := c.(*sdk.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}
