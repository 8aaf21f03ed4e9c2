package svc_test

import (
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/svc-dev/svc"

// listedPackage is what TestImportDirection reads of `go list -json`.
type listedPackage struct {
	ImportPath   string
	Imports      []string // of the package's own (non-test) files
	Deps         []string // everything those import, transitively
	TestImports  []string
	XTestImports []string
}

// TestImportDirection enforces the rules of direction (docs/architecture.md):
//
//   - the root package imports none of the others;
//   - http/server reaches the runtime only through svc.Backend (it may
//     import http/openapi, the API's document, which imports only the
//     root);
//   - stores, event stores, emitters and brokers import only the root,
//     their own family (eventstore/memevents may import eventstore and
//     eventstore/internal/rollup) and internal leaf packages that import
//     nothing of the module but the root (internal/dropqueue,
//     internal/sqlitedb, internal/faultstore);
//     brokers may also import fleetwire (the subject names they agree on);
//   - fleetwire, the fleet's wire format, imports only the root: it is the
//     one definition dispatch, worker and the brokers share, so it must
//     not reach into any of them;
//   - agent/ and model/ (the agent loop and the providers) never import
//     actors/: they stay usable without the actor system;
//   - supervisor/registry (the definitions known by name) does not need
//     the actor system either: it never depends on actors/;
//   - supervisor/submitted (the writer of submitted runs) writes to any
//     svc.RunStore: it imports only the root;
//   - supervisor/hostapi (the message API's actor) reaches the runtime
//     only through the calls it is given: of the module it imports the
//     root and actors/msg, the messages it serves;
//   - supervisor/spawn (the spawn_agents and delegate tools) reaches the
//     runtime only through the calls it is given: of the module it
//     imports the root and agent (the compiled agents it runs);
//   - supervisor/remote (dispatching invocations to the fleet) reaches
//     the runtime only through the calls it is given: of the module it
//     imports the root, agent (the invocation it sends) and dispatch (the
//     task it becomes);
//   - supervisor/mcpservers (which MCP servers an agent gets) imports, of
//     the module, the root, tools/mcp (the servers themselves) and
//     supervisor/registry (the agents it retires servers for);
//   - internal/lean (the speed tricks) is used by actors/ and supervisor
//     only, and actors/plain (the reference run path) depends on none of
//     actors/, supervisor, internal/lean or protoactor;
//   - no production code imports testing. A package that does is a test
//     helper (a contract suite such as storetest, say), and that is
//     decided by how it is used, not by its name: no package outside the
//     test helpers may depend on it, directly or not, and some _test.go
//     file must import it.
func TestImportDirection(t *testing.T) {
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports,Deps,TestImports,XTestImports", "./...")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []listedPackage
	for dec := json.NewDecoder(strings.NewReader(string(out))); ; {
		var p listedPackage
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < 5 {
		t.Fatalf("go list saw only %d packages", len(pkgs))
	}
	for _, p := range checkImports(pkgs) {
		t.Error(p)
	}
}

// checkImports applies the rules of TestImportDirection to pkgs and
// returns one message per violation.
func checkImports(pkgs []listedPackage) []string {
	own := func(p string) bool { return p == module || strings.HasPrefix(p, module+"/") }
	rel := func(p string) string { return strings.TrimPrefix(strings.TrimPrefix(p, module), "/") }

	byPath := map[string]listedPackage{}
	helpers := map[string]bool{}  // own packages that import testing
	testUsed := map[string]bool{} // own packages some _test.go file imports
	for _, p := range pkgs {
		byPath[p.ImportPath] = p
		if slices.Contains(p.Imports, "testing") {
			helpers[p.ImportPath] = true
		}
		for _, imp := range append(slices.Clone(p.TestImports), p.XTestImports...) {
			testUsed[imp] = true
		}
	}
	// utility reports whether dep is an internal package that imports
	// nothing of the module but the root: a leaf any backend may share
	// (the drop queue, the SQLite opener, the failing store of tests).
	utility := func(dep string) bool {
		d, ok := byPath[dep]
		if !ok || !strings.Contains("/"+rel(dep)+"/", "/internal/") {
			return false
		}
		return !slices.ContainsFunc(d.Imports, func(i string) bool { return own(i) && rel(i) != "" })
	}

	var problems []string
	fail := func(format string, args ...any) {
		problems = append(problems, fmt.Sprintf(format, args...))
	}
	for _, p := range pkgs {
		pkg := rel(p.ImportPath)
		if helpers[p.ImportPath] {
			if !testUsed[p.ImportPath] {
				fail("%s imports testing but no _test.go file imports it: only test helpers may import testing", p.ImportPath)
			}
		} else {
			for _, dep := range p.Deps {
				if helpers[dep] {
					fail("%s depends on %s, which imports testing: production code must not", p.ImportPath, dep)
				}
			}
		}
		for _, imp := range p.Imports {
			if !own(imp) {
				continue
			}
			dep := rel(imp)
			switch {
			case pkg == "":
				fail("the root package imports %s; it must import none of the others", imp)
			case pkg == "http/server" && dep != "" && dep != "http/openapi":
				fail("http/server imports %s; it must reach the runtime only through svc.Backend", imp)
			case pkg == "http/openapi" && dep != "":
				fail("http/openapi imports %s; the API's document is built from the root's types only", imp)
			case pkg == "fleetwire" && dep != "":
				fail("fleetwire imports %s; the fleet's wire format imports only the root", imp)
			case under(pkg, "broker") && dep == "fleetwire":
				// the brokers name dead-letter subjects and retained keys
			case pkg == "supervisor/hostapi" && dep != "" && dep != "actors/msg":
				fail("%s imports %s; the message API imports only the root and actors/msg", p.ImportPath, imp)
			case pkg == "supervisor/spawn" && dep != "" && dep != "agent":
				fail("%s imports %s; the nested-run tools import only the root and agent", p.ImportPath, imp)
			case pkg == "supervisor/remote" && dep != "" && dep != "agent" && dep != "dispatch":
				fail("%s imports %s; remote dispatch imports only the root, agent and dispatch", p.ImportPath, imp)
			case pkg == "supervisor/mcpservers" && dep != "" && dep != "tools/mcp" && dep != "supervisor/registry":
				fail("%s imports %s; the agents' MCP servers import only the root, tools/mcp and supervisor/registry", p.ImportPath, imp)
			case pkg == "supervisor/submitted" && dep != "":
				fail("%s imports %s; the submitted-run writer imports only the root", p.ImportPath, imp)
			case under(pkg, "stores", "eventstore", "emitters", "broker") && dep != "" && !sameFamily(pkg, dep) && !utility(imp):
				fail("%s imports %s; stores, event stores, emitters and brokers import only the root", p.ImportPath, imp)
			case dep == "internal/lean" && !under(pkg, "actors", "supervisor"):
				fail("%s imports %s; the speed tricks are the runtime's: only actors/ and supervisor use them", p.ImportPath, imp)
			}
		}
		if under(pkg, "actors/plain") {
			for _, dep := range p.Deps {
				if (own(dep) && (under(rel(dep), "actors", "supervisor", "internal/lean") && !under(rel(dep), "actors/plain"))) ||
					strings.Contains(dep, "protoactor") {
					fail("%s depends on %s; the reference run path is plain Go: no actors, no lean tricks", p.ImportPath, dep)
				}
			}
		}
		if under(pkg, "supervisor/registry") {
			for _, dep := range p.Deps {
				if own(dep) && under(rel(dep), "actors") {
					fail("%s depends on %s; the registry must not need the actor system", p.ImportPath, dep)
				}
			}
		}
		if under(pkg, "agent", "model") {
			for _, dep := range p.Deps {
				if own(dep) && under(rel(dep), "actors") {
					fail("%s depends on %s; agent/ and model/ must not need the actor system", p.ImportPath, dep)
				}
			}
		}
	}
	return problems
}

func under(pkg string, roots ...string) bool {
	for _, r := range roots {
		if pkg == r || strings.HasPrefix(pkg, r+"/") {
			return true
		}
	}
	return false
}

// sameFamily lets a backend's packages share code within its own tree
// (emitters/x may import emitters).
func sameFamily(pkg, dep string) bool {
	return strings.SplitN(pkg, "/", 2)[0] == strings.SplitN(dep, "/", 2)[0] && !under(dep, "supervisor", "actors", "agent")
}

// The rules catch what they are meant to: a fabricated module graph with
// one violation of each.
func TestImportRules(t *testing.T) {
	m := func(p string) string {
		if p == "" {
			return module
		}
		return module + "/" + p
	}
	pkgs := []listedPackage{
		{ImportPath: m("")},
		{ImportPath: m("actors"), Imports: []string{m("")}},
		// A helper by name that production code uses: not exempt.
		{ImportPath: m("stores/storetest"), Imports: []string{"testing", m("")}},
		{ImportPath: m("stores/memstore"), Imports: []string{m(""), m("stores/storetest")}, Deps: []string{"testing", m(""), m("stores/storetest")},
			XTestImports: []string{m("stores/storetest")}},
		// A helper by use, whatever its name: exempt.
		{ImportPath: m("internal/waiting"), Imports: []string{"testing", "time"}},
		{ImportPath: m("spec"), Imports: []string{m("")}, Deps: []string{m("")}, TestImports: []string{m("internal/waiting")}},
		// Imports testing, used by no test: not exempt.
		{ImportPath: m("http/client"), Imports: []string{"testing"}},
		// agent/ reaching actors/ through another package.
		{ImportPath: m("tools"), Imports: []string{m("actors")}, Deps: []string{m("actors"), m("")}},
		{ImportPath: m("agent"), Imports: []string{m("tools")}, Deps: []string{m("tools"), m("actors"), m("")}},
		// An emitter using a leaf internal utility (fine) and one that
		// reaches into the runtime (not).
		{ImportPath: m("internal/queue"), Imports: []string{"sync"}},
		{ImportPath: m("internal/runtimey"), Imports: []string{m("supervisor")}},
		{ImportPath: m("emitters"), Imports: []string{m(""), m("internal/queue"), m("internal/runtimey")}},
		// The registry reaching the actor system.
		{ImportPath: m("supervisor/registry"), Imports: []string{m("actors")}, Deps: []string{m("actors"), m("")}},
		// The run writer reaching past the root.
		{ImportPath: m("supervisor/submitted"), Imports: []string{m(""), m("stores/memstore")}},
		// The message API reaching into the run actors.
		{ImportPath: m("supervisor/hostapi"), Imports: []string{m(""), m("actors/msg"), m("actors")}},
		// The tools reaching into the runtime.
		{ImportPath: m("supervisor/spawn"), Imports: []string{m(""), m("agent"), m("supervisor")}},
		{ImportPath: m("supervisor/remote"), Imports: []string{m(""), m("agent"), m("dispatch"), m("actors")}},
		{ImportPath: m("supervisor/mcpservers"), Imports: []string{m(""), m("tools/mcp"), m("supervisor/registry"), m("agent")}},
		// An event store backend using its family's shared logic (fine)
		// and one that reaches into the HTTP client (not).
		{ImportPath: m("eventstore/internal/rollup"), Imports: []string{m("")}},
		{ImportPath: m("eventstore/memevents"), Imports: []string{m(""), m("eventstore"), m("eventstore/internal/rollup")}},
		{ImportPath: m("eventstore/sqliteevents"), Imports: []string{m(""), m("http/client")}},
		// The seam used from outside the runtime, and the plain path
		// reaching the actors.
		{ImportPath: m("internal/lean"), Imports: []string{"sync"}},
		{ImportPath: m("group"), Imports: []string{m("internal/lean")}},
		{ImportPath: m("actors/plain"), Imports: []string{m("agent")}, Deps: []string{m("agent"), m("actors")}},
		// A broker may use the wire package; an emitter may not, and the
		// wire package may not reach past the root.
		{ImportPath: m("broker/natsbroker"), Imports: []string{m(""), m("fleetwire")}},
		{ImportPath: m("emitters/x"), Imports: []string{m(""), m("fleetwire")}},
		{ImportPath: m("fleetwire"), Imports: []string{m(""), m("dispatch")}},
	}
	got := checkImports(pkgs)
	want := []string{
		"memstore depends on " + m("stores/storetest"),
		"http/client imports testing but no _test.go file imports it",
		"agent depends on " + m("actors"),
		"emitters imports " + m("internal/runtimey"),
		"supervisor/registry depends on " + m("actors"),
		"supervisor/submitted imports " + m("stores/memstore"),
		"supervisor/hostapi imports " + m("actors") + ";",
		"supervisor/spawn imports " + m("supervisor") + ";",
		"supervisor/remote imports " + m("actors") + ";",
		"supervisor/mcpservers imports " + m("agent") + ";",
		"eventstore/sqliteevents imports " + m("http/client"),
		"group imports " + m("internal/lean"),
		"actors/plain depends on " + m("actors"),
		"emitters/x imports " + m("fleetwire"),
		"fleetwire imports " + m("dispatch"),
	}
	for _, w := range want {
		if !slices.ContainsFunc(got, func(g string) bool { return strings.Contains(g, w) }) {
			t.Errorf("no problem reported like %q; got %q", w, got)
		}
	}
	if len(got) != len(want) {
		t.Errorf("got %d problems, want %d: %q", len(got), len(want), got)
	}
}
