package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/svcproc"

	"go.uber.org/zap"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/app"
)

// TestValidateAgreesWithServe runs every bad specs directory of
// testdata/badspecs through `svc validate` and through the start of a
// server on it (app.Start, what `svc serve` runs): validate exits 1 naming
// the file, line and key, and the server refuses to start, with the same
// message, before it has created anything in its data directory.
func TestValidateAgreesWithServe(t *testing.T) {
	t.Parallel()
	const root = "testdata/badspecs"
	emptyDir := t.TempDir()
	cases := []struct {
		dir string
		// want is the start of validate's line for the bad file, after
		// "[error] ", relative to dir; the server's error contains it too.
		want string
	}{
		{"schema_type", `agents/a.yaml:4: input_type: not a valid JSON Schema: schema root: type "objekt"`},
		{"schema_pattern", `agents/a.yaml:4: input_type: not a valid JSON Schema: pattern: error parsing regexp`},
		{"schema_draft", `agents/a.yaml:4: output_type: not a valid JSON Schema: invalid schema: $schema "http://example.com/my-draft"`},
		{"schema_ref_inside", `agents/a.yaml:4: output_type: not a valid JSON Schema: loading /other.json`},
		{"ref_missing", `agents/a.yaml:4: output_type.$ref: cannot read `},
		{"unknown_provider", `agents/a.yaml:3: model: model "nope:echo": unknown provider "nope"`},
		{"unknown_model", `agents/a.yaml:3: model: model "test:nonexistent": test model "nonexistent": want echo or fail`},
		{"fallback_provider", `agents/a.yaml:4: fallback_models[0]: model "zzz:q": unknown provider "zzz"`},
		{"openai_settings", `agents/a.yaml:5: model_settings.max_tokens: want a positive integer, got 12.5 (float64) (openai model)`},
		{"mcp_timeout", `agents/a.yaml:5: mcp_servers[0].timeout_seconds: 100000: want seconds above 0`},
		{"rate_limit_name", `agents/a.yaml:5: model_settings.rate_limit: no limit "sharde" in the runtime's rate_limits (runtime.yaml declares: shared)`},
		{"tool_arguments", `agents/a.yaml:8: model_settings.tool_arguments.spawn_agent: the agent has no tool "spawn_agent" (its tools: delegate, spawn_agents)`},
		{"cel_syntax", `groups/g.yaml:7: edges[0].when: does not compile: 1:14: Syntax error`},
		{"cel_type", `groups/g.yaml:7: edges[0].when: does not compile: 1:3: found no matching overload for '_+_'`},
		{"cel_fanout", `groups/g.yaml:7: edges[0].fan_out: gives string, want a list`},
		{"runtime_only", "no agents or groups found in DIR"},
		{emptyDir, "no agents or groups found in DIR"},
	}
	for _, tc := range cases {
		dir := tc.dir
		name := tc.dir
		if !filepath.IsAbs(dir) {
			dir = filepath.Join(root, tc.dir)
		} else {
			name = "empty"
		}
		want := strings.ReplaceAll(tc.want, "DIR", dir)
		if !strings.HasPrefix(want, "no agents") {
			want = filepath.Join(dir, want[:strings.Index(want, ":")]) + want[strings.Index(want, ":"):]
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := svcExec(t, nil, "", "validate", dir)
			if r.code != 1 {
				t.Errorf("validate: exit %d, want 1; stdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
			}
			if !strings.Contains(r.stdout, "[error] "+want) {
				t.Errorf("validate printed\n%s\nwant a line starting %q", r.stdout, "[error] "+want)
			}

			dataDir := t.TempDir()
			a, err := app.New(app.Options{SpecsDir: dir, DataDir: dataDir, NoListen: true, Logger: zap.NewNop()})
			if err != nil {
				t.Fatal(err)
			}
			err = a.Start()
			if err == nil {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				_ = a.Shutdown(ctx)
				t.Fatalf("the server started on specs validate refuses")
			}
			var ce *app.ConfigError
			if !errors.As(err, &ce) || ce.Option != "SpecsDir" || !errors.Is(err, svc.ErrSpecValidation) {
				t.Errorf("start: %v, want a SpecValidationError about SpecsDir", err)
			}
			if !strings.Contains(err.Error(), want) {
				t.Errorf("start: %v\nwant it to contain %q", err, want)
			}
			// Specs are loaded before any store: a bad one leaves nothing behind.
			if entries, _ := os.ReadDir(dataDir); len(entries) != 0 {
				t.Errorf("the refused start left %d entries in the data directory", len(entries))
			}
		})
	}
}

