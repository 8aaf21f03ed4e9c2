package svc_test

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/svc-dev/svc"

// TestImportDirection enforces the rules of direction in DESIGN.md: the root
// package imports none of the others; http/server reaches the runtime only
// through svc.Backend; stores, emitters and brokers import only the root;
// no production package imports testing (the *test contract-suite packages
// exist to be imported by tests, so they may).
func TestImportDirection(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	own := func(p string) bool { return p == module || strings.HasPrefix(p, module+"/") }
	rel := func(p string) string { return strings.TrimPrefix(strings.TrimPrefix(p, module), "/") }
	isSuite := func(p string) bool { return strings.HasSuffix(p, "test") && !strings.HasSuffix(p, "/testmodel") }
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg, imports := rel(fields[0]), fields[1:]
		checked++
		for _, imp := range imports {
			if imp == "testing" && !isSuite(pkg) {
				t.Errorf("%s imports testing; only *test suite packages may", fields[0])
			}
			if !own(imp) {
				continue
			}
			dep := rel(imp)
			switch {
			case pkg == "":
				t.Errorf("the root package imports %s; it must import none of the others", imp)
			case pkg == "http/server" && dep != "":
				t.Errorf("http/server imports %s; it must reach the runtime only through svc.Backend", imp)
			case helper(pkg) && dep != "":
				t.Errorf("%s imports %s; a helper the backends share imports only the root", fields[0], imp)
			case under(pkg, "stores", "emitters", "broker") && dep != "" && !isSuite(dep) && !sameFamily(pkg, dep) && !helper(dep):
				t.Errorf("%s imports %s; stores, emitters and brokers import only the root", fields[0], imp)
			}
		}
	}
	if checked < 5 {
		t.Fatalf("go list saw only %d packages", checked)
	}
}

// helper is a module-internal package the backends may share (the SQLite
// opener, test doubles); it imports nothing of the module's but the root.
func helper(dep string) bool { return under(dep, "internal/sqlitedb", "internal/faultstore") }

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
