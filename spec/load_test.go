package spec

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/svc-dev/svc"
)

func TestValidateReportsEachFile(t *testing.T) {
	writeTree(t, map[string]string{
		"specs/runtime.yaml":          "version: 1\ntoken_budget: 1000\n",
		"specs/agents/b.yaml":         "version: 1\nmodel: nocolon\n",
		"specs/agents/a.yml":          "version: 1\nmodel: test:echo\n",
		"specs/agents/c.yaml":         "version: 1\nmodel: test:echo\n",
		"specs/agents/README.md":      "not a spec",
		"specs/agents/.#c.yaml":       "editor lock file",
		"specs/agents/sub/d.yaml":     "version: 1\nmodel: test:echo\n",
		"specs/groups/support.yaml":   "not even: [valid",
		"specs/schemas/unused.json":   "{",
		"specs/notes/other.yaml":      "ignored",
		"specs/agents/e.yaml.orig":    "ignored",
		"specs/agents/f.YAML.disable": "ignored",
	})
	res, err := Validate("specs", Env{})
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, r := range res {
		files = append(files, r.File)
	}
	want := []string{"specs/runtime.yaml", "specs/agents/a.yml", "specs/agents/b.yaml", "specs/agents/c.yaml", "specs/groups/support.yaml"}
	if !slices.Equal(files, want) {
		t.Fatalf("files = %q, want %q", files, want)
	}
	for _, r := range res {
		if bad := r.File == "specs/agents/b.yaml" || r.File == "specs/groups/support.yaml"; bad != (r.Err != nil) {
			t.Errorf("%s: err = %v", r.File, r.Err)
		}
	}
	if !strings.HasPrefix(res[2].Err.Error(), "specs/agents/b.yaml:2: model: ") {
		t.Errorf("b.yaml: %v", res[2].Err)
	}
}

// A directory without agent or group files is an error for Validate and
// Load alike (most often the wrong directory), unless agents registered
// from Go are there to serve; files that are not specs do not count.
func TestNoSpecsIsAnError(t *testing.T) {
	root := writeTree(t, map[string]string{"specs/notes/g.yaml": "x", "specs/README.md": "x", "only/runtime.yaml": "version: 1\n"})
	for _, dir := range []string{"specs", filepath.Join(root, "specs"), "only"} {
		want := fmt.Sprintf("no agents or groups found in %s (looked for %s and %s)", dir,
			filepath.Join(dir, "agents", "*.yaml"), filepath.Join(dir, "groups", "*.yaml"))
		res, err := Validate(dir, Env{})
		if err != nil || len(res) == 0 {
			t.Fatalf("Validate(%s) = %v, %v; want a result saying there are no specs", dir, res, err)
		}
		last := res[len(res)-1]
		if last.File != dir || last.Err == nil || last.Err.Error() != want || !errors.Is(last.Err, ErrNoSpecs) || !errors.Is(last.Err, svc.ErrSpecValidation) {
			t.Errorf("Validate(%s): last result %+v, want %q for the directory", dir, last, want)
		}
		if _, err := Load(dir, Env{}); err == nil || err.Error() != want || !errors.Is(err, ErrNoSpecs) {
			t.Errorf("Load(%s) = %v, want %q", dir, err, want)
		}
		set, err := Load(dir, Env{Agents: []string{"from_go"}})
		if err != nil || set.Dir != dir || len(set.Agents) != 0 {
			t.Fatalf("Load(%s) with agents from Go = %+v, %v; want an empty set", dir, set, err)
		}
	}
}

