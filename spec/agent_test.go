package spec

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/svc-dev/svc"
)

// validAgent is a spec the bad cases below start from (by hand): each case
// breaks exactly one thing, so each must give exactly one error.
const triageYAML = `version: 1
name: triage
model: openai:gpt-4o-mini              # provider:name
fallback_models: [anthropic:claude-haiku-4-5, test:echo]
instructions: Classify the ticket.
input_type: {type: object, properties: {text: {type: string}}, required: [text]}   # JSON Schema
output_type: {$ref: ../schemas/category.json}
tools: [http_get]                       # registered function tools
mcp_servers:
  - {name: fs, transport: stdio, command: npx, args: [-y, "@modelcontextprotocol/server-filesystem", /data], prefix: fs_}
  - name: search
    transport: http
    url: https://mcp.example.com/mcp
builtin_tools: [spawn_agents]
model_settings: {temperature: 0.2, max_tokens: 512, stop: ["\n\n"], extra: {nested: true, none: null}}
trust_level: medium                     # high | medium | low | sandbox
context_passer: null                    # null | full
`

const categoryJSON = `{
  "type": "object",
  "properties": {"category": {"enum": ["billing", "tech"]}},
  "required": ["category"]
}`

func TestLoadDesignExample(t *testing.T) {
	writeTree(t, map[string]string{
		"specs/agents/triage.yaml":    triageYAML,
		"specs/schemas/category.json": categoryJSON,
	})
	env := testEnv()
	set, err := Load("specs", env)
	if err != nil {
		t.Fatal(err)
	}
	if len(set.Agents) != 1 {
		t.Fatalf("%d agents, want 1", len(set.Agents))
	}
	got := set.Agents[0]
	want := svc.Agent{
		Name:           "triage",
		Model:          "openai:gpt-4o-mini",
		FallbackModels: []string{"anthropic:claude-haiku-4-5", "test:echo"},
		Instructions:   "Classify the ticket.",
		InputType:      json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`),
		OutputType:     json.RawMessage(`{"type":"object","properties":{"category":{"enum":["billing","tech"]}},"required":["category"]}`),
		Tools:          []svc.Tool{env.Tools["http_get"]},
		MCPServers: []svc.MCPServer{
			{Name: "fs", Transport: "stdio", Command: "npx", Args: []string{"-y", "@modelcontextprotocol/server-filesystem", "/data"}, Prefix: "fs_"},
			{Name: "search", Transport: "http", URL: "https://mcp.example.com/mcp"},
		},
		BuiltinTools: []string{"spawn_agents"},
		ModelSettings: map[string]any{
			"temperature": 0.2, "max_tokens": int64(512), "stop": []any{"\n\n"},
			"extra": map[string]any{"nested": true, "none": nil},
		},
		TrustLevel: svc.TrustMedium,
	}
	// Schemas compare as text: the key order of the YAML must survive.
	if string(got.InputType) != string(want.InputType) {
		t.Errorf("input_type = %s\nwant        %s", got.InputType, want.InputType)
	}
	if string(got.OutputType) != string(want.OutputType) {
		t.Errorf("output_type = %s\nwant         %s", got.OutputType, want.OutputType)
	}
	got.InputType, got.OutputType, want.InputType, want.OutputType = nil, nil, nil, nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("agent =\n%#v\nwant\n%#v", got, want)
	}
	if f := set.Files["triage"]; f != "specs/agents/triage.yaml" {
		t.Errorf("Files[triage] = %q", f)
	}
	if err := set.Agents[0].Validate(); err != nil {
		t.Errorf("loaded agent does not validate: %v", err)
	}
}

func TestMinimalAgentDefaults(t *testing.T) {
	writeTree(t, map[string]string{"specs/agents/echo.yml": "version: 1\nmodel: test:echo\n"})
	set, err := Load("specs", Env{})
	if err != nil {
		t.Fatal(err)
	}
	want := svc.Agent{Name: "echo", Model: "test:echo"}
	if !reflect.DeepEqual(set.Agents, []svc.Agent{want}) {
		t.Fatalf("agents = %#v, want %#v", set.Agents, want)
	}
	if set.Agents[0].Trust() != svc.DefaultTrustLevel {
		t.Errorf("trust = %s", set.Agents[0].Trust())
	}
}

func TestAgentValues(t *testing.T) {
	cases := []struct {
		name  string
		yaml  string
		check func(t *testing.T, a svc.Agent)
	}{
		{"context_passer full", "context_passer: full", func(t *testing.T, a svc.Agent) {
			if a.ContextPasser != svc.ContextFull {
				t.Errorf("ContextPasser = %q", a.ContextPasser)
			}
		}},
		{"boolean schema", "output_type: true", func(t *testing.T, a svc.Agent) {
			if string(a.OutputType) != "true" {
				t.Errorf("OutputType = %s", a.OutputType)
			}
		}},
		{"local $ref stays", "input_type: {$ref: '#/$defs/t', $defs: {t: {type: string}}}", func(t *testing.T, a svc.Agent) {
			if want := `{"$ref":"#/$defs/t","$defs":{"t":{"type":"string"}}}`; string(a.InputType) != want {
				t.Errorf("InputType = %s, want %s", a.InputType, want)
			}
		}},
		{"schema scalars", `input_type: {pattern: "^<a&b>$", minimum: -1.5, maximum: 0x10, default: ~, const: "yes"}`, func(t *testing.T, a svc.Agent) {
			if want := `{"pattern":"^<a&b>$","minimum":-1.5,"maximum":16,"default":null,"const":"yes"}`; string(a.InputType) != want {
				t.Errorf("InputType = %s, want %s", a.InputType, want)
			}
		}},
		{"aliases", "model_settings: {a: &x [1, 2], b: *x}", func(t *testing.T, a svc.Agent) {
			if want := (map[string]any{"a": []any{int64(1), int64(2)}, "b": []any{int64(1), int64(2)}}); !reflect.DeepEqual(a.ModelSettings, want) {
				t.Errorf("ModelSettings = %#v", a.ModelSettings)
			}
		}},
		{"approval list and timeout", "tools: [current_time]\ntrust_level: low\napproval: [current_time]\napproval_timeout_seconds: 90\napproval_timeout_action: fail", func(t *testing.T, a svc.Agent) {
			if !reflect.DeepEqual(a.Approval, []string{"current_time"}) || a.ApprovalTimeoutSeconds != 90 || a.ApprovalTimeoutAction != svc.TimeoutFail {
				t.Errorf("approval %q, timeout %v %q", a.Approval, a.ApprovalTimeoutSeconds, a.ApprovalTimeoutAction)
			}
			if !a.NeedsApproval("current_time") || a.NeedsApproval("read_file") {
				t.Errorf("NeedsApproval: want current_time only")
			}
		}},
		{"approval all", "tools: [current_time]\ntrust_level: low\napproval: all", func(t *testing.T, a svc.Agent) {
			if !a.NeedsApproval("current_time") || !a.NeedsApproval("anything") {
				t.Errorf("approval %q: want every tool", a.Approval)
			}
		}},
		{"mcp approval patterns", "mcp_servers: [{name: s, transport: http, url: 'http://127.0.0.1:1/mcp', prefix: m_, approval: ['m_send_*']}]", func(t *testing.T, a svc.Agent) {
			if !a.NeedsApproval("m_send_mail") || a.NeedsApproval("m_read_mail") {
				t.Errorf("approval patterns %q: want m_send_* only", a.MCPServers[0].Approval)
			}
		}},
		{"mcp timeout_seconds", "mcp_servers: [{name: s, transport: http, url: 'http://127.0.0.1:1/mcp', timeout_seconds: 2.5}]", func(t *testing.T, a svc.Agent) {
			if s := a.MCPServers[0]; s.TimeoutSeconds != 2.5 {
				t.Errorf("server = %#v", s)
			}
		}},
		{"mcp idempotent false", "mcp_servers: [{name: s, transport: http, url: 'http://127.0.0.1:1/mcp', idempotent: false}, {name: t, transport: http, url: 'http://127.0.0.1:1/mcp'}]", func(t *testing.T, a svc.Agent) {
			if s := a.MCPServers[0]; s.Idempotent == nil || *s.Idempotent {
				t.Errorf("server = %#v, want idempotent false", s)
			}
			if s := a.MCPServers[1]; s.Idempotent != nil {
				t.Errorf("server = %#v, want idempotent unset (the default, true)", s)
			}
		}},
		{"args and env as written", "mcp_servers: [{name: s, transport: stdio, command: srv, args: [--port, 8080, true], env: {DEBUG: 1, NAME: x}}]", func(t *testing.T, a svc.Agent) {
			s := a.MCPServers[0]
			if !slices.Equal(s.Args, []string{"--port", "8080", "true"}) || s.Env["DEBUG"] != "1" || s.Env["NAME"] != "x" {
				t.Errorf("server = %#v", s)
			}
		}},
		{"nulls mean unset", "instructions: ~\ntools: ~\nfallback_models: ~\nmodel_settings: ~\nname: ~", func(t *testing.T, a svc.Agent) {
			if a.Name != "x" || a.Tools != nil || a.FallbackModels != nil || a.ModelSettings != nil {
				t.Errorf("agent = %#v", a)
			}
		}},
		{"high trust allows write", "trust_level: high\ntools: [write_file, http_get, current_time]", func(t *testing.T, a svc.Agent) {
			if len(a.Tools) != 3 || a.Tools[0].Name() != "write_file" {
				t.Errorf("tools = %v", a.Tools)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			data := "version: 1\nmodel: test:echo\n" + c.yaml + "\n"
			got, errs := decodeAgent("agents/x.yaml", []byte(data), testEnv(), readSpecFile)
			if len(errs) > 0 {
				t.Fatalf("errors:%s", dumpErrors(errs))
			}
			c.check(t, got.agent)
		})
	}
}

// aliasBomb expands to 10^9 nodes if followed naively.
const aliasBomb = `version: 1
model: test:echo
model_settings:
  a: &a [x, x, x, x, x, x, x, x, x, x]
  b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]
  c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]
  d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]
  e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]
  f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]
  g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]
  h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g, *g]
  i: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h, *h]
