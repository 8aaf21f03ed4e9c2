package main

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/testutil"
)

// TestTemplatesValidateServeReload: `svc validate` names a template
// mistake with file and line; a served agent runs with its template's
// model settings, its own winning key by key; and a change to the
// template reaches the agent on reload.
func TestTemplatesValidateServeReload(t *testing.T) {
	t.Parallel()
	bad := writeSpecs(t, map[string]string{
		"templates/base.yaml": "version: 1\nmodel: test:echo\n",
		"agents/a.yaml":       "version: 1\ntemplate: bsae\n",
	})
	r := svcExec(t, nil, "", "validate", bad)
	want := "[error] " + filepath.Join(bad, "agents/a.yaml") + `:2: template: unknown template "bsae" (known templates: base)`
	if r.code != 1 || !strings.Contains(r.stdout, want) || !strings.Contains(r.stdout, "[ok] "+filepath.Join(bad, "templates/base.yaml")) {
		t.Errorf("validate: exit %d, stdout:\n%s\nwant exit 1 and %q", r.code, r.stdout, want)
	}

	tmpl := func(out string) string {
		return "version: 1\nmodel: test:echo\npre_instruction: Be brief.\nmodel_settings: {output: " + out + ", latency_ms: 1}\n"
	}
	dir := writeSpecs(t, map[string]string{
		"templates/base.yaml": tmpl(`"from template"`),
		"agents/plain.yaml":   "version: 1\ntemplate: base\n",
		"agents/own.yaml":     "version: 1\ntemplate: base\nmodel_settings: {output: own}\n",
	})
	if r := svcExec(t, nil, "", "validate", dir); r.code != 0 {
		t.Fatalf("validate: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	s := startServe(t, nil, "--specs", dir, "--reload")
	if got := runOutput(t, s.url, "plain"); got != `"from template"` {
		t.Errorf("plain answered %s, want the template's output", got)
	}
	if got := runOutput(t, s.url, "own"); got != `"own"` {
		t.Errorf("own answered %s, want its own output", got)
	}
	writeFile(t, filepath.Join(dir, "templates/base.yaml"), tmpl(`"changed"`))
	testutil.Eventually(t, "the template change", func() bool { return runOutput(t, s.url, "plain") == `"changed"` })
	if got := runOutput(t, s.url, "own"); got != `"own"` {
		t.Errorf("own answered %s after the template changed, want its own output still", got)
	}
	// A template broken on reload: logged at its line, the agents keep
	// their definitions.
	writeFile(t, filepath.Join(dir, "templates/base.yaml"), "version: 1\nmodel: test:echo\nmodel_settings: [1]\n")
	s.waitLog(t, regexp.MustCompile(regexp.QuoteMeta(filepath.Join(dir, "templates/base.yaml")+":3: model_settings")), 10*time.Second)
	if got := runOutput(t, s.url, "plain"); got != `"changed"` {
		t.Errorf("plain answered %s after a bad template change, want the previous definition's", got)
	}
}
