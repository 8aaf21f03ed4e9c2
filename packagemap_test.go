package svc_test

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// architectureDoc is the document whose package map and names the tests
// below keep true.
const architectureDoc = "docs/architecture.md"

// mapRow is one row of the package map: a package (relative to the
// module, "" for the root) and the module packages it may import, as
// written ("svc", a path, or "dir/*").
type mapRow struct {
	pkg  string
	may  []string
	line int
	owns string
}

// parsePackageMap reads the table under "## Package map": its rows, and
// one message per row it cannot read.
func parsePackageMap(text string) ([]mapRow, []string) {
	var rows []mapRow
	var problems []string
	in := false
	for i, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "## ") {
			in = line == "## Package map"
			continue
		}
		if !in || !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		at := fmt.Sprintf("%s:%d", architectureDoc, i+1)
		if len(cells) != 3 {
			problems = append(problems, fmt.Sprintf("%s: a row of the package map has %d cells, want 3 (package | owns | may import)", at, len(cells)))
			continue
		}
		pkg, ok := ticked(strings.TrimSpace(cells[0]))
		if !ok {
			problems = append(problems, fmt.Sprintf("%s: the package cell %q is not one `path`", at, cells[0]))
			continue
		}
		r := mapRow{pkg: modRel(pkg), line: i + 1, owns: strings.TrimSpace(cells[1])}
		if r.owns == "" {
			problems = append(problems, fmt.Sprintf("%s: row `%s` says nothing of what it owns", at, pkg))
		}
		if may := strings.TrimSpace(cells[2]); may != "nothing" {
			for _, item := range strings.Split(may, ", ") {
				p, ok := ticked(item)
				if !ok {
					problems = append(problems, fmt.Sprintf("%s: row `%s`: %q in the may-import column is not one `path` (write `svc`, `dir/pkg`, `dir/*` or nothing)", at, pkg, item))
					continue
				}
				r.may = append(r.may, p)
			}
		}
		rows = append(rows, r)
	}
	return rows, problems
}

// ticked returns s without its backticks when s is one backticked word.
func ticked(s string) (string, bool) {
	if len(s) < 3 || s[0] != '`' || s[len(s)-1] != '`' || strings.ContainsAny(s[1:len(s)-1], "` ") {
		return "", false
	}
	return s[1 : len(s)-1], true
}

// modRel is a package as the map writes it, relative to the module: the
// root, named `svc` there, is "".
func modRel(p string) string {
	if p == "svc" {
		return ""
	}
	return p
}

// mapName is a package as the map writes it.
func mapName(rel string) string {
	if rel == "" {
		return "svc"
	}
	return rel
}

// allows reports whether the written entry item covers the package rel.
func allows(item, rel string) bool {
	if dir, ok := strings.CutSuffix(item, "/*"); ok {
		return strings.HasPrefix(rel, dir+"/")
	}
	return modRel(item) == rel
}