`

func TestBadAgents(t *testing.T) {
	cases := []struct {
		name string
		file string // default x.yaml
		yaml string
		env  *Env
		line int
		key  string
		msg  string
	}{
		// the envelope
		{name: "missing version", yaml: "model: test:echo\n", line: 1, key: "version", msg: "missing: add `version: 1`"},
		{name: "version 2", yaml: "model: test:echo\nversion: 2\n", line: 2, key: "version", msg: "want 1, got the integer 2"},
		{name: "version as string", yaml: "version: '1'\nmodel: test:echo\n", line: 1, key: "version", msg: `want 1, got the string "1"`},
		{name: "unknown key near miss", yaml: "version: 1\nmodel: test:echo\nmodle: x\n", line: 3, key: "modle", msg: `unknown key; did you mean "model"?`},
		{name: "unknown key", yaml: "version: 1\nmodel: test:echo\n\nbananas: 3\n", line: 4, key: "bananas", msg: "unknown key (known keys: version, name, template, model,"},
		{name: "repeated key", yaml: "version: 1\nmodel: test:echo\nmodel: test:fail\n", line: 3, key: "model", msg: "repeated (first at line 2)"},
		{name: "merge key", yaml: "version: 1\nmodel: test:echo\n<<: {instructions: x}\n", line: 3, key: "<<", msg: "merge keys (<<) are not supported"},
		{name: "syntax error", yaml: "version: 1\nmodel: [test:echo\n", line: 2, key: "", msg: "invalid YAML: did not find expected ',' or ']'"},
		{name: "tab indentation", yaml: "version: 1\nmodel_settings:\n\ta: 1\n", line: 3, key: "", msg: "invalid YAML"},
		{name: "empty file", yaml: "", line: 1, msg: "empty file: want an agent spec"},
		{name: "only comments", yaml: "# nothing\n", line: 1, msg: "empty file"},
		{name: "a list", yaml: "- version: 1\n", line: 1, msg: "want an agent spec: a mapping starting with version: 1, got a list"},
		{name: "two documents", yaml: "version: 1\nmodel: test:echo\n---\nversion: 1\n", line: 3, msg: "more than one YAML document"},

		// name and model
		{name: "name mismatch", yaml: "version: 1\nname: other\nmodel: test:echo\n", line: 2, key: "name", msg: `"other" does not match the file name x.yaml`},
		{name: "name from a bad file name", file: "my agent.yaml", yaml: "version: 1\nmodel: test:echo\n", line: 1, key: "name", msg: `"my agent": use letters, digits, '_', '-' and '.', starting with a letter or digit (the name comes from the file name)`},
		{name: "name not a string", yaml: "version: 1\nname: [x]\nmodel: test:echo\n", line: 2, key: "name", msg: "want a string, got a list"},
		{name: "missing model", yaml: "version: 1\ninstructions: hi\n", line: 1, key: "model", msg: "missing: name the model as provider:name"},
		{name: "null model", yaml: "version: 1\nmodel: ~\n", line: 1, key: "model", msg: "missing"},
		{name: "model not a string", yaml: "version: 1\nmodel: 4\n", line: 2, key: "model", msg: "want a string, got the integer 4"},
		{name: "model without provider", yaml: "version: 1\nmodel: gpt-4o\n", line: 2, key: "model", msg: `model "gpt-4o": want provider:name, e.g. test:echo`},
		{name: "bad fallback", yaml: "version: 1\nmodel: test:echo\nfallback_models:\n  - test:fail\n  - nocolon\n", line: 5, key: "fallback_models[1]", msg: `model "nocolon": want provider:name`},
		{name: "fallback not a string", yaml: "version: 1\nmodel: test:echo\nfallback_models: [test:fail, {a: 1}]\n", line: 3, key: "fallback_models[1]", msg: "want a string, got a mapping"},
		{name: "fallbacks not a list", yaml: "version: 1\nmodel: test:echo\nfallback_models: test:fail\n", line: 3, key: "fallback_models", msg: `want a list of strings, got the string "test:fail"`},
		{name: "CheckModel rejects model", yaml: "version: 1\nmodel: nope:x\n", env: &Env{CheckModel: checkModel}, line: 2, key: "model", msg: `model "nope:x": unknown provider "nope"`},
		{name: "CheckModel rejects fallback", yaml: "version: 1\nmodel: test:echo\nfallback_models: [test:fail, nope:y]\n", env: &Env{CheckModel: checkModel}, line: 3, key: "fallback_models[1]", msg: `model "nope:y": unknown provider "nope"`},
		{name: "instructions not a string", yaml: "version: 1\nmodel: test:echo\ninstructions: [a, b]\n", line: 3, key: "instructions", msg: "want a string, got a list"},

		// trust and context
		{name: "bad trust level", yaml: "version: 1\nmodel: test:echo\ntrust_level: total\n", line: 3, key: "trust_level", msg: `"total": want high, medium, low or sandbox`},
		{name: "bad context passer", yaml: "version: 1\nmodel: test:echo\ncontext_passer: partial\n", line: 3, key: "context_passer", msg: `"partial": want null or "full"`},
		{name: "context passer not a string", yaml: "version: 1\nmodel: test:echo\ncontext_passer: true\n", line: 3, key: "context_passer", msg: `want null or "full", got the boolean true`},

		// tools
		{name: "unknown tool", yaml: "version: 1\nmodel: test:echo\ntools: [current_time, nope]\n", line: 3, key: "tools[1]", msg: `unknown tool "nope" (known tools: current_time, http_get, read_file, write_file)`},
		{name: "unknown tool, none registered", yaml: "version: 1\nmodel: test:echo\ntools: [nope]\n", env: &Env{}, line: 3, key: "tools[0]", msg: `unknown tool "nope" (no tools are registered)`},
		{name: "tool above low trust", yaml: "version: 1\nmodel: test:echo\ntrust_level: low\ntools: [http_get]\n", line: 4, key: "tools[0]", msg: "tool http_get needs network access; trust_level low allows read-only tools (use medium or higher)"},
		{name: "tool above sandbox", yaml: "version: 1\nmodel: test:echo\ntrust_level: sandbox\ntools:\n  - current_time\n", line: 5, key: "tools[0]", msg: "tool current_time needs read access; trust_level sandbox allows no tools (use low or higher)"},
		{name: "write tool above default trust", yaml: "version: 1\nmodel: test:echo\ntools: [write_file]\n", line: 3, key: "tools[0]", msg: "tool write_file needs write access; trust_level medium (the default) allows read-only and network tools (use high)"},
		{name: "tool twice", yaml: "version: 1\nmodel: test:echo\ntools:\n  - http_get\n  - http_get\n", line: 5, key: "tools[1]", msg: `tool "http_get" listed twice (first as tools[0])`},
		{name: "tools not a list", yaml: "version: 1\nmodel: test:echo\ntools: http_get\n", line: 3, key: "tools", msg: `want a list of strings, got the string "http_get"`},
		{name: "unknown builtin", yaml: "version: 1\nmodel: test:echo\nbuiltin_tools: [fly]\n", line: 3, key: "builtin_tools[0]", msg: `unknown builtin tool "fly" (known builtin tools: spawn_agents)`},
		{name: "no builtins in this build", yaml: "version: 1\nmodel: test:echo\nbuiltin_tools: [spawn_agents]\n", env: &Env{}, line: 3, key: "builtin_tools[0]", msg: "this build has no builtin tools"},

		// model_settings
		{name: "model_settings not a mapping", yaml: "version: 1\nmodel: test:echo\nmodel_settings: 3\n", line: 3, key: "model_settings", msg: "want a mapping, got the integer 3"},
		{name: "model_settings infinity", yaml: "version: 1\nmodel: test:echo\nmodel_settings:\n  temperature: .inf\n", line: 4, key: "model_settings.temperature", msg: ".inf has no JSON form"},
		{name: "model_settings huge int", yaml: "version: 1\nmodel: test:echo\nmodel_settings: {n: !!int 99999999999999999999}\n", line: 3, key: "model_settings.n", msg: "does not fit in 64 bits"},
		{name: "model_settings repeated key", yaml: "version: 1\nmodel: test:echo\nmodel_settings: {a: 1, a: 2}\n", line: 3, key: "model_settings.a", msg: "repeated key"},
		{name: "model_settings too deep", yaml: "version: 1\nmodel: test:echo\nmodel_settings: {a: " + strings.Repeat("[", 70) + strings.Repeat("]", 70) + "}\n", line: 3, key: "model_settings", msg: "nested more than 64 levels deep"},
		{name: "alias bomb", yaml: aliasBomb, line: 4, key: "model_settings", msg: "aliases expand to too much data"},

		// schemas
		{name: "schema not a mapping", yaml: "version: 1\nmodel: test:echo\ninput_type: string\n", line: 3, key: "input_type", msg: `want a mapping (a JSON Schema), got the string "string"`},
		{name: "schema bad regexp", yaml: "version: 1\nmodel: test:echo\noutput_type:\n  type: string\n  pattern: '('\n", line: 4, key: "output_type", msg: "not a valid JSON Schema: pattern: error parsing regexp"},
		{name: "schema dangling ref", yaml: "version: 1\nmodel: test:echo\noutput_type: {$ref: '#/$defs/missing'}\n", line: 3, key: "output_type", msg: "not a valid JSON Schema"},
		{name: "schema wrong keyword type", yaml: "version: 1\nmodel: test:echo\ninput_type: {properties: 3}\n", line: 3, key: "input_type", msg: "not a valid JSON Schema"},
		{name: "schema NaN", yaml: "version: 1\nmodel: test:echo\ninput_type: {maximum: .nan}\n", line: 3, key: "input_type.maximum", msg: ".nan has no JSON form"},
		{name: "missing $ref file", yaml: "version: 1\nmodel: test:echo\ninput_type:\n  $ref: schemas/none.json\n", line: 4, key: "input_type.$ref", msg: "cannot read specs/agents/schemas/none.json: no such file or directory"},
		{name: "$ref with siblings", yaml: "version: 1\nmodel: test:echo\ninput_type: {description: d, $ref: s.json}\n", line: 3, key: "input_type.$ref", msg: "a $ref to a file must be the only key of input_type"},
		{name: "remote $ref", yaml: "version: 1\nmodel: test:echo\ninput_type: {$ref: 'https://example.com/s.json'}\n", line: 3, key: "input_type.$ref", msg: "remote schema"},
		{name: "$ref not a string", yaml: "version: 1\nmodel: test:echo\ninput_type: {$ref: 3}\n", line: 3, key: "input_type.$ref", msg: "want a string, got the integer 3"},

		// approval
		{name: "approval unknown tool", yaml: "version: 1\nmodel: test:echo\ntools: [current_time]\ntrust_level: low\napproval: [write_file]\n", line: 5, key: "approval[0]", msg: "not one of the agent's tools"},
		{name: "approval not a list", yaml: "version: 1\nmodel: test:echo\napproval: some\n", line: 3, key: "approval", msg: `want a list of tool names or "all"`},
		{name: "approval timeout action", yaml: "version: 1\nmodel: test:echo\napproval_timeout_action: wait\n", line: 3, key: "approval_timeout_action", msg: "want deny or fail"},
		{name: "approval timeout negative", yaml: "version: 1\nmodel: test:echo\napproval_timeout_seconds: -1\n", line: 3, key: "approval_timeout_seconds", msg: "must be 0"},
		{name: "mcp approval bad pattern", yaml: "version: 1\nmodel: test:echo\nmcp_servers:\n  - name: s\n    transport: http\n    url: http://x/mcp\n    approval: ['[x']\n", line: 7, key: "mcp_servers[0].approval[0]", msg: "not a name pattern"},

		// mcp_servers
		{name: "mcp not a list", yaml: "version: 1\nmodel: test:echo\nmcp_servers: {name: fs}\n", line: 3, key: "mcp_servers", msg: "want a list of servers, got a mapping"},
		{name: "mcp timeout not positive", yaml: "version: 1\nmodel: test:echo\nmcp_servers:\n  - name: s\n    transport: http\n    url: http://x/mcp\n    timeout_seconds: 0\n", line: 7, key: "mcp_servers[0].timeout_seconds", msg: "want seconds above 0"},
		{name: "mcp idempotent not a bool", yaml: "version: 1\nmodel: test:echo\nmcp_servers:\n  - name: s\n    transport: http\n    url: http://x/mcp\n    idempotent: maybe\n", line: 7, key: "mcp_servers[0].idempotent", msg: "want true or false"},
		{name: "mcp timeout not a number", yaml: "version: 1\nmodel: test:echo\nmcp_servers:\n  - name: s\n    transport: http\n    url: http://x/mcp\n    timeout_seconds: soon\n", line: 7, key: "mcp_servers[0].timeout_seconds", msg: "want a number"},
		{name: "mcp entry not a mapping", yaml: "version: 1\nmodel: test:echo\nmcp_servers: [fs]\n", line: 3, key: "mcp_servers[0]", msg: "want a mapping with name and transport"},
		{name: "mcp unknown key", yaml: "version: 1\nmodel: test:echo\nmcp_servers:\n  - name: fs\n    transport: stdio\n    command: srv\n    cmd: x\n", line: 7, key: "mcp_servers[0].cmd", msg: "unknown key"},
		{name: "mcp missing name", yaml: "version: 1\nmodel: test:echo\nmcp_servers:\n  - transport: stdio\n    command: srv\n", line: 4, key: "mcp_servers[0].name", msg: "missing: every server needs a name"},
		{name: "mcp bad name", yaml: "version: 1\nmodel: test:echo\nmcp_servers: [{name: 'a b', transport: stdio, command: srv}]\n", line: 3, key: "mcp_servers[0].name", msg: `"a b": use letters`},
		{name: "mcp duplicate name", yaml: "version: 1\nmodel: test:echo\nmcp_servers:\n  - {name: fs, transport: stdio, command: a}\n  - {name: fs, transport: stdio, command: b}\n", line: 5, key: "mcp_servers[1].name", msg: "server fs is already mcp_servers[0]"},
		{name: "mcp missing transport", yaml: "version: 1\nmodel: test:echo\nmcp_servers: [{name: fs, command: a}]\n", line: 3, key: "mcp_servers[0].transport", msg: "missing: want stdio, http or sse"},
		{name: "mcp bad transport", yaml: "version: 1\nmodel: test:echo\nmcp_servers: [{name: fs, transport: ftp}]\n", line: 3, key: "mcp_servers[0].transport", msg: `"ftp": want stdio, http or sse`},
		{name: "stdio without command", yaml: "version: 1\nmodel: test:echo\nmcp_servers:\n  - name: fs\n    transport: stdio\n", line: 4, key: "mcp_servers[0].command", msg: "missing: the stdio transport runs a command"},
		{name: "stdio with url", yaml: "version: 1\nmodel: test:echo\nmcp_servers:\n  - name: fs\n    transport: stdio\n    command: a\n    url: http://x\n", line: 7, key: "mcp_servers[0].url", msg: "not used by the stdio transport"},
		{name: "http without url", yaml: "version: 1\nmodel: test:echo\nmcp_servers: [{name: s, transport: http}]\n", line: 3, key: "mcp_servers[0].url", msg: "missing: the http transport connects to a URL"},
		{name: "sse with a bad url", yaml: "version: 1\nmodel: test:echo\nmcp_servers:\n  - name: s\n    transport: sse\n    url: localhost:8080\n", line: 6, key: "mcp_servers[0].url", msg: `"localhost:8080": want an http:// or https:// URL`},
		{name: "http with command", yaml: "version: 1\nmodel: test:echo\nmcp_servers:\n  - name: s\n    transport: http\n    url: http://x\n    args: [a]\n", line: 7, key: "mcp_servers[0].args", msg: "not used by the http transport"},
		{name: "mcp env not a mapping", yaml: "version: 1\nmodel: test:echo\nmcp_servers:\n  - name: s\n    transport: stdio\n    command: a\n    env: [A=1]\n", line: 7, key: "mcp_servers[0].env", msg: "want a mapping of variable names to values"},
		{name: "mcp env bad name", yaml: "version: 1\nmodel: test:echo\nmcp_servers:\n  - name: s\n    transport: stdio\n    command: a\n    env: {'A=B': 1}\n", line: 7, key: "mcp_servers[0].env", msg: `"A=B" is not a valid environment variable name`},
		{name: "mcp args with null", yaml: "version: 1\nmodel: test:echo\nmcp_servers:\n  - name: s\n    transport: stdio\n    command: a\n    args: [a, ~]\n", line: 7, key: "mcp_servers[0].args[1]", msg: "want a string, got null"},
		{name: "mcp bad prefix", yaml: "version: 1\nmodel: test:echo\nmcp_servers: [{name: s, transport: stdio, command: a, prefix: '-x'}]\n", line: 3, key: "mcp_servers[0].prefix", msg: `"-x": use letters`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			file := c.file
			if file == "" {
				file = "x.yaml"
			}
			writeTree(t, map[string]string{"specs/agents/" + file: c.yaml})
			env := testEnv()
			if c.env != nil {
				env = *c.env
			}
			results, err := Validate("specs", env)
			if err != nil {
				t.Fatal(err)
			}
			if len(results) != 1 {
				t.Fatalf("%d results, want 1: %v", len(results), results)
			}
			errs := specErrors(t, results[0].Err)
			if len(errs) != 1 {
				t.Fatalf("%d errors, want exactly 1:%s", len(errs), dumpErrors(errs))
			}
			e := errs[0]
			path := "specs/agents/" + file
			if e.File != path || e.Line != c.line || e.Key != c.key || !strings.Contains(e.Msg, c.msg) {
				t.Fatalf("error = %#v\nwant file %s, line %d, key %q, message containing %q", e, path, c.line, c.key, c.msg)
			}
			// The message carries file, line and key for a person to read.
			prefix := fmt.Sprintf("%s:%d: ", path, c.line)
			if c.key != "" {
				prefix += c.key + ": "
			}
			if !strings.HasPrefix(e.Error(), prefix) {
				t.Errorf("Error() = %q, want it to start with %q", e.Error(), prefix)
			}
			if !errors.Is(results[0].Err, svc.ErrSpecValidation) {
				t.Error("not a SpecValidationError")
			}
			// Load refuses the directory, naming the same problem.
			if _, err := Load("specs", env); err == nil || !strings.Contains(err.Error(), e.Error()) {
				t.Errorf("Load error = %v, want it to contain %q", err, e.Error())
			}
		})
	}
}