// Env.CheckAgent, the runtime's compile in a process, runs on every agent
// the file checks pass, and what it refuses is reported at the line of the
// field its error names (else at the top of the file).
func TestCheckAgent(t *testing.T) {
	writeTree(t, map[string]string{
		"specs/agents/a.yaml": "version: 1\nname: a\nmodel: test:echo\n\ninput_type: {type: string}\n",
		"specs/agents/b.yaml": "version: 1\nname: b\nmodel: test:echo\n",
		"specs/agents/c.yaml": "version: 1\nname: c\nmodel: test:echo\nbogus: 1\n",
	})
	var seen []string
	env := Env{CheckAgent: func(a svc.Agent) error {
		seen = append(seen, a.Name)
		switch a.Name {
		case "a":
			return svc.Errorf(svc.KindSpecValidation, "agent a: input_type: refused by the runtime")
		case "b":
			return svc.Errorf(svc.KindSpecValidation, "agent b: something about the whole agent")
		}
		return nil
	}}
	res, err := Validate("specs", env)
	if err != nil || len(res) != 3 {
		t.Fatalf("Validate = %v, %v", res, err)
	}
	for i, want := range []string{
		"specs/agents/a.yaml:5: input_type: refused by the runtime",
		"specs/agents/b.yaml:1: something about the whole agent",
		"specs/agents/c.yaml:4: bogus: ",
	} {
		if res[i].Err == nil || !strings.HasPrefix(res[i].Err.Error(), want) {
			t.Errorf("result %d = %v, want it to start %q", i, res[i].Err, want)
		}
	}
	// c has a file error already: the runtime is not asked about it.
	if strings.Join(seen, ",") != "a,b" {
		t.Errorf("CheckAgent saw %v, want a and b", seen)
	}
	if _, err := Load("specs", env); err == nil || !strings.Contains(err.Error(), "refused by the runtime") {
		t.Errorf("Load = %v, want CheckAgent's refusal", err)
	}
}

// A CheckAgent error about a key inside model_settings is reported at
// that key's line, under model_settings' own line when the key is not
// found.
func TestCheckAgentModelSettingsLine(t *testing.T) {
	writeTree(t, map[string]string{
		"specs/agents/a.yaml": "version: 1\nname: a\nmodel: test:echo\nmodel_settings:\n  call_tools: all\n  tool_arguments:\n" +
			"    ok: {}\n    x: {n: 1}\n",
		"specs/agents/b.yaml": "version: 1\nname: b\nmodel: test:echo\nmodel_settings:\n  call_tools:\n    - p\n    - q\n",
		"specs/agents/c.yaml": "version: 1\nname: c\nmodel: test:echo\nmodel_settings: {tokens: 1}\n",
	})
	env := Env{CheckAgent: func(a svc.Agent) error {
		key := map[string]string{"a": "tool_arguments.x", "b": "call_tools[1]", "c": "nowhere.y"}[a.Name]
		return svc.Errorf(svc.KindSpecValidation, "agent %s: model_settings.%s: refused", a.Name, key)
	}}
	res, err := Validate("specs", env)
	if err != nil || len(res) != 3 {
		t.Fatalf("Validate = %v, %v", res, err)
	}
	for i, want := range []string{
		"specs/agents/a.yaml:8: model_settings.tool_arguments.x: refused",
		"specs/agents/b.yaml:7: model_settings.call_tools[1]: refused",
		"specs/agents/c.yaml:4: model_settings.nowhere.y: refused",
	} {
		if res[i].Err == nil || res[i].Err.Error() != want {
			t.Errorf("result %d = %v, want %q", i, res[i].Err, want)
		}
	}
}

func TestLoadIsAllOrNothing(t *testing.T) {
	writeTree(t, map[string]string{
		"specs/agents/good.yaml":  "version: 1\nmodel: test:echo\n",
		"specs/agents/bad1.yaml":  "version: 1\nmodel: test:echo\ntools: [nope]\n",
		"specs/agents/bad2.yaml":  "version: 1\n",
		"specs/runtime.yaml":      "version: 1\nmax_spawn_depth: -1\n",
		"specs/agents/other.yaml": "version: 1\nmodel: test:echo\n",
	})
	set, err := Load("specs", Env{})
	if set != nil {
		t.Fatalf("Load returned a set despite errors: %+v", set)
	}
	errs := specErrors(t, err)
	var got []string
	for _, e := range errs {
		got = append(got, e.File+":"+e.Key)
	}
	want := []string{"specs/runtime.yaml:max_spawn_depth", "specs/agents/bad1.yaml:tools[0]", "specs/agents/bad2.yaml:model"}
	if !slices.Equal(got, want) {
		t.Fatalf("errors %q, want %q:%s", got, want, dumpErrors(errs))
	}
	if !errors.Is(err, svc.ErrSpecValidation) || svc.KindOf(err) != svc.KindSpecValidation || IsRootError(err) {
		t.Errorf("err kind: Is=%v KindOf=%v IsRootError=%v", errors.Is(err, svc.ErrSpecValidation), svc.KindOf(err), IsRootError(err))
	}
}

