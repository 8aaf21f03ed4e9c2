package spec

import (
	"errors"
	"io/fs"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/svc-dev/svc"
)

func TestLoadOptions(t *testing.T) {
	full := svc.Options{TimeoutSeconds: 12.5, MaxSpawnDepth: 0, RetryMaxAttempts: 3, RetryBackoffFactor: 2, TokenBudget: 50000, MaxTokensPerRun: 4000, MCPEagerStart: true, DeltaIntervalMS: 20, DeltaBytes: 0, MaxSpawnChildren: 8}
	cases := []struct {
		name string
		yaml string
		want svc.Options
	}{
		{"defaults", "version: 1\n", svc.DefaultOptions()},
		{"all", "version: 1\ntimeout_seconds: 12.5\nmax_spawn_depth: 0\nretry_max_attempts: 3\nretry_backoff_factor: 2\ntoken_budget: 50_000\nmax_tokens_per_run: 4000\nmcp_eager_start: true\ndelta_interval_ms: 20\ndelta_bytes: 0\nmax_spawn_children: 8\n", full},
		{"nulls keep defaults", "version: 1\ntimeout_seconds: ~\ntoken_budget: null\n", svc.DefaultOptions()},
		{"integer timeout", "version: 1\ntimeout_seconds: 60\n", func() svc.Options { o := svc.DefaultOptions(); o.TimeoutSeconds = 60; return o }()},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			writeTree(t, map[string]string{"runtime.yaml": c.yaml})
			got, err := LoadOptions("runtime.yaml")
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("options = %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestBadOptions(t *testing.T) {
	cases := []struct {
		name, yaml string
		line       int
		key, msg   string
	}{
		{"missing version", "timeout_seconds: 3\n", 1, "version", "missing"},
		{"version 3", "version: 3\n", 1, "version", "want 1, got the integer 3"},
		{"unknown key", "version: 1\ntimeout: 3\n", 2, "timeout", "unknown key; did you mean \"timeout_seconds\"?"},
		{"wrong type", "version: 1\nmax_spawn_depth: \"4\"\n", 2, "max_spawn_depth", `want an integer, got the string "4"`},
		{"float for int", "version: 1\nretry_max_attempts: 1.5\n", 2, "retry_max_attempts", "want an integer, got the number 1.5"},
		{"bool", "version: 1\nmcp_eager_start: yes\n", 2, "mcp_eager_start", `want true or false, got the string "yes"`},
		{"zero timeout", "version: 1\n\ntimeout_seconds: 0\n", 3, "timeout_seconds", "0: must be a positive number"},
		{"infinite timeout", "version: 1\ntimeout_seconds: .inf\n", 2, "timeout_seconds", "must be a positive number"},
		{"negative depth", "version: 1\nmax_spawn_depth: -1\n", 2, "max_spawn_depth", "must be 0 or more"},
		{"no attempts", "version: 1\nretry_max_attempts: 0\n", 2, "retry_max_attempts", "must be 1 or more"},
		{"no children", "version: 1\ntimeout_seconds: 9\nmax_spawn_children: 0\n", 3, "max_spawn_children", "0: must be 1 or more"},
		{"children as text", "version: 1\nmax_spawn_children: many\n", 2, "max_spawn_children", `want an integer, got the string "many"`},
		{"shrinking backoff", "version: 1\nretry_backoff_factor: 0.5\n", 2, "retry_backoff_factor", "must be 1 or more"},
		{"negative budget", "version: 1\ntoken_budget: -5\n", 2, "token_budget", "must be 0 (none) or more"},
		{"negative per-run cap", "version: 1\ntoken_budget: 5\n\nmax_tokens_per_run: -1\n", 4, "max_tokens_per_run", "must be 0 (none) or more"},
		{"per-run cap as text", "version: 1\nmax_tokens_per_run: lots\n", 2, "max_tokens_per_run", `want an integer, got the string "lots"`},
		{"fractional budget", "version: 1\ntoken_budget: 1.5\n", 2, "token_budget", "want an integer, got the number 1.5"},
		{"repeated", "version: 1\ntoken_budget: 5\ntoken_budget: 6\n", 3, "token_budget", "repeated (first at line 2)"},
		{"a list", "- version: 1\n", 1, "", "want a mapping of runtime options"},
		{"syntax", "version: 1\ntoken_budget: [\n", 3, "", "invalid YAML"}, // yaml names the end of the file
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			writeTree(t, map[string]string{"specs/runtime.yaml": c.yaml})
			_, err := LoadOptions("specs/runtime.yaml")
			errs := specErrors(t, err)
			if len(errs) != 1 {
				t.Fatalf("want exactly 1 error:%s", dumpErrors(errs))
			}
			e := errs[0]
			if e.File != "specs/runtime.yaml" || e.Line != c.line || e.Key != c.key || !strings.Contains(e.Msg, c.msg) {
				t.Fatalf("error = %#v\nwant line %d, key %q, message containing %q", e, c.line, c.key, c.msg)
			}
			// Load reports the same error for the directory.
			if _, err := Load("specs", Env{}); err == nil || err.Error() != e.Error() {
				t.Errorf("Load: %v", err)
			}
		})
	}
}

func TestLoadOptionsMissingFile(t *testing.T) {
	writeTree(t, nil)
	_, err := LoadOptions("nope/runtime.yaml")
	var e *Error
	if !errors.As(err, &e) || e.File != "nope/runtime.yaml" || !errors.Is(err, fs.ErrNotExist) || !errors.Is(err, svc.ErrSpecValidation) {
		t.Fatalf("err = %v", err)
	}
	if err := os.Mkdir("dir", 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOptions("dir"); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("LoadOptions(dir) = %v", err)
	}
}

// rate_limits: named limits, each checked, every error with its line, all
// of them in one pass.
func TestRateLimitsOption(t *testing.T) {
	writeTree(t, map[string]string{"runtime.yaml": "version: 1\nrate_limits:\n  openai_main:\n    requests_per_minute: 6000\n    tokens_per_minute: 2_000_000\n  small:\n    max_concurrent: 2\n"})
	got, err := LoadOptions("runtime.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]svc.RateLimit{"openai_main": {RequestsPerMinute: 6000, TokensPerMinute: 2e6}, "small": {MaxConcurrent: 2}}
	if !reflect.DeepEqual(got.RateLimits, want) {
		t.Fatalf("rate_limits = %+v, want %+v", got.RateLimits, want)
	}
	writeTree(t, map[string]string{"runtime.yaml": "version: 1\nrate_limits:\n  bad:\n    requests_per_minute: -3\n    max_concurrent: x\n  empty: {}\n  \"a b\":\n    max_concurrent: 2\n  typo:\n    request_per_minute: 5\n"})
	_, err = LoadOptions("runtime.yaml")
	if err == nil {
		t.Fatal("bad rate_limits accepted")
	}
	for _, want := range []string{
		"runtime.yaml:4: rate_limits.bad.requests_per_minute: -3: must be a positive number",
		"runtime.yaml:5: rate_limits.bad.max_concurrent: want an integer",
		"runtime.yaml:6: rate_limits.empty: give any of requests_per_minute, tokens_per_minute, max_concurrent",
		`runtime.yaml:7: rate_limits: limit name "a b"`,
		`runtime.yaml:10: rate_limits.typo.request_per_minute: unknown key; did you mean "requests_per_minute"?`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("errors %q\nwant one containing %q", err, want)
		}
	}
}