// checkPackageMap compares the map's rows with the module's packages and
// returns one message per difference, each saying what to change.
func checkPackageMap(rows []mapRow, pkgs []listedPackage) []string {
	own := func(p string) bool { return p == module || strings.HasPrefix(p, module+"/") }
	rel := func(p string) string { return strings.TrimPrefix(strings.TrimPrefix(p, module), "/") }
	imports := map[string][]string{} // rel → the module packages it imports, as rel
	var all []string
	for _, p := range pkgs {
		r := rel(p.ImportPath)
		all = append(all, r)
		imports[r] = []string{}
		for _, imp := range p.Imports {
			if own(imp) {
				imports[r] = append(imports[r], rel(imp))
			}
		}
	}
	var problems []string
	fail := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	column := func(deps []string) string {
		if len(deps) == 0 {
			return "nothing"
		}
		var s []string
		for _, d := range deps {
			s = append(s, "`"+mapName(d)+"`")
		}
		return strings.Join(s, ", ")
	}

	byPkg := map[string]mapRow{}
	for _, r := range rows {
		at := fmt.Sprintf("%s:%d", architectureDoc, r.line)
		if prev, dup := byPkg[r.pkg]; dup {
			fail("%s: `%s` has a second row (the first is at line %d): remove one", at, mapName(r.pkg), prev.line)
			continue
		}
		byPkg[r.pkg] = r
		deps, ok := imports[r.pkg]
		if !ok {
			fail("%s: `%s` is in the package map but not in `go list ./...`: remove its row", at, mapName(r.pkg))
			continue
		}
		for _, d := range deps {
			if !slices.ContainsFunc(r.may, func(item string) bool { return allows(item, d) }) {
				fail("%s: `%s` imports %s, which its may-import column does not allow: add `%s` to it (or drop the import)", at, mapName(r.pkg), mapName(d), mapName(d))
			}
		}
		for _, item := range r.may {
			if !slices.ContainsFunc(deps, func(d string) bool { return allows(item, d) }) {
				fail("%s: `%s` may import `%s` by the map but imports nothing it covers: remove `%s` from its may-import column", at, mapName(r.pkg), item, item)
			}
		}
	}
	for _, r := range all {
		if _, ok := byPkg[r]; !ok {
			fail("%s: `%s` (in `go list ./...`) has no row in the package map: add | `%s` | <what it owns> | %s |", architectureDoc, mapName(r), mapName(r), column(imports[r]))
		}
	}

	// The column must agree with the rules of direction: a package that
	// imported everything its row allows must break none of them. The
	// graph checked is the real one with each package's module imports
	// replaced by what its row allows (and Deps recomputed from those).
	allowed := map[string][]string{}
	for _, r := range rows {
		if _, ok := imports[r.pkg]; !ok {
			continue
		}
		for _, item := range r.may {
			for _, p := range all {
				if allows(item, p) && p != r.pkg && !slices.Contains(allowed[r.pkg], p) {
					allowed[r.pkg] = append(allowed[r.pkg], p)
				}
			}
		}
	}
	abs := func(r string) string {
		if r == "" {
			return module
		}
		return module + "/" + r
	}
	external := map[string][]string{} // rel → its external imports and deps
	for _, p := range pkgs {
		var ext []string
		for _, d := range append(slices.Clone(p.Imports), p.Deps...) {
			if !own(d) {
				ext = append(ext, d)
			}
		}
		external[rel(p.ImportPath)] = ext
	}
	var fabricated []listedPackage
	for _, p := range pkgs {
		r := rel(p.ImportPath)
		if _, ok := byPkg[r]; !ok {
			continue // reported above; its real imports are TestImportDirection's
		}
		q := listedPackage{ImportPath: p.ImportPath, TestImports: p.TestImports, XTestImports: p.XTestImports}
		for _, imp := range p.Imports {
			if !own(imp) {
				q.Imports = append(q.Imports, imp)
			}
		}
		for _, a := range allowed[r] {
			q.Imports = append(q.Imports, abs(a))
		}
		seen := map[string]bool{}
		var walk func(string)
		walk = func(x string) {
			for _, a := range allowed[x] {
				if !seen[a] {
					seen[a] = true
					q.Deps = append(q.Deps, abs(a))
					walk(a)
				}
			}
			q.Deps = append(q.Deps, external[x]...)
		}
		walk(r)
		fabricated = append(fabricated, q)
	}
	for _, p := range checkImports(fabricated) {
		at := architectureDoc
		for _, r := range rows {
			if strings.HasPrefix(p, abs(r.pkg)+" ") {
				at = fmt.Sprintf("%s:%d", architectureDoc, r.line)
			}
		}
		fail("%s: the package map allows what TestImportDirection forbids: %s (narrow that row's may-import column)", at, p)
	}
	return problems
}