// TestServeRefusesEmptySpecs: `svc serve` on a directory without specs
// exits with the same message validate gives.
func TestServeRefusesEmptySpecs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := svcExec(t, nil, "", "serve", "--specs", dir, "--port", "0", "--data-dir", t.TempDir())
	if r.code != 2 || !strings.Contains(r.stderr, "no agents or groups found in "+dir) {
		t.Errorf("serve on an empty specs directory: exit %d, stderr:\n%s\nwant exit 2 saying no agents or groups were found", r.code, r.stderr)
	}
}

// TestServeOutsideRepositoryNeedsSpecs: run where the default --specs
// (examples/specs) does not exist, serve says to pass --specs instead of
// reporting a missing file.
func TestServeOutsideRepositoryNeedsSpecs(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, svcBin, "serve", "--port", "0", "--data-dir", t.TempDir())
	cmd.Dir = t.TempDir()
	cmd.Env = svcproc.Env()
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Fatalf("serve outside the repository: %v, want exit 2; output:\n%s", err, out)
	}
	if !strings.Contains(string(out), "no --specs given, and the default examples/specs does not exist in "+cmd.Dir+": pass --specs DIR") {
		t.Errorf("output:\n%s\nwant it to say to pass --specs", out)
	}
}

// Model settings are type-checked at load by the providers of the agent's
// whole chain, every bad key reported at its line in one pass, and a key
// one provider of the chain does not know but another does passes (issue
// 28: max_tokens: 12.5 and temperature: hot on an openai: agent passed
// validate and failed at the first run). serve refuses the same.
func TestValidateModelSettings(t *testing.T) {
	t.Parallel()
	dir := writeSpecs(t, map[string]string{
		"agents/oa.yaml": "version: 1\nname: oa\nmodel: openai:gpt-4o\nmodel_settings:\n  max_tokens: 12.5\n  temperature: hot\n",
		"agents/an.yaml": "version: 1\nname: an\nmodel: anthropic:claude-haiku-4-5\nmodel_settings:\n  top_k: many\n  prompt_cache: 1\n",
		// The fallbacks' keys: test's fail_times, anthropic's top_k and
		// prompt_cache, openai's seed, all fine in one chain.
		"agents/chain.yaml": "version: 1\nname: chain\nmodel: openai:gpt-4o\nfallback_models: [anthropic:claude-haiku-4-5, test:echo]\n" +
			"model_settings:\n  max_tokens: 100\n  temperature: 0.2\n  fail_times: 1\n  top_k: 5\n  prompt_cache: true\n  seed: 7\n",
		// A bad key refused by two providers of a chain is said once.
		"agents/twice.yaml": "version: 1\nname: twice\nmodel: openai:gpt-4o\nfallback_models: [anthropic:claude-haiku-4-5]\nmodel_settings:\n  temperature: hot\n",
		"agents/tm.yaml":    "version: 1\nname: tm\nmodel: test:echo\nmodel_settings:\n  fail_times: lots\n",
		// Another fault of the file does not hide its bad settings.
		"agents/both.yaml": "version: 1\nname: both\nmodel: openai:gpt-4o\ntrust_level: bogus\nmodel_settings:\n  max_tokens: 12.5\n",
	})
	r := mustExec(t, 1, nil, "validate", dir)
	for _, want := range []string{
		filepath.Join(dir, "agents/oa.yaml") + ":5: model_settings.max_tokens: want a positive integer, got 12.5",
		filepath.Join(dir, "agents/oa.yaml") + ":6: model_settings.temperature: want a number, got hot",
		filepath.Join(dir, "agents/an.yaml") + ":5: model_settings.top_k: ",
		filepath.Join(dir, "agents/an.yaml") + ":6: model_settings.prompt_cache: want true or false",
		filepath.Join(dir, "agents/twice.yaml") + ":6: model_settings.temperature: ",
		filepath.Join(dir, "agents/tm.yaml") + ":5: model_settings.fail_times: ",
		filepath.Join(dir, "agents/both.yaml") + ":4: trust_level",
		filepath.Join(dir, "agents/both.yaml") + ":6: model_settings.max_tokens: want a positive integer",
		"[ok] " + filepath.Join(dir, "agents/chain.yaml"),
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("validate printed\n%s\nwant %q", r.stdout, want)
		}
	}
	if n := strings.Count(r.stdout, "twice.yaml"); n != 1 || strings.Count(r.stdout, "temperature") != 2 {
		t.Errorf("twice.yaml's temperature said more than once:\n%s", r.stdout)
	}
	if !strings.Contains(r.stderr, "5 of 6 files") {
		t.Errorf("stderr %q", r.stderr)
	}
	// serve refuses the same, naming the same file, line and key.
	p := startProc(t, "svc serve", nil, "serve", "--host", "127.0.0.1", "--port", "0", "--data-dir", t.TempDir(), "--specs", dir)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatal("svc serve started on specs with bad model settings")
	}
	if p.code == 0 || !strings.Contains(p.stderr.String(), "oa.yaml:6: model_settings.temperature: want a number") {
		t.Errorf("svc serve: exit %d, stderr:\n%s", p.code, tail(p.stderr.String(), 4000))
	}
}