func checkModel(id string) error {
	provider, _, _ := strings.Cut(id, ":")
	if provider != "test" {
		return fmt.Errorf("model %q: unknown provider %q (known: test)", id, provider) // as the registry says it
	}
	return nil
}

func TestManyErrorsInOneFileInDocumentOrder(t *testing.T) {
	data := "version: 2\nmodel: 3\ntrust_level: low\ntools: [http_get, nope]\nmodel_settings: 3\nbogus: 1\n"
	_, errs := decodeAgent("agents/x.yaml", []byte(data), testEnv(), readSpecFile)
	var got []string
	for _, e := range errs {
		got = append(got, fmt.Sprintf("%d %s", e.Line, e.Key))
	}
	want := []string{"1 version", "2 model", "4 tools[0]", "4 tools[1]", "5 model_settings", "6 bogus"}
	if !slices.Equal(got, want) {
		t.Fatalf("errors at %q, want %q:%s", got, want, dumpErrors(errs))
	}
}

func TestSchemaRefs(t *testing.T) {
	writeTree(t, map[string]string{
		"specs/agents/a.yaml":    "version: 1\nmodel: test:echo\ninput_type: {$ref: ../schemas/in.yaml}\noutput_type: {$ref: ../schemas/out.json}\n",
		"specs/schemas/in.yaml":  "type: object\nproperties:\n  z: {type: string}\n  a: {type: integer}\nrequired: [z]\n",
		"specs/schemas/out.json": "{\n  \"type\": \"array\",\n  \"items\": {\"type\": \"number\"}\n}\n",
	})
	set, err := Load("specs", Env{})
	if err != nil {
		t.Fatal(err)
	}
	a := set.Agents[0]
	// YAML is converted in document order, JSON compacted as written.
	if want := `{"type":"object","properties":{"z":{"type":"string"},"a":{"type":"integer"}},"required":["z"]}`; string(a.InputType) != want {
		t.Errorf("input_type = %s\nwant %s", a.InputType, want)
	}
	if want := `{"type":"array","items":{"type":"number"}}`; string(a.OutputType) != want {
		t.Errorf("output_type = %s\nwant %s", a.OutputType, want)
	}
}