// listModule runs `go list -json` over the module.
func listModule(t *testing.T, fields string) []json.RawMessage {
	t.Helper()
	out, err := exec.Command("go", "list", "-json="+fields, "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []json.RawMessage
	for dec := json.NewDecoder(strings.NewReader(string(out))); ; {
		var p json.RawMessage
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
	return pkgs
}

// TestPackageMap keeps the package map of docs/architecture.md in step
// with the module: one row per package of `go list ./...`, a may-import
// column that allows exactly what the package imports of the module (no
// entry unused), and nothing in it that the rules of direction forbid.
func TestPackageMap(t *testing.T) {
	var pkgs []listedPackage
	for _, raw := range listModule(t, "ImportPath,Imports,Deps,TestImports,XTestImports") {
		var p listedPackage
		if err := json.Unmarshal(raw, &p); err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	text, err := os.ReadFile(architectureDoc)
	if err != nil {
		t.Fatal(err)
	}
	rows, problems := parsePackageMap(string(text))
	if len(rows) == 0 {
		t.Fatalf("%s has no package map (a table under \"## Package map\")", architectureDoc)
	}
	for _, p := range append(problems, checkPackageMap(rows, pkgs)...) {
		t.Error(p)
	}
}

// The checks catch what they are meant to: a fabricated module and map
// with one mistake of each kind.
func TestPackageMapChecks(t *testing.T) {
	m := func(p string) string {
		if p == "" {
			return module
		}
		return module + "/" + p
	}
	pkgs := []listedPackage{
		{ImportPath: m("")},
		{ImportPath: m("actors"), Imports: []string{m(""), m("agent")}, Deps: []string{m(""), m("agent")}},
		{ImportPath: m("agent"), Imports: []string{m("")}, Deps: []string{m("")}},
		{ImportPath: m("stores/internal/follow"), Imports: []string{m("")}},
		{ImportPath: m("stores/internal/runlist"), Imports: []string{m("")}},
		{ImportPath: m("stores/memstore"), Imports: []string{m(""), m("stores/internal/follow")}},
		{ImportPath: m("http/client"), Imports: []string{m("")}},
		{ImportPath: m("fleetwire"), Imports: []string{m("")}},
		{ImportPath: m("llmsim"), Imports: []string{m("")}},
	}
	doc := "# A\n\n## Package map\n\n| package | owns | may import |\n|---|---|---|\n" +
		"| `svc` | the words | nothing |\n" +
		// imports agent, which its row does not allow
		"| `actors` | the actors | `svc` |\n" +
		// allows http/client, which it does not import
		"| `agent` | the loop | `svc`, `http/client` |\n" +
		"| `stores/internal/follow` | follow | `svc` |\n" +
		"| `stores/internal/runlist` | lists | `svc` |\n" +
		// a pattern that covers what it imports: fine
		"| `stores/memstore` | the store | `svc`, `stores/internal/*` |\n" +
		"| `http/client` | the client | `svc` |\n" +
		// allowed more than the rules let it, and imports it
		"| `fleetwire` | the wire | `svc`, `stores/*` |\n" +
		// gone from the module
		"| `gone` | nothing now | `svc` |\n" +
		"| `actors` | again | `svc`, `agent` |\n" +
		"| `bad` | cells | `svc` | extra |\n" +
		"\n## Next\n\n| `not/a/row` | x | y |\n"
	rows, problems := parsePackageMap(doc)
	problems = append(problems, checkPackageMap(rows, pkgs)...)
	want := []string{
		"has 4 cells, want 3",
		"`actors` imports agent, which its may-import column does not allow: add `agent`",
		"`agent` may import `http/client` by the map but imports nothing it covers: remove `http/client`",
		"`fleetwire` may import `stores/*` by the map but imports nothing it covers",
		"fleetwire imports " + m("stores/internal/follow") + "; the fleet's wire format imports only the root",
		"fleetwire imports " + m("stores/internal/runlist") + ";",
		"fleetwire imports " + m("stores/memstore") + ";",
		"`gone` is in the package map but not in `go list ./...`: remove its row",
		"`actors` has a second row (the first is at line 8): remove one",
		"`llmsim` (in `go list ./...`) has no row in the package map: add | `llmsim` | <what it owns> | `svc` |",
	}
	for _, w := range want {
		if !slices.ContainsFunc(problems, func(g string) bool { return strings.Contains(g, w) }) {
			t.Errorf("no problem reported like %q; got:\n%s", w, strings.Join(problems, "\n"))
		}
	}
	if len(problems) != len(want) {
		t.Errorf("got %d problems, want %d:\n%s", len(problems), len(want), strings.Join(problems, "\n"))
	}
	if len(rows) != 10 {
		t.Errorf("read %d rows, want 10 (the row after the table's section is not one)", len(rows))
	}
}

// goDecls are the names a module's Go code declares, for checking the
// names docs/architecture.md draws.
type goDecls struct {
	byName map[string][]string                   // package name → package dirs
	top    map[string]map[string]bool            // dir → top-level names
	member map[string]map[string]map[string]bool // dir → type → fields and methods
	embeds map[string]map[string][]string        // dir → type → embedded types of the same package
	types  map[string][]string                   // type name → dirs declaring it
}

func loadDecls(t *testing.T) *goDecls {
	t.Helper()
	d := &goDecls{byName: map[string][]string{}, top: map[string]map[string]bool{},
		member: map[string]map[string]map[string]bool{}, embeds: map[string]map[string][]string{}, types: map[string][]string{}}
	for _, raw := range listModule(t, "Dir,Name,GoFiles") {
		var p struct {
			Dir, Name string
			GoFiles   []string
		}
		if err := json.Unmarshal(raw, &p); err != nil {
			t.Fatal(err)
		}
		if p.Name == "main" || len(p.GoFiles) == 0 {
			continue
		}
		d.byName[p.Name] = append(d.byName[p.Name], p.Dir)
		top, mem, emb := map[string]bool{}, map[string]map[string]bool{}, map[string][]string{}
		d.top[p.Dir], d.member[p.Dir], d.embeds[p.Dir] = top, mem, emb
		add := func(typ, name string) {
			if mem[typ] == nil {
				mem[typ] = map[string]bool{}
			}
			mem[typ][name] = true
		}
		fields := func(typ string, list *ast.FieldList) {
			for _, f := range list.List {
				for _, n := range f.Names {
					add(typ, n.Name)
				}
				if len(f.Names) == 0 {
					x := f.Type
					if s, ok := x.(*ast.StarExpr); ok {
						x = s.X
					}
					switch e := x.(type) {
					case *ast.Ident:
						add(typ, e.Name)
						emb[typ] = append(emb[typ], e.Name)
					case *ast.SelectorExpr:
						add(typ, e.Sel.Name)
					case *ast.IndexExpr:
						if id, ok := e.X.(*ast.Ident); ok {
							add(typ, id.Name)
							emb[typ] = append(emb[typ], id.Name)
						}
					}
				}
			}
		}
		fset := token.NewFileSet()
		for _, name := range p.GoFiles {
			f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			for _, decl := range f.Decls {
				switch decl := decl.(type) {
				case *ast.FuncDecl:
					if decl.Recv == nil {
						top[decl.Name.Name] = true
						continue
					}
					x := decl.Recv.List[0].Type
					if s, ok := x.(*ast.StarExpr); ok {
						x = s.X
					}
					switch e := x.(type) {
					case *ast.IndexExpr:
						x = e.X
					case *ast.IndexListExpr:
						x = e.X
					}
					if id, ok := x.(*ast.Ident); ok {
						add(id.Name, decl.Name.Name)
					}
				case *ast.GenDecl:
					for _, spec := range decl.Specs {
						switch s := spec.(type) {
						case *ast.ValueSpec:
							for _, n := range s.Names {
								top[n.Name] = true
							}
						case *ast.TypeSpec:
							top[s.Name.Name] = true
							d.types[s.Name.Name] = append(d.types[s.Name.Name], p.Dir)
							switch ty := s.Type.(type) {
							case *ast.StructType:
								fields(s.Name.Name, ty.Fields)
							case *ast.InterfaceType:
								fields(s.Name.Name, ty.Methods)
							case *ast.Ident:
								emb[s.Name.Name] = append(emb[s.Name.Name], ty.Name)
							}
						}
					}
				}
			}
		}
	}
	return d
}

// has reports whether type typ of the package in dir has the field or
// method name, its own or promoted from a type it embeds.
func (d *goDecls) has(dir, typ, name string) bool {
	seen := map[string]bool{}
	var walk func(string) bool
	walk = func(t string) bool {
		if seen[t] {
			return false
		}
		seen[t] = true
		if d.member[dir][t][name] {
			return true
		}
		return slices.ContainsFunc(d.embeds[dir][t], walk)
	}
	return walk(typ)
}

// resolve says whether the dotted name (pkg.Name, pkg.Type.Member or
// Type.Member) is declared, and whether it is a name of the module's code
// at all (its first part a package or a type of the module).
func (d *goDecls) resolve(name string) (found, ours bool) {
	parts := strings.Split(name, ".")
	if dirs, ok := d.byName[parts[0]]; ok {
		return slices.ContainsFunc(dirs, func(dir string) bool {
			if len(parts) == 2 {
				return d.top[dir][parts[1]]
			}
			return d.top[dir][parts[1]] && d.has(dir, parts[1], parts[2])
		}), true
	}
	if dirs, ok := d.types[parts[0]]; ok && len(parts) == 2 {
		return slices.ContainsFunc(dirs, func(dir string) bool { return d.has(dir, parts[0], parts[1]) }), true
	}
	return false, false
}

var (
	tickSpanRE = regexp.MustCompile("`([^`]+)`")
	// a Go name in backticks: pkg.Name, pkg.Type.Member, Type.Member,
	// maybe with a pointer star or a call after it
	tickedNameRE = regexp.MustCompile(`^\*?([A-Za-z_]\w*(?:\.[A-Za-z_]\w*){1,2})(?:\(.*\))?$`)
	// a dotted name in a drawing
	drawnNameRE = regexp.MustCompile(`[A-Za-z_]\w*(?:\.[A-Za-z_]\w*){1,2}`)
	// file names, not Go names
	fileExtRE = regexp.MustCompile(`\.(go|md|yaml|json)$`)
)

// TestArchitectureNames: every Go name docs/architecture.md gives, in
// backticks or in its drawings (pkg.Name, pkg.Type.Member, Type.Member,
// with pkg a package and Type a type of the module), is declared in the
// module, so a reader can find each one and a rename cannot leave the
// document behind.
func TestArchitectureNames(t *testing.T) {
	d := loadDecls(t)
	text, err := os.ReadFile(architectureDoc)
	if err != nil {
		t.Fatal(err)
	}
	problems, checked := archNameProblems(d, string(text))
	for _, p := range problems {
		t.Error(p)
	}
	t.Logf("%d names checked", checked)
	if checked < 50 {
		t.Errorf("checked only %d names of %s; is the parsing broken?", checked, architectureDoc)
	}
	// The check itself: a name that is not declared is reported.
	if p, _ := archNameProblems(d, "`supervisor.Runtime.Rnu` and\n```\n agent.Rnu here\n```\n"); len(p) != 2 {
		t.Errorf("misspelt names not reported: %q", p)
	}
}

func archNameProblems(d *goDecls, text string) (problems []string, checked int) {
	check := func(line int, name string) {
		found, ours := d.resolve(name)
		if !ours {
			return
		}
		checked++
		if !found {
			problems = append(problems, fmt.Sprintf("%s:%d: names %s, which the module does not declare: fix the name or the text", architectureDoc, line, name))
		}
	}
	fenced := false
	for i, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			for _, m := range tickSpanRE.FindAllStringSubmatch(line, -1) {
				if n := tickedNameRE.FindStringSubmatch(m[1]); n != nil && !fileExtRE.MatchString(n[1]) {
					check(i+1, n[1])
				}
			}
			continue
		}
		for _, loc := range drawnNameRE.FindAllStringIndex(line, -1) {
			name := line[loc[0]:loc[1]]
			before, after := byte(' '), byte(' ')
			if loc[0] > 0 {
				before = line[loc[0]-1]
			}
			if loc[1] < len(line) {
				after = line[loc[1]]
			}
			// part of a path, a file name or a subject, not a Go name
			if before == '/' || before == '.' || after == '.' || after == '/' || fileExtRE.MatchString(name) {
				continue
			}
			check(i+1, name)
		}
	}
	sort.Strings(problems)
	return problems, checked
}
