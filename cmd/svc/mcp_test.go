package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/svcproc"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/tools/mcp/mcptest"
)

// mcpSpecs are the agents and group the MCP tests serve.
var mcpSpecs = map[string]string{
	"agents/greet.yaml": "version: 1\nname: greet\nmodel: test:echo\ninstructions: Repeat.\n" +
		"input_type: {type: object, properties: {text: {type: string}}, required: [text]}\n",
	"agents/broken.yaml": "version: 1\nname: broken\nmodel: test:fail\ninstructions: Fail.\n",
	"groups/chain.yaml": "version: 1\nname: chain\nnodes:\n  a: {agent: greet}\n  b: {agent: greet}\n" +
		"edges:\n  - {from: a, to: b}\n",
}

// checkMCPSession lists the tools of cs and calls them: a success, a
// failed run and a group.
func checkMCPSession(t *testing.T, cs *mcp.ClientSession) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	lt, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	schemas := map[string]string{}
	for _, tool := range lt.Tools {
		b, _ := json.Marshal(tool.InputSchema)
		schemas[tool.Name] = string(b)
	}
	greet := `{"properties":{"text":{"type":"string"}},"required":["text"],"type":"object"}`
	if len(schemas) != 3 || schemas["greet"] != greet || schemas["group_chain"] != greet ||
		schemas["broken"] != `{"properties":{"input":{}},"required":["input"],"type":"object"}` {
		t.Errorf("tools %v", schemas)
	}

	for _, tc := range []struct {
		tool    string
		args    any
		isError bool
		output  string
	}{
		{"greet", map[string]any{"text": "hi"}, false, `{"text":"hi"}`},
		{"group_chain", map[string]any{"text": "two hops"}, false, `{"text":"two hops"}`},
		{"broken", map[string]any{"input": 1}, true, `null`},
	} {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tc.tool, Arguments: tc.args})
		if err != nil {
			t.Fatalf("%s: %v", tc.tool, err)
		}
		b, _ := json.Marshal(res.StructuredContent)
		var r svc.AgentResult
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatalf("%s: structured content %s: %v", tc.tool, b, err)
		}
		if res.IsError != tc.isError || r.Success == tc.isError || string(r.Output) != tc.output {
			t.Errorf("%s: IsError %v, result %s; want IsError %v, output %s", tc.tool, res.IsError, b, tc.isError, tc.output)
		}
	}
}

// TestMCPStdio runs `svc mcp` as an MCP client would: a subprocess spoken
// to on stdin and stdout.
func TestMCPStdio(t *testing.T) {
	t.Parallel()
	specs := writeSpecs(t, mcpSpecs)
	cmd := exec.Command(svcBin, "mcp", "--specs", specs)
	cmd.Env = svcproc.Env()
	var stderr syncBuffer
	cmd.Stderr = &stderr
	ctx := context.Background()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "svc-test"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect: %v; stderr:\n%s", err, stderr.String())
	}
	checkMCPSession(t, cs)
	// Closing stdin ends the process, cleanly.
	if err := cs.Close(); err != nil {
		t.Errorf("close: %v; stderr:\n%s", err, stderr.String())
	}
	if cmd.ProcessState == nil || !cmd.ProcessState.Success() {
		t.Errorf("svc mcp ended with %v; stderr:\n%s", cmd.ProcessState, stderr.String())
	}
}

// bearer adds a bearer token to every request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// TestMCPServeHTTP connects to /mcp of `svc serve --mcp` with the token,
// and is refused without it.
func TestMCPServeHTTP(t *testing.T) {
	t.Parallel()
	specs := writeSpecs(t, mcpSpecs)
	s := startServe(t, nil, "--specs", specs, "--mcp", "--auth-token", "s3cret")
	ctx := context.Background()
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()

	_, err := mcp.NewClient(&mcp.Implementation{Name: "svc-test"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: s.url + "/mcp", HTTPClient: &http.Client{Transport: tr}, MaxRetries: -1}, nil)
	if err == nil || !strings.Contains(err.Error(), "Unauthorized") {
		t.Errorf("connect without the token: %v, want Unauthorized", err)
	}

	hc := &http.Client{Transport: bearer{token: "s3cret", next: tr}}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "svc-test"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: s.url + "/mcp", HTTPClient: hc}, nil)
	if err != nil {
		t.Fatalf("connect: %v; stderr:\n%s", err, s.stderr.String())
	}
	defer cs.Close()
	checkMCPSession(t, cs)
}