func TestSchemaRefErrorsNameTheSchemaFile(t *testing.T) {
	cases := []struct {
		name, file, content string
		line                int
		msg                 string
	}{
		{"bad JSON", "s.json", "{\n  \"type\": \"object\",\n  oops\n}", 3, "invalid JSON: invalid character 'o'"},
		{"JSON array", "s.json", "[1, 2]", 1, "want a JSON Schema: an object"},
		{"bad YAML", "s.yaml", "type: object\nproperties: {a: [}\n", 2, "invalid YAML"},
		{"YAML list", "s.yaml", "- a\n", 1, "want a JSON Schema mapping, got a list"},
		{"YAML inf", "s.yaml", "type: number\nmaximum: .inf\n", 2, ".inf has no JSON form"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			writeTree(t, map[string]string{
				"specs/agents/a.yaml":     "version: 1\nmodel: test:echo\noutput_type: {$ref: ../schemas/" + c.file + "}\n",
				"specs/schemas/" + c.file: c.content,
			})
			res, err := Validate("specs", Env{})
			if err != nil {
				t.Fatal(err)
			}
			errs := specErrors(t, res[0].Err)
			if len(errs) != 1 {
				t.Fatalf("want 1 error:%s", dumpErrors(errs))
			}
			e := errs[0]
			if e.File != "specs/schemas/"+c.file || e.Line != c.line || !strings.Contains(e.Msg, c.msg) {
				t.Fatalf("error = %v, want specs/schemas/%s:%d and %q", e, c.file, c.line, c.msg)
			}
			if res[0].File != "specs/agents/a.yaml" {
				t.Errorf("reported under %s", res[0].File)
			}
		})
	}
}

