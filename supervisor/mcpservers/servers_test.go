package mcpservers_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/agent"
	"github.com/svc-dev/svc/supervisor"
	"github.com/svc-dev/svc/supervisor/mcpservers"
	"github.com/svc-dev/svc/supervisor/registry"
	"github.com/svc-dev/svc/tools/mcp"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newServers(t *testing.T) *mcpservers.Servers {
	t.Helper()
	system := supervisor.NewActorSystem(nil) // quiet, with a short dead-letter throttle
	s := mcpservers.New(system, mcp.Config{})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Error(err)
		}
		system.Shutdown()
	})
	return s
}

func server(name string) svc.MCPServer {
	return svc.MCPServer{Name: name, Transport: "stdio", Command: "/bin/true"}
}

// owners lists the (agent, server) pairs of the current servers.
func owners(s *mcpservers.Servers) []string {
	var out []string
	for _, st := range s.Status() {
		out = append(out, st.Agent+"/"+st.Name)
	}
	return out
}

// A child compiled with its parent as owner uses the parent's server
// rather than one of its own; a bad configuration is refused, naming the
// server, before any server is made.
func TestSourcesBelongToTheOwner(t *testing.T) {
	s := newServers(t)
	parent := svc.Agent{Name: "boss", MCPServers: []svc.MCPServer{server("fs")}}
	child := parent.Clone()
	child.Name = "kid"
	for _, a := range []svc.Agent{parent, child} {
		src, err := s.Sources("boss", a)
		if err != nil || len(src) != 1 {
			t.Fatalf("%s: sources %v, %v", a.Name, src, err)
		}
	}
	if got := owners(s); !slices.Equal(got, []string{"boss/fs"}) {
		t.Errorf("servers %v, want boss's one", got)
	}
	bad := svc.Agent{Name: "bad", MCPServers: []svc.MCPServer{server("ok"), {Name: "x", Transport: "carrier pigeon"}}}
	if _, err := s.Sources("bad", bad); !errors.Is(err, svc.ErrSpecValidation) || !strings.Contains(err.Error(), "mcp_servers[1]") {
		t.Errorf("bad configuration: %v", err)
	}
	if got := owners(s); !slices.Equal(got, []string{"boss/fs"}) {
		t.Errorf("servers %v after a refused agent, want boss's only", got)
	}
}

// After a replace, the servers of a removed agent and the servers an
// agent no longer declares are retired; the others stay.
func TestRetire(t *testing.T) {
	s := newServers(t)
	reg := registry.New(registry.Config{Compile: func(a svc.Agent) (*agent.Compiled, error) {
		if _, err := s.Sources(a.Name, a); err != nil {
			return nil, err
		}
		return &agent.Compiled{Def: a}, nil
	}, OnReplace: s.Retire})
	a := svc.Agent{Name: "a", Model: "test:echo", MCPServers: []svc.MCPServer{server("one"), server("two")}}
	b := svc.Agent{Name: "b", Model: "test:echo", MCPServers: []svc.MCPServer{server("fs")}}
	if err := reg.Register(a, b); err != nil {
		t.Fatal(err)
	}
	if got := owners(s); !slices.Equal(got, []string{"a/one", "a/two", "b/fs"}) {
		t.Fatalf("servers %v", got)
	}
	a.MCPServers = a.MCPServers[:1]
	if err := reg.Replace([]svc.Agent{a}, nil); err != nil {
		t.Fatal(err)
	}
	if got := owners(s); !slices.Equal(got, []string{"a/one"}) {
		t.Errorf("servers after the replace %v, want a/one only", got)
	}
}