func TestLoadSet(t *testing.T) {
	writeTree(t, map[string]string{
		"specs/runtime.yaml":     "version: 1\ntimeout_seconds: 30\n",
		"specs/agents/zed.yaml":  "version: 1\nmodel: test:echo\n",
		"specs/agents/able.yaml": "version: 1\nname: able\nmodel: test:fail\ntools: [current_time]\n",
	})
	env := testEnv()
	set, err := Load("specs", env)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, a := range set.Agents {
		names = append(names, a.Name)
	}
	if !slices.Equal(names, []string{"able", "zed"}) {
		t.Errorf("agents %q", names)
	}
	if want := map[string]string{"able": "specs/agents/able.yaml", "zed": "specs/agents/zed.yaml"}; !reflect.DeepEqual(set.Files, want) {
		t.Errorf("Files = %v", set.Files)
	}
	wantOpts := svc.DefaultOptions()
	wantOpts.TimeoutSeconds = 30
	if !set.HasOptions || !reflect.DeepEqual(set.Options, wantOpts) {
		t.Errorf("options = %+v (HasOptions %v), want %+v", set.Options, set.HasOptions, wantOpts)
	}
	if set.Agents[0].Tools[0] != env.Tools["current_time"] {
		t.Errorf("tool not taken from the environment")
	}
}

func TestDuplicateAgentNames(t *testing.T) {
	writeTree(t, map[string]string{
		"specs/agents/echo.yaml": "version: 1\nmodel: test:echo\n",
		"specs/agents/echo.yml":  "version: 1\n\nname: echo\nmodel: test:echo\n",
	})
	res, err := Validate("specs", Env{})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Err != nil {
		t.Errorf("first file: %v", res[0].Err)
	}
	errs := specErrors(t, res[1].Err)
	if len(errs) != 1 || errs[0].Error() != "specs/agents/echo.yml:3: name: agent echo is already defined in specs/agents/echo.yaml" {
		t.Fatalf("errors:%s", dumpErrors(errs))
	}
	if _, err := Load("specs", Env{}); err == nil {
		t.Fatal("Load accepted duplicate names")
	}
}

func TestRootErrors(t *testing.T) {
	root := writeTree(t, map[string]string{"file": "x"})
	for _, dir := range []string{"missing", "file", filepath.Join(root, "missing")} {
		_, lerr := Load(dir, Env{})
		_, verr := Validate(dir, Env{})
		for _, err := range []error{lerr, verr} {
			if !IsRootError(err) || !strings.Contains(err.Error(), dir) || !errors.Is(err, svc.ErrSpecValidation) {
				t.Errorf("%s: err = %v, want a root error naming it", dir, err)
			}
		}
	}
	if !errors.Is(func() error { _, err := Load("missing", Env{}); return err }(), fs.ErrNotExist) {
		t.Error("a missing dir is not fs.ErrNotExist")
	}
	if IsRootError(&Error{File: "x"}) || IsRootError(nil) {
		t.Error("IsRootError holds for a file error")
	}
}

func TestUnreadableFiles(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root reads everything")
	}
	writeTree(t, map[string]string{"specs/agents/a.yaml": "version: 1\nmodel: test:echo\n"})
	if err := os.Chmod("specs/agents/a.yaml", 0); err != nil {
		t.Fatal(err)
	}
	res, err := Validate("specs", Env{})
	if err != nil || len(res) != 1 || !errors.Is(res[0].Err, fs.ErrPermission) {
		t.Fatalf("Validate = %v, %v", res, err)
	}
}

