package spec

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/svc-dev/svc"
)

// fakeTool is a tool that only has a name and an access level.
type fakeTool struct {
	name   string
	access svc.Access
}

func (t fakeTool) Name() string                 { return t.name }
func (t fakeTool) Description() string          { return "test tool " + t.name }
func (t fakeTool) InputSchema() json.RawMessage { return json.RawMessage(`{"type":"object"}`) }
func (t fakeTool) Access() svc.Access           { return t.access }
func (t fakeTool) Call(context.Context, json.RawMessage) (json.RawMessage, error) {
	return json.RawMessage(`null`), nil
}

// testEnv has the built-in tools of docs/tools.md and one builtin.
func testEnv() Env {
	tools := map[string]svc.Tool{}
	for _, t := range []fakeTool{
		{"current_time", svc.AccessRead},
		{"read_file", svc.AccessRead},
		{"http_get", svc.AccessNetwork},
		{"write_file", svc.AccessWrite},
	} {
		tools[t.name] = t
	}
	return Env{Tools: tools, Builtins: []string{"spawn_agents"}}
}

// writeTree writes files (path → content) under a new temporary directory,
// makes it the working directory and returns it. Tests then pass relative
// paths, as a user would, and can assert the paths in messages exactly.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, content := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Chdir(root)
	return root
}

// specErrors flattens err into its *Error values.
func specErrors(t *testing.T, err error) []*Error {
	t.Helper()
	if err == nil {
		return nil
	}
	var out []*Error
	var walk func(error)
	walk = func(err error) {
		var se *Error
		if errors.As(err, &se) && err == error(se) {
			out = append(out, se)
			return
		}
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
			return
		}
		t.Fatalf("not a spec error: %T %v", err, err)
	}
	walk(err)
	return out
}

func dumpErrors(errs []*Error) string {
	s := ""
	for _, e := range errs {
		s += fmt.Sprintf("\n\t%v", e)
	}
	return s
}
