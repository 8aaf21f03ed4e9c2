package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/svc-dev/svc"
)

func TestVersion(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"version"}, {"--version"}} {
		r := svcExec(t, nil, "", args...)
		if r.code != 0 {
			t.Fatalf("%v: exit %d; stderr: %s", args, r.code, r.stderr)
		}
		if !strings.HasPrefix(r.stdout, "svc 0.0.0 ") || !strings.HasPrefix(r.stdout, "svc "+svc.Version+" ") {
			t.Errorf("%v: stdout %q, want it to start with %q", args, r.stdout, "svc "+svc.Version)
		}
		if !regexp.MustCompile(`^svc \S+ \(commit ([0-9a-f]{40}(-dirty)?|unknown), go\S+ \w+/\w+\)\n$`).MatchString(r.stdout) {
			t.Errorf("%v: stdout %q is not one line of version, commit, Go version and platform", args, r.stdout)
		}
	}
}

// exampleFiles lists the spec files of examples/specs that validate checks,
// in its order: runtime.yaml, the agents, the groups.
func exampleFiles(t *testing.T) []string {
	t.Helper()
	files := []string{filepath.Join(exampleSpecs, "runtime.yaml")}
	for _, sub := range []string{"agents", "groups"} {
		found, err := filepath.Glob(filepath.Join(exampleSpecs, sub, "*.yaml"))
		if err != nil || len(found) == 0 {
			t.Fatalf("examples/specs/%s has %v (%v), want example specs", sub, found, err)
		}
		files = append(files, found...) // Glob sorts
	}
	return files
}

// exampleNames are the names of the example specs of kind sub (agents or
// groups), sorted: their file stems.
func exampleNames(t *testing.T, sub string) []string {
	t.Helper()
	var names []string
	for _, f := range exampleFiles(t) {
		if filepath.Base(filepath.Dir(f)) == sub {
			names = append(names, strings.TrimSuffix(filepath.Base(f), ".yaml"))
		}
	}
	return names
}

