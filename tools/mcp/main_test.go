package mcp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"
)

// The test binary doubles as a stdio MCP server written with the Go SDK:
// started with SVC_MCP_HELPER=1 it serves testServer on stdin/stdout.
// SVC_MCP_HELPER_GATE names a file whose presence makes it fail at start,
// and SVC_MCP_HELPER_STUBBORN=1 makes it ignore SIGTERM and the end of its
// stdin, as a hung server would.
func TestMain(m *testing.M) {
	if os.Getenv("SVC_MCP_HELPER") == "1" {
		os.Exit(helper())
	}
	goleak.VerifyTestMain(m)
}

func helper() int {
	if gate := os.Getenv("SVC_MCP_HELPER_GATE"); gate != "" {
		if _, err := os.Stat(gate); err == nil {
			fmt.Fprintln(os.Stderr, "gate closed: refusing to start")
			return 2
		}
	}
	stubborn := os.Getenv("SVC_MCP_HELPER_STUBBORN") == "1"
	if stubborn {
		signal.Ignore(syscall.SIGTERM)
	}
	srv := testServer()
	var child *exec.Cmd
	sdk.AddTool(srv, &sdk.Tool{Name: "spawn", Description: "starts a grandchild process and returns its pid"},
		func(context.Context, *sdk.CallToolRequest, struct{}) (*sdk.CallToolResult, any, error) {
			child = exec.Command("sleep", "600")
			if err := child.Start(); err != nil {
				return nil, nil, err
			}
			return text(strconv.Itoa(child.Process.Pid)), nil, nil
		})
	srv.AddTool(&sdk.Tool{Name: "crash", Description: "exits the server", InputSchema: map[string]any{"type": "object"}},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			os.Exit(3)
			return nil, nil
		})
	srv.AddTool(&sdk.Tool{Name: "pid", Description: "the server's pid", InputSchema: map[string]any{"type": "object"}},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return text(strconv.Itoa(os.Getpid())), nil
		})
	err := srv.Run(context.Background(), &sdk.StdioTransport{})
	if stubborn {
		time.Sleep(time.Hour)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	return 0
}

func text(s string) *sdk.CallToolResult {
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: s}}}
}

var objectSchema = map[string]any{"type": "object"}

// testServer is the Go SDK server of the in-process and helper tests.
func testServer() *sdk.Server {
	srv := sdk.NewServer(&sdk.Implementation{Name: "svc-test", Version: "1"}, nil)
	type echoIn struct {
		Text string `json:"text"`
	}
	sdk.AddTool(srv, &sdk.Tool{Name: "echo", Description: "echoes text",
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, _ *sdk.CallToolRequest, in echoIn) (*sdk.CallToolResult, any, error) {
			return text("echo: " + in.Text), nil, nil
		})
	srv.AddTool(&sdk.Tool{Name: "fail", Description: "always reports an error", InputSchema: objectSchema},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: "it broke"}}}, nil
		})
	srv.AddTool(&sdk.Tool{Name: "multi", Description: "answers with two text blocks", InputSchema: objectSchema},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "a"}, &sdk.TextContent{Text: "b"}}}, nil
		})
	srv.AddTool(&sdk.Tool{Name: "structured", Description: "answers with structured content", InputSchema: objectSchema},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: `{"n":1}`}},
				StructuredContent: json.RawMessage(`{"n":1}`)}, nil
		})
	type sleepIn struct {
		MS int `json:"ms"`
	}
	sdk.AddTool(srv, &sdk.Tool{Name: "sleep", Description: "sleeps, honouring cancellation"},
		func(ctx context.Context, _ *sdk.CallToolRequest, in sleepIn) (*sdk.CallToolResult, any, error) {
			select {
			case <-time.After(time.Duration(in.MS) * time.Millisecond):
				return text("slept"), nil, nil
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			}
		})
	return srv
}