// An agent's model_settings.rate_limit is checked against the rate_limits
// of runtime.yaml by validate, at the line of the name, in the pass that
// reports the file's other faults and the other files' (issue 29: only
// serve refused an undeclared name, at start); without runtime.yaml no
// name is declared; a runtime.yaml that does not load is reported alone,
// not as every agent's missing limit.
func TestValidateRateLimitNames(t *testing.T) {
	t.Parallel()
	dir := writeSpecs(t, map[string]string{
		"runtime.yaml":     "version: 1\nrate_limits:\n  openai-key:\n    requests_per_minute: 6000\n  slow:\n    max_concurrent: 2\n",
		"agents/good.yaml": "version: 1\nname: good\nmodel: test:echo\nmodel_settings:\n  rate_limit: openai-key\n",
		"agents/typo.yaml": "version: 1\nname: typo\nmodel: test:echo\nmodel_settings:\n  latency_ms: 1\n  rate_limit: openai_key\n",
		// Another fault of the file does not hide the undeclared name.
		"agents/both.yaml": "version: 1\nname: both\nmodel: test:echo\ntrust_level: bogus\nmodel_settings:\n  rate_limit: fast\n",
		// Not a name: the runtime's own message, once.
		"agents/num.yaml": "version: 1\nname: num\nmodel: test:echo\nmodel_settings:\n  rate_limit: 5\n",
	})
	r := mustExec(t, 1, nil, "validate", dir)
	for _, want := range []string{
		"[ok] " + filepath.Join(dir, "runtime.yaml"),
		"[ok] " + filepath.Join(dir, "agents/good.yaml"),
		"[error] " + filepath.Join(dir, "agents/typo.yaml") + `:6: model_settings.rate_limit: no limit "openai_key" in the runtime's rate_limits (runtime.yaml declares: openai-key, slow)`,
		filepath.Join(dir, "agents/both.yaml") + ":4: trust_level",
		filepath.Join(dir, "agents/both.yaml") + `:6: model_settings.rate_limit: no limit "fast"`,
		"[error] " + filepath.Join(dir, "agents/num.yaml") + ":5: model_settings.rate_limit: want the name of a limit of rate_limits, got 5",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("validate printed\n%s\nwant %q", r.stdout, want)
		}
	}
	if n := strings.Count(r.stdout, "rate_limit:"); n != 3 {
		t.Errorf("validate printed\n%s\nwant 3 rate_limit errors, one per bad file, got %d", r.stdout, n)
	}
	if !strings.Contains(r.stderr, "3 of 5 files") {
		t.Errorf("stderr %q", r.stderr)
	}

	// Without runtime.yaml, no limit is declared.
	none := writeSpecs(t, map[string]string{
		"agents/a.yaml": "version: 1\nname: a\nmodel: test:echo\nmodel_settings:\n  rate_limit: shared\n",
	})
	r = mustExec(t, 1, nil, "validate", none)
	if want := filepath.Join(none, "agents/a.yaml") + `:5: model_settings.rate_limit: no limit "shared" in the runtime's rate_limits (runtime.yaml declares none)`; !strings.Contains(r.stdout, want) {
		t.Errorf("validate printed\n%s\nwant %q", r.stdout, want)
	}

	// A runtime.yaml with a fault: its limits are unknown, so the agents'
	// names are not called undeclared.
	broken := writeSpecs(t, map[string]string{
		"runtime.yaml":  "version: 1\nrate_limits:\n  shared:\n    requests_per_minute: -1\n",
		"agents/a.yaml": "version: 1\nname: a\nmodel: test:echo\nmodel_settings:\n  rate_limit: shared\n",
	})
	r = mustExec(t, 1, nil, "validate", broken)
	if !strings.Contains(r.stdout, "[error] "+filepath.Join(broken, "runtime.yaml")+":4: rate_limits.shared.requests_per_minute") ||
		!strings.Contains(r.stdout, "[ok] "+filepath.Join(broken, "agents/a.yaml")) {
		t.Errorf("validate printed\n%s\nwant runtime.yaml's error and agents/a.yaml ok", r.stdout)
	}
}