// TestMCPStdioTypeScriptClient runs `svc mcp` under a client from npm:
// the TypeScript MCP SDK (@modelcontextprotocol/sdk), installed with the
// reference server the tool tests use (mcptest), driven by
// testdata/mcpclient/client.cjs.
func TestMCPStdioTypeScriptClient(t *testing.T) {
	t.Parallel()
	entry := mcptest.Everything(t) // skips (fails under CI) without node and the install
	sdk := filepath.Join(filepath.Dir(entry), "..", "..", "sdk")
	if _, err := os.Stat(filepath.Join(sdk, "dist", "cjs", "client", "stdio.js")); err != nil {
		t.Fatalf("the TypeScript SDK is not beside server-everything: %v", err)
	}
	specs := writeSpecs(t, mcpSpecs)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "testdata/mcpclient/client.cjs", svcBin, "mcp", "--specs", specs)
	cmd.Env = append(svcproc.Env(), "SVC_MCP_SDK="+sdk)
	var stdout, stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node client: %v; stderr:\n%s", err, stderr.String())
	}
	var seen struct {
		Schemas map[string]json.RawMessage `json:"schemas"`
		Greet   struct {
			StructuredContent svc.AgentResult `json:"structuredContent"`
			IsError           bool            `json:"isError"`
		} `json:"greet"`
		Broken struct {
			StructuredContent svc.AgentResult `json:"structuredContent"`
			IsError           bool            `json:"isError"`
			Content           []struct{ Text string }
		} `json:"broken"`
	}
	if err := json.Unmarshal([]byte(stdout.String()), &seen); err != nil {
		t.Fatalf("client output %q: %v", stdout.String(), err)
	}
	if len(seen.Schemas) != 3 || seen.Schemas["group_chain"] == nil {
		t.Errorf("tools %v", seen.Schemas)
	}
	if g := seen.Greet; g.IsError || !g.StructuredContent.Success || string(g.StructuredContent.Output) != `{"text":"from node"}` {
		t.Errorf("greet: %+v", g)
	}
	if b := seen.Broken; !b.IsError || b.StructuredContent.Success || len(b.Content) == 0 || !strings.HasPrefix(b.Content[0].Text, "run failed: ModelError") {
		t.Errorf("broken: %+v", b)
	}
}

// exposureSpecs hide one agent, rename another and a group.
var exposureSpecs = map[string]string{
	"agents/greet.yaml": "version: 1\nmodel: test:echo\n" +
		"input_type: {type: object, properties: {text: {type: string}}, required: [text]}\n" +
		"mcp: {name: say_hello, description: Say hello back.}\n",
	"agents/secret.yaml": "version: 1\nmodel: test:echo\nmcp: {expose: false}\n",
	"agents/plain.yaml":  "version: 1\nmodel: test:echo\n",
	"groups/chain.yaml":  "version: 1\nnodes: {a: {agent: greet}, b: {agent: secret}}\nedges: [{from: a, to: b}]\nmcp: {name: pipeline}\n",
	"groups/hidden.yaml": "version: 1\nnodes: {a: {agent: plain}}\nmcp: {expose: false}\n",
}

// checkExposure: the tools listed follow the mcp blocks, and the renamed
// tools run their agent and group.
func checkExposure(t *testing.T, cs *mcp.ClientSession) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	lt, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	desc := map[string]string{}
	for _, tool := range lt.Tools {
		desc[tool.Name] = tool.Description
	}
	if len(desc) != 3 || desc["say_hello"] != "Say hello back." || desc["plain"] == "" || desc["pipeline"] == "" {
		t.Errorf("tools %q, want say_hello (Say hello back.), plain and pipeline", desc)
	}
	for _, tc := range []struct {
		tool  string
		agent string
	}{{"say_hello", "greet"}, {"pipeline", "secret"}} {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tc.tool, Arguments: map[string]any{"text": "hi"}})
		if err != nil {
			t.Fatalf("%s: %v", tc.tool, err)
		}
		b, _ := json.Marshal(res.StructuredContent)
		var r svc.AgentResult
		if err := json.Unmarshal(b, &r); err != nil || res.IsError || r.AgentName != tc.agent || string(r.Output) != `{"text":"hi"}` {
			t.Errorf("%s: IsError %v, result %s; want agent %s's output", tc.tool, res.IsError, b, tc.agent)
		}
	}
	// The hidden agent is not callable under its name either.
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "secret", Arguments: map[string]any{"input": 1}})
	if err == nil && !res.IsError {
		t.Errorf("calling the hidden agent's tool succeeded")
	}
}

// TestMCPExposure runs the mcp blocks through `svc mcp` (stdio) and
// `svc serve --mcp` (HTTP).
func TestMCPExposure(t *testing.T) {
	t.Parallel()
	specs := writeSpecs(t, exposureSpecs)
	t.Run("stdio", func(t *testing.T) {
		t.Parallel()
		cmd := exec.Command(svcBin, "mcp", "--specs", specs)
		cmd.Env = svcproc.Env()
		var stderr syncBuffer
		cmd.Stderr = &stderr
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "svc-test"}, nil).Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
		if err != nil {
			t.Fatalf("connect: %v; stderr:\n%s", err, stderr.String())
		}
		checkExposure(t, cs)
		if err := cs.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	t.Run("http", func(t *testing.T) {
		t.Parallel()
		s := startServe(t, nil, "--specs", specs, "--mcp")
		tr := &http.Transport{DisableKeepAlives: true}
		defer tr.CloseIdleConnections()
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "svc-test"}, nil).Connect(context.Background(),
			&mcp.StreamableClientTransport{Endpoint: s.url + "/mcp", HTTPClient: &http.Client{Transport: tr}}, nil)
		if err != nil {
			t.Fatalf("connect: %v", err)
		}
		defer cs.Close()
		checkExposure(t, cs)
	})
}