func TestValidateExamples(t *testing.T) {
	t.Parallel()
	r := svcExec(t, nil, "", "validate", exampleSpecs)
	if r.code != 0 {
		t.Fatalf("exit %d; stdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	var want []string
	for _, f := range exampleFiles(t) {
		want = append(want, "[ok] "+f)
	}
	got := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if !slices.Equal(got, want) {
		t.Errorf("stdout lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestValidateErrors(t *testing.T) {
	t.Parallel()
	dir := writeSpecs(t, map[string]string{
		"runtime.yaml":   "version: 1\ntimeout_seconds: 5\n",
		"agents/ok.yaml": "version: 1\nname: ok\nmodel: test:echo\n",
		// Line 4 has a key the loader does not know.
		"agents/bad.yaml": "version: 1\nname: bad\nmodel: test:echo\nbogus_key: 1\n",
		// The model is not provider:name.
		"agents/nomodel.yaml": "version: 1\nname: nomodel\n\nmodel: echo\n",
	})
	r := svcExec(t, nil, "", "validate", dir)
	if r.code != 1 {
		t.Fatalf("exit %d, want 1; stdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	wantPrefix := map[string]bool{
		"[ok] " + filepath.Join(dir, "runtime.yaml"):                       true,
		"[ok] " + filepath.Join(dir, "agents", "ok.yaml"):                  true,
		"[error] " + filepath.Join(dir, "agents", "bad.yaml") + ":4: ":     true,
		"[error] " + filepath.Join(dir, "agents", "nomodel.yaml") + ":4: ": true,
	}
	if len(lines) != len(wantPrefix) {
		t.Fatalf("%d lines, want one per file (%d):\n%s", len(lines), len(wantPrefix), r.stdout)
	}
	for _, l := range lines {
		found := false
		for p := range wantPrefix {
			if l == p || (strings.HasPrefix(p, "[error]") && strings.HasPrefix(l, p)) {
				found = true
				delete(wantPrefix, p)
				break
			}
		}
		if !found {
			t.Errorf("unexpected line %q", l)
		}
	}
	for p := range wantPrefix {
		t.Errorf("no line starting %q in:\n%s", p, r.stdout)
	}
	if !strings.Contains(r.stdout, "bogus_key") {
		t.Errorf("the error does not name the unknown key:\n%s", r.stdout)
	}
	if !strings.Contains(r.stderr, "2 of 4 files") {
		t.Errorf("stderr %q does not summarise the errors", r.stderr)
	}
}

func TestValidateBadRoot(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "file.yaml")
	if err := os.WriteFile(file, []byte("version: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, args := range map[string][]string{
		"missing":       {"validate", filepath.Join(t.TempDir(), "nope")},
		"not a dir":     {"validate", file},
		"no argument":   {"validate"},
		"two arguments": {"validate", exampleSpecs, exampleSpecs},
	} {
		t.Run(name, func(t *testing.T) {
			r := svcExec(t, nil, "", args...)
			if r.code != 2 {
				t.Errorf("exit %d, want 2; stderr: %s", r.code, r.stderr)
			}
			if r.stdout != "" {
				t.Errorf("stdout %q, want nothing", r.stdout)
			}
			if !strings.HasPrefix(r.stderr, "svc: ") {
				t.Errorf("stderr %q does not say what is wrong", r.stderr)
			}
		})
	}
}

// decodeResult parses the AgentResult svc run prints, rejecting unknown
// fields so that the printed shape stays the wire shape.
func decodeResult(t *testing.T, stdout string) svc.AgentResult {
	t.Helper()
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(stdout), &raw); err != nil {
		t.Fatalf("stdout is not a JSON object: %v\n%s", err, stdout)
	}
	for _, k := range []string{"agent_name", "task_id", "success", "output", "error", "metadata"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("result lacks %q: %s", k, stdout)
		}
	}
	var res svc.AgentResult
	dec := json.NewDecoder(strings.NewReader(stdout))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&res); err != nil {
		t.Fatalf("decode result: %v\n%s", err, stdout)
	}
	return res
}

func TestRunInProcess(t *testing.T) {
	t.Parallel()
	inputFile := filepath.Join(t.TempDir(), "in.json")
	if err := os.WriteFile(inputFile, []byte(`{"from":"file"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		args       []string
		stdin      string
		wantOutput string
		wantModel  string
	}{
		{"echo", []string{"run", "echo", "--input", `{"a":1}`}, "", `{"a":1}`, "test:echo"},
		{"fallback", []string{"run", "resilient", "--input", `"hello"`}, "", `"hello"`, "test:echo"},
		{"typed", []string{"run", "triage", "--input", `{"text":"refund please"}`}, "", `{"category":"billing","confidence":0.9}`, "test:echo"},
		{"input from file", []string{"run", "echo", "--input", "@" + inputFile}, "", `{"from":"file"}`, "test:echo"},
		{"input from stdin", []string{"run", "echo", "--input", "-"}, `[1, 2]`, `[1,2]`, "test:echo"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := svcExec(t, nil, tt.stdin, append(tt.args, "--specs", exampleSpecs)...)
			if r.code != 0 {
				t.Fatalf("exit %d; stdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
			}
			res := decodeResult(t, r.stdout)
			if !res.Success || res.Error != nil {
				t.Errorf("result not a success: %+v", res)
			}
			if res.AgentName != tt.args[1] {
				t.Errorf("agent_name %q, want %q", res.AgentName, tt.args[1])
			}
			if got := compactJSON(t, res.Output); got != tt.wantOutput {
				t.Errorf("output %s, want %s", got, tt.wantOutput)
			}
			if res.Metadata.Model != tt.wantModel || res.Metadata.Backend != svc.BackendLocal {
				t.Errorf("metadata %+v, want model %s, backend local", res.Metadata, tt.wantModel)
			}
			if res.TaskID == "" || res.Metadata.TraceID == "" {
				t.Errorf("ids missing: %+v", res)
			}
			// A successful run logs nothing at the default level: stderr
			// is for problems.
			if r.stderr != "" {
				t.Errorf("stderr of a successful run: %s", r.stderr)
			}
		})
	}
}

func TestRunIDsAndLogLevel(t *testing.T) {
	t.Parallel()
	r := svcExec(t, nil, "", "run", "echo", "--input", "1", "--specs", exampleSpecs,
		"--task-id", "task-7", "--request-id", "req-7", "--log-level", "info")
	if r.code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", r.code, r.stderr)
	}
	res := decodeResult(t, r.stdout)
	if res.TaskID != "task-7" || res.Metadata.TraceID != "req-7" {
		t.Errorf("task_id %q, trace_id %q; want the ones given", res.TaskID, res.Metadata.TraceID)
	}
	// --log-level info shows the events of the run on stderr.
	for _, ev := range []string{"agent_spawned", "agent_completed"} {
		if !strings.Contains(r.stderr, ev) {
			t.Errorf("stderr at --log-level info lacks %s:\n%s", ev, r.stderr)
		}
	}
}

func TestRunFailedAgent(t *testing.T) {
	t.Parallel()
	dir := writeSpecs(t, map[string]string{
		"agents/broken.yaml": "version: 1\nname: broken\nmodel: test:fail\n",
	})
	r := svcExec(t, nil, "", "run", "broken", "--input", `{"q":1}`, "--specs", dir)
	if r.code != 1 {
		t.Fatalf("exit %d, want 1; stdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	res := decodeResult(t, r.stdout)
	if res.Success {
		t.Fatalf("success true for test:fail: %+v", res)
	}
	if res.Error == nil || res.Error.Type != string(svc.KindModel) || res.Error.Message == "" {
		t.Errorf("error %+v, want a ModelError with a message", res.Error)
	}
	if string(res.Output) != "null" {
		t.Errorf("output %s, want null", res.Output)
	}
	if res.AgentName != "broken" {
		t.Errorf("agent_name %q", res.AgentName)
	}
}

func TestRunRefusedAndUsage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantStderr string
	}{
		{"unknown agent", []string{"run", "nope", "--input", "1", "--specs", exampleSpecs}, 1, `unknown agent or group "nope"`},
		{"input not matching input_type", []string{"run", "triage", "--input", `{"x":1}`, "--specs", exampleSpecs}, 1, "input_type"},
		{"bad input JSON", []string{"run", "echo", "--input", `{"a":`, "--specs", exampleSpecs}, 2, "--input is not valid JSON"},
		{"missing input file", []string{"run", "echo", "--input", "@/nonexistent/in.json", "--specs", exampleSpecs}, 2, "--input"},
		{"both specs and url", []string{"run", "echo", "--input", "1", "--specs", exampleSpecs, "--url", "http://127.0.0.1:1"}, 2, "--specs DIR"},
		{"no input", []string{"run", "echo", "--specs", exampleSpecs}, 2, `"input"`},
		{"no agent", []string{"run", "--input", "1", "--specs", exampleSpecs}, 2, "arg"},
		{"unknown flag", []string{"run", "echo", "--input", "1", "--specs", exampleSpecs, "--bogus"}, 2, "--bogus"},
		{"bad option flag", []string{"run", "echo", "--input", "1", "--specs", exampleSpecs, "--timeout-seconds", "-1"}, 2, "timeout_seconds"},
		{"bad log level", []string{"run", "echo", "--input", "1", "--specs", exampleSpecs, "--log-level", "loud"}, 2, "--log-level"},
		{"missing specs dir", []string{"run", "echo", "--input", "1", "--specs", "/nonexistent/specs"}, 2, "/nonexistent/specs"},
		{"unknown command", []string{"frobnicate"}, 2, "frobnicate"},
		{"server down", []string{"run", "echo", "--input", "1", "--url", "http://127.0.0.1:1"}, 1, "127.0.0.1:1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := svcExec(t, nil, "", tt.args...)
			if r.code != tt.wantCode {
				t.Errorf("exit %d, want %d; stderr: %s", r.code, tt.wantCode, r.stderr)
			}
			if r.stdout != "" {
				t.Errorf("stdout %q, want nothing (no result)", r.stdout)
			}
			if !strings.Contains(r.stderr, tt.wantStderr) {
				t.Errorf("stderr %q does not mention %q", r.stderr, tt.wantStderr)
			}
		})
	}
}

func TestRunBadSpecs(t *testing.T) {
	t.Parallel()
	dir := writeSpecs(t, map[string]string{
		"agents/bad.yaml": "version: 1\nname: bad\nmodel: test:echo\ntrust_level: root\n",
	})
	r := svcExec(t, nil, "", "run", "bad", "--input", "1", "--specs", dir)
	if r.code != 2 {
		t.Fatalf("exit %d, want 2; stderr: %s", r.code, r.stderr)
	}
	if want := filepath.Join(dir, "agents", "bad.yaml") + ":4"; !strings.Contains(r.stderr, want) {
		t.Errorf("stderr %q does not name %s", r.stderr, want)
	}
}

// compactJSON normalises v (key order, spacing) for comparison.
func compactJSON(t *testing.T, v json.RawMessage) string {
	t.Helper()
	var x any
	if err := json.Unmarshal(v, &x); err != nil {
		t.Fatalf("not JSON: %s", v)
	}
	b, err := json.Marshal(x)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestValidateGroups(t *testing.T) {
	t.Parallel()
	dir := writeSpecs(t, map[string]string{
		"agents/triage.yaml":  "version: 1\nname: triage\nmodel: test:echo\n",
		"agents/billing.yaml": "version: 1\nname: billing\nmodel: test:echo\n",
		"groups/support.yaml": `version: 1
nodes:
  triage: {agent: triage}
  billing: {agent: billing}
edges:
  - {from: triage, to: billing, when: 'output.category == "billing"'}
`,
		"groups/crew.yml": "version: 1\nkind: team\ncoordinator: triage\ndelegates: [billing]\n",
		// Line 6: an edge to a node the group does not have.
		"groups/broken.yaml": `version: 1
nodes:
  triage: {agent: triage}
edges:
  - from: triage
    to: nowhere
`,
		// Line 3: CEL that does not compile.
		"groups/badcel.yaml": "version: 1\nnodes: {a: {agent: triage}, b: {agent: billing}}\nedges: [{from: a, to: b, when: 'output.x =='}]\n",
	})
	r := svcExec(t, nil, "", "validate", dir)
	if r.code != 1 {
		t.Fatalf("exit %d, want 1; stdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	g := func(name string) string { return filepath.Join(dir, "groups", name) }
	want := []string{
		"[ok] " + filepath.Join(dir, "agents", "billing.yaml"),
		"[ok] " + filepath.Join(dir, "agents", "triage.yaml"),
		"[error] " + g("badcel.yaml") + ":3: edges[0].when: does not compile: ",
		"[error] " + g("broken.yaml") + `:6: edges[0].to: unknown node "nowhere"`,
		"[ok] " + g("crew.yml"),
		"[ok] " + g("support.yaml"),
	}
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d (agents, then groups, by file name):\n%s", len(lines), len(want), r.stdout)
	}
	for i, w := range want {
		if lines[i] != w && !(strings.HasPrefix(w, "[error]") && strings.HasPrefix(lines[i], w)) {
			t.Errorf("line %d: %q\nwant %q", i+1, lines[i], w)
		}
	}
	if !strings.Contains(r.stderr, "2 of 6 files") {
		t.Errorf("stderr %q does not summarise the errors", r.stderr)
	}
}

// TestHelpShowsDefaults checks that every flag of every command is in its
// --help with its default, so that nobody has to read the source for it.
func TestHelpShowsDefaults(t *testing.T) {
	t.Parallel()
	for _, c := range newRoot().Commands() {
		if c.Hidden || c.Name() == "help" || c.Name() == "completion" {
			continue
		}
		t.Run(c.Name(), func(t *testing.T) {
			t.Parallel()
			r := svcExec(t, nil, "", c.Name(), "--help")
			if r.code != 0 {
				t.Fatalf("exit %d; stderr: %s", r.code, r.stderr)
			}
			_, flags, ok := strings.Cut(r.stdout, "\nFlags:\n")
			if !ok {
				t.Fatalf("no Flags section:\n%s", r.stdout)
			}
			c.Flags().VisitAll(func(f *pflag.Flag) {
				if f.Name == "help" {
					return
				}
				line := regexp.MustCompile(`(?m)^ +(-\w, )?--` + regexp.QuoteMeta(f.Name) + ` .*$`).FindString(flags)
				if line == "" {
					t.Errorf("--%s is not in the help:\n%s", f.Name, r.stdout)
					return
				}
				if !strings.Contains(line, "default") {
					t.Errorf("--%s does not say its default: %q", f.Name, line)
				}
			})
		})
	}
}

// The provider examples validate without API keys: the binary links the
// openai and anthropic providers and the spawn_agents builtin, and keys are
// checked when a model is called.
func TestValidateModelExamples(t *testing.T) {
	t.Parallel()
	r := svcExec(t, []string{"OPENAI_API_KEY=", "ANTHROPIC_API_KEY=", "GEMINI_API_KEY=", "GOOGLE_API_KEY=", "GROQ_API_KEY=",
		"AWS_ACCESS_KEY_ID=", "AWS_PROFILE=", "AWS_EC2_METADATA_DISABLED=true"}, "", "validate", "../../examples/models")
	if r.code != 0 || strings.Count(r.stdout, "[ok]") != 10 {
		t.Fatalf("exit %d; stdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
}