func TestAgentsNotADirectory(t *testing.T) {
	writeTree(t, map[string]string{"specs/agents": "oops"})
	res, err := Validate("specs", Env{})
	if err != nil || len(res) != 1 || res[0].File != "specs/agents" || res[0].Err == nil {
		t.Fatalf("Validate = %+v, %v", res, err)
	}
	if _, err := Load("specs", Env{}); err == nil || IsRootError(err) {
		t.Fatalf("Load = %v, want a file error", err)
	}
}

func TestSpecialFilesAreRefused(t *testing.T) {
	writeTree(t, map[string]string{})
	if err := os.MkdirAll("specs/agents/dir.yaml", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/zero", "specs/agents/zero.yaml"); err != nil {
		t.Skip("no symlinks:", err)
	}
	res, err := Validate("specs", Env{})
	if err != nil {
		t.Fatal(err)
	}
	// dir.yaml is a directory and skipped; zero.yaml is refused unread.
	if len(res) != 1 || res[0].File != "specs/agents/zero.yaml" || !strings.Contains(res[0].Err.Error(), "not a regular file") {
		t.Fatalf("results = %+v", res)
	}
}

func TestBigFilesAreRefused(t *testing.T) {
	writeTree(t, map[string]string{
		"specs/agents/a.yaml": "version: 1\nmodel: test:echo\ninstructions: " + strings.Repeat("x", maxFileSize) + "\n",
	})
	res, _ := Validate("specs", Env{})
	if len(res) != 1 || res[0].Err == nil || !strings.Contains(res[0].Err.Error(), "file too large") {
		t.Fatalf("results = %+v", res)
	}
}

func TestErrorFormat(t *testing.T) {
	cases := []struct {
		e    Error
		want string
	}{
		{Error{File: "a/b.yaml", Line: 3, Key: "model", Msg: "bad"}, "a/b.yaml:3: model: bad"},
		{Error{File: "a/b.yaml", Line: 3, Msg: "invalid YAML"}, "a/b.yaml:3: invalid YAML"},
		{Error{File: "a/b.yaml", Msg: "no such file"}, "a/b.yaml: no such file"},
		{Error{File: "a/b.yaml", Key: "k", Msg: "m"}, "a/b.yaml: k: m"},
	}
	for _, c := range cases {
		if got := c.e.Error(); got != c.want {
			t.Errorf("Error() = %q, want %q", got, c.want)
		}
		err := error(&c.e)
		if !errors.Is(err, svc.ErrSpecValidation) || !errors.Is(err, svc.ErrRuntime) || errors.Is(err, svc.ErrTopology) {
			t.Errorf("%v: wrong kind", err)
		}
		if svc.KindOf(err) != svc.KindSpecValidation {
			t.Errorf("KindOf = %v", svc.KindOf(err))
		}
		if info := svc.ErrorInfoOf(err); info.Type != "SpecValidationError" || info.Message != c.want {
			t.Errorf("ErrorInfoOf = %+v", info)
		}
	}
}

// The rate_limit names of agents are checked against the limits the
// runtime will have: runtime.yaml's as Env.RuntimeOptions changes them
// (an embedder that declares a limit in Go), not the file's alone.
func TestRateLimitNamesAfterRuntimeOptions(t *testing.T) {
	dir := writeTree(t, map[string]string{
		"runtime.yaml":  "version: 1\nrate_limits:\n  shared: {max_concurrent: 2}\n",
		"agents/a.yaml": "version: 1\nname: a\nmodel: test:echo\nmodel_settings: {rate_limit: shared}\n",
		"agents/b.yaml": "version: 1\nname: b\nmodel: test:echo\nmodel_settings: {rate_limit: from-go}\n",
	})
	env := testEnv()
	if _, err := Load(dir, env); err == nil || !strings.Contains(err.Error(), `b.yaml:4: model_settings.rate_limit: no limit "from-go"`) {
		t.Errorf("Load: %v, want b's undeclared limit reported at its line", err)
	}
	env.RuntimeOptions = func(o svc.Options) svc.Options {
		o.RateLimits = maps.Clone(o.RateLimits)
		o.RateLimits["from-go"] = svc.RateLimit{RequestsPerMinute: 60}
		return o
	}
	if _, err := Load(dir, env); err != nil {
		t.Errorf("Load with the limit added by RuntimeOptions: %v", err)
	}
}