func TestRefReadErrorKeepsCause(t *testing.T) {
	_, errs := decodeAgent("specs/agents/a.yaml", []byte("version: 1\nmodel: test:echo\ninput_type: {$ref: s.json}\n"), Env{},
		func(string) ([]byte, error) { return nil, fs.ErrPermission })
	if len(errs) != 1 || !strings.Contains(errs[0].Msg, "cannot read specs/agents/s.json: permission denied") {
		t.Fatalf("errors:%s", dumpErrors(errs))
	}
}

// TestValidateErrorMapping feeds the real errors of svc.Agent.Validate to
// validateError, so a change in their wording that breaks the mapping to
// keys and lines fails here.
// The errors of svc.Agent.Validate, the one source of an agent's rules,
// land on the line of the field they name, under the key as written.
func TestValidateErrorMapping(t *testing.T) {
	const doc = `version: 1
name: n
model: test:echo
fallback_models:
  - test:a
  - test:b
trust_level: medium
context_passer: full
tools: [a, b]
input_type: {}
mcp_servers:
  - name: fs
    transport: stdio
`
	tool := fakeTool{"t", svc.AccessRead}
	cases := []struct {
		name  string
		agent svc.Agent
		line  int
		key   string
		msg   string
	}{
		{"name", svc.Agent{Name: "bad name", Model: "test:echo"}, 2, "name", `"bad name": use letters`},
		{"model", svc.Agent{Name: "n", Model: "echo"}, 3, "model", `model "echo": want provider:name`},
		{"fallback", svc.Agent{Name: "n", Model: "test:echo", FallbackModels: []string{"test:a", "b"}}, 6, "fallback_models[1]", `model "b": want provider:name`},
		{"trust", svc.Agent{Name: "n", Model: "test:echo", TrustLevel: "max"}, 7, "trust_level", `"max": want high`},
		{"context", svc.Agent{Name: "n", Model: "test:echo", ContextPasser: "half"}, 8, "context_passer", `"half": want null`},
		{"tool twice", svc.Agent{Name: "n", Model: "test:echo", Tools: []svc.Tool{tool, tool}}, 9, "tools[1]", `tool "t" listed twice`},
		{"tool nil", svc.Agent{Name: "n", Model: "test:echo", Tools: []svc.Tool{tool, nil}}, 9, "tools[1]", "is nil"},
		{"schema", svc.Agent{Name: "n", Model: "test:echo", InputType: json.RawMessage("{")}, 10, "input_type", "not valid JSON"},
		{"mcp field written", svc.Agent{Name: "n", Model: "test:echo", MCPServers: []svc.MCPServer{{Name: "f s", Transport: "stdio", Command: "c"}}}, 12, "mcp_servers[0].name", `"f s": use letters`},
		{"mcp field missing", svc.Agent{Name: "n", Model: "test:echo", MCPServers: []svc.MCPServer{{Name: "fs", Transport: "stdio"}}}, 12, "mcp_servers[0].command", "missing: the stdio transport runs a command"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.agent.Validate()
			if err == nil {
				t.Fatal("svc.Agent.Validate accepted the agent")
			}
			root, perr := parseMapping("x.yaml", []byte(doc), "a mapping")
			if perr != nil {
				t.Fatal(perr)
			}
			d := &agentDecoder{decoder: newDecoder("x.yaml", len(doc)), root: root, lists: map[string][]item{}, at: map[string]item{}}
			d.fs = d.fields(root, "", agentKeys)
			for _, k := range []string{"name", "model", "trust_level", "context_passer", "input_type"} {
				d.mark(k, d.fs[k].val)
			}
			for i, it := range d.strList(d.fs["fallback_models"].val, "fallback_models") {
				d.at[fmt.Sprintf("fallback_models[%d]", i)] = it
			}
			// Both entries of Tools come from the list's first item: where
			// an item was written is what the decoder records.
			tools := d.strList(d.fs["tools"].val, "tools")
			d.at["tools[0]"], d.at["tools[1]"] = tools[0], tools[1]
			d.at["mcp_servers[0]"] = item{Node: resolve(d.fs["mcp_servers"].val).Content[0], Key: "mcp_servers[0]"}
			d.at["mcp_servers[0].name"] = item{Node: resolve(d.fs["mcp_servers"].val).Content[0].Content[1], Key: "mcp_servers[0].name"}
			d.report(err)
			if len(d.errs) != 1 {
				t.Fatalf("errors:%s", dumpErrors(d.errs))
			}
			e := d.errs[0]
			if e.Line != c.line || e.Key != c.key || !strings.Contains(e.Msg, c.msg) {
				t.Fatalf("%v: want line %d, key %q, message containing %q (from %q)", e, c.line, c.key, c.msg, err)
			}
		})
	}
}

func TestErrorsPerFileAreCapped(t *testing.T) {
	var b strings.Builder
	b.WriteString("version: 1\nmodel: test:echo\n")
	for i := range 120 {
		fmt.Fprintf(&b, "unknown_%03d: 1\n", i)
	}
	_, errs := decodeAgent("agents/x.yaml", []byte(b.String()), Env{}, readSpecFile)
	if len(errs) != maxErrors+1 {
		t.Fatalf("%d errors, want %d", len(errs), maxErrors+1)
	}
	if errs[0].Line != 3 || errs[maxErrors-1].Line != 3+maxErrors-1 {
		t.Errorf("not the first errors in document order: %v … %v", errs[0], errs[maxErrors-1])
	}
	if last := errs[maxErrors]; last.Msg != "70 more errors not shown" {
		t.Errorf("last error = %v", last)
	}
}
