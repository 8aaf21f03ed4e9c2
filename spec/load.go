// Package spec loads and validates the YAML specs of a specs directory:
// agents (DIR/agents/*.yaml), the templates they share
// (DIR/templates/*.yaml), groups of agents (DIR/groups/*.yaml) and
// runtime options (DIR/runtime.yaml). Every problem is reported with its
// file, line and key. Watch reloads a directory when its files change.
package spec

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/svc-dev/svc"
)

// Env is what specs are checked against: the names they may use.
type Env struct {
	// Tools are the registered function tools, by name.
	Tools map[string]svc.Tool
	// Builtins are the builtin tool names available (spawn_agents, ...).
	Builtins []string
	// CheckModel, when set, reports whether a provider:name identifier
	// resolves (a known provider, a model it serves).
	CheckModel func(id string) error
	// Agents are the names of agents defined elsewhere (registered from
	// Go) that groups may use besides the agents of the specs directory.
	// With any, a directory without agents or groups is not an error.
	Agents []string
	// CheckAgent, when set, is what the runtime that will run the agents
	// refuses at registration (app.SpecEnv gives the runtime's own
	// compile), run on every agent the file checks found no fault with.
	// Load and Validate both apply it, so what `svc validate` accepts
	// `svc serve` registers.
	CheckAgent func(svc.Agent) error
	// CheckSettings, when set, asks the providers of models (the model,
	// then the fallbacks) about model_settings. It runs on a file whose
	// other faults keep CheckAgent from running, so that its bad settings
	// are reported in the same pass (app.SpecEnv gives the runtime's).
	CheckSettings func(models []string, settings map[string]any) error
	// RuntimeOptions, when set, is given runtime.yaml's options (the
	// defaults without the file) and returns those the runtime will run
	// with (app.Options.RuntimeOptions): the names agents give in
	// model_settings.rate_limit are checked against its rate_limits.
	RuntimeOptions func(fromSpecs svc.Options) svc.Options

	// templates are the templates of the directory by name, set by scan
	// before the agents are decoded.
	templates map[string]templateEntry

	// limits are the names of the runtime's rate_limits, set by scan once
	// runtime.yaml has decoded; nil when it did not (its own errors say
	// why), and then the names are not checked.
	limits map[string]bool
}

// templateEntry is a template file's outcome: the template, nil when the
// file has errors.
type templateEntry struct {
	tmpl *svc.AgentTemplate
	file string
}

// Set is the content of a specs directory.
type Set struct {
	// Dir is the directory as given.
	Dir string
	// Agents are sorted by file name, which is their name.
	Agents []svc.Agent
	// Files maps each agent's name to its file.
	Files map[string]string
	// Groups are sorted by file name, which is their name. Agents and
	// groups have separate namespaces: a group may share an agent's name.
	Groups []svc.Group
	// GroupFiles maps each group's name to its file.
	GroupFiles map[string]string
	// Templates are sorted by file name, which is their name. The agents
	// above have their template applied already.
	Templates []svc.AgentTemplate
	// Options are the runtime options of runtime.yaml, or the defaults
	// when there is none (HasOptions false).
	Options    svc.Options
	HasOptions bool
}

// FileResult is the outcome of checking one file; Err nil means it is fine.
type FileResult struct {
	File string
	Err  error
}

// Layout of a specs directory.
const (
	AgentsDir    = "agents"
	GroupsDir    = "groups"
	TemplatesDir = "templates"
	RuntimeFile  = "runtime.yaml"
)

// Load reads every spec under dir. It is all or nothing: when any file has
// a problem it returns no Set and an errors.Join of *Error values, each
// naming its file. A dir that is missing or not a directory gives an error
// for which IsRootError holds.
func Load(dir string, env Env) (*Set, error) {
	sc, err := scan(dir, env)
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, r := range sc.results {
		for _, e := range r.errs {
			errs = append(errs, e)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	set := &Set{Dir: dir, Files: map[string]string{}, GroupFiles: map[string]string{}, Options: sc.options, HasOptions: sc.hasOptions}
	for _, r := range sc.results {
		switch {
		case r.agent != nil:
			set.Agents = append(set.Agents, *r.agent)
			set.Files[r.agent.Name] = r.file
		case r.group != nil:
			set.Groups = append(set.Groups, *r.group)
			set.GroupFiles[r.group.Name] = r.file
		case r.template != nil:
			set.Templates = append(set.Templates, *r.template)
		}
	}
	return set, nil
}

// Validate checks every spec under dir and reports on each file:
// runtime.yaml first when there is one, then the templates, the agents and
// the groups, each by file name. Its error is only for a dir that cannot be read
// (IsRootError holds).
func Validate(dir string, env Env) ([]FileResult, error) {
	sc, err := scan(dir, env)
	if err != nil {
		return nil, err
	}
	out := make([]FileResult, len(sc.results))
	for i, r := range sc.results {
		out[i] = FileResult{File: r.file, Err: joinErrors(r.errs)}
	}
	return out, nil
}

type scanned struct {
	file  string
	agent *svc.Agent // set for a good agent file
	group *svc.Group // set for a good group file
	// template is set for a good template file.
	template *svc.AgentTemplate
	// mcpLine is the line of an agent's or group's mcp block, 0 without.
	mcpLine int
	errs    []*Error
}

type scanResult struct {
	results    []scanned
	options    svc.Options
	hasOptions bool
}

func scan(dir string, env Env) (scanResult, error) {
	info, err := os.Stat(dir)
	if err != nil {
		return scanResult{}, &rootError{dir: dir, err: err}
	}
	if !info.IsDir() {
		return scanResult{}, &rootError{dir: dir, err: errors.New("not a directory")}
	}
	sc := scanResult{options: svc.DefaultOptions()}

	rt := filepath.Join(dir, RuntimeFile)
	if _, err := os.Lstat(rt); err == nil || !errors.Is(err, fs.ErrNotExist) {
		sc.hasOptions = true
		r := scanned{file: rt}
		if data, err := readSpecFile(rt); err != nil {
			r.errs = append(r.errs, asSpecError(rt, err))
		} else if o, errs := decodeOptions(rt, data); len(errs) > 0 {
			r.errs = errs
		} else {
			sc.options = o
		}
		sc.results = append(sc.results, r)
	}
	if !sc.failed() {
		// The limits the runtime will have, so that an agent naming one
		// it will not have is told here, at its line, and not by the
		// runtime's refusal at start.
		o := sc.options
		if env.RuntimeOptions != nil {
			o = env.RuntimeOptions(o)
		}
		env.limits = make(map[string]bool, len(o.RateLimits))
		for name := range o.RateLimits {
			env.limits[name] = true
		}
	}

	env.templates = sc.scanTemplates(filepath.Join(dir, TemplatesDir), env)
	defined, nAgents := sc.scanAgents(filepath.Join(dir, AgentsDir), env)
	for _, name := range env.Agents {
		defined[name] = ""
	}
	nGroups := sc.scanGroups(filepath.Join(dir, GroupsDir), func(name string) bool {
		_, ok := defined[name]
		return ok
	})
	sc.checkToolNames(env.Agents)
	if nAgents == 0 && nGroups == 0 && len(env.Agents) == 0 && !sc.failed() {
		// Most often the wrong directory (the repository root, say, or a
		// typo): serving nothing is never what was meant.
		sc.results = append(sc.results, scanned{file: dir, errs: []*Error{{Msg: fmt.Sprintf(
			"no agents or groups found in %s (looked for %s and %s)", dir,
			filepath.Join(dir, AgentsDir, "*.yaml"), filepath.Join(dir, GroupsDir, "*.yaml")), cause: ErrNoSpecs}}})
	}
	return sc, nil
}

// checkToolNames refuses two agents or groups that `svc mcp` would list
// under one tool name (an mcp.name, or a default such as an agent named
// group_x beside a group x), at the second one's mcp block. goAgents,
// registered from Go, keep their default names.
func (sc *scanResult) checkToolNames(goAgents []string) {
	owner := map[string]string{} // tool name → "agent NAME (FILE)"
	for _, n := range goAgents {
		owner[n] = "agent " + n + " (registered from Go)"
	}
	for i := range sc.results {
		r := &sc.results[i]
		var x svc.MCPExposure
		var what, tool string
		switch {
		case r.agent != nil:
			x, what, tool = r.agent.MCP, "agent "+r.agent.Name, r.agent.Name
		case r.group != nil:
			x, what, tool = r.group.MCP, "group "+r.group.Name, "group_"+r.group.Name
		default:
			continue
		}
		if !x.Exposed() {
			continue
		}
		if x.Name != "" {
			tool = x.Name
		}
		if other, dup := owner[tool]; dup {
			r.errs = append(r.errs, &Error{File: r.file, Line: r.mcpLine, Key: "mcp.name",
				Msg: fmt.Sprintf("MCP tool name %q is already that of %s: give one of them another mcp.name (or expose: false)", tool, other)})
			r.agent, r.group = nil, nil
			continue
		}
		owner[tool] = what + " (" + r.file + ")"
	}
}

// failed reports whether any file had an error.
func (sc *scanResult) failed() bool {
	for _, r := range sc.results {
		if len(r.errs) > 0 {
			return true
		}
	}
	return false
}

// ErrNoSpecs is the cause of the error of Load and Validate for a specs
// directory without agent or group files (unless Env.Agents has some).
var ErrNoSpecs = errors.New("no agents or groups found")

// specFiles lists the spec files of sub, sorted by name, adding a result
// for sub itself when it cannot be read. A missing sub has none.
func (sc *scanResult) specFiles(sub string) []string {
	entries, err := os.ReadDir(sub)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		sc.results = append(sc.results, scanned{file: sub, errs: []*Error{{File: sub, Msg: describeFSError(err), cause: err}}})
		return nil
	}
	var files []string
	for _, e := range entries {
		name := e.Name()
		// Dot files are editor and VCS droppings (.#triage.yaml), not specs.
		if e.IsDir() || strings.HasPrefix(name, ".") || !isSpecFile(name) {
			continue
		}
		files = append(files, filepath.Join(sub, name))
	}
	return files
}

func isSpecFile(name string) bool {
	ext := filepath.Ext(name)
	return ext == ".yaml" || ext == ".yml"
}

// scanAgents decodes the agent files of sub. It returns the names they
// define, files with errors included: a group that uses an agent whose
// file has a mistake should not be told the agent does not exist; and how
// many files it found.
func (sc *scanResult) scanAgents(sub string, env Env) (map[string]string, int) {
	defined := map[string]string{} // agent name → file
	files := sc.specFiles(sub)
	for _, file := range files {
		r := scanned{file: file}
		data, err := readSpecFile(file)
		if err != nil {
			r.errs = append(r.errs, asSpecError(file, err))
			sc.results = append(sc.results, r)
			continue
		}
		dec, errs := decodeAgent(file, data, env, readSpecFile)
		r.errs = errs
		if n := dec.agent.Name; n != "" {
			if other, dup := defined[n]; dup {
				r.errs = append(r.errs, &Error{File: file, Line: dec.nameLine, Key: "name",
					Msg: "agent " + n + " is already defined in " + other})
			} else {
				defined[n] = file
			}
		}
		if len(r.errs) == 0 {
			a := dec.agent
			r.agent = &a
			r.mcpLine = dec.mcpLine
		}
		sc.results = append(sc.results, r)
	}
	return defined, len(files)
}

// scanTemplates decodes the template files of sub and returns them by
// name, those with errors too (nil), so that an agent naming one is told
// it has errors rather than that it does not exist.
func (sc *scanResult) scanTemplates(sub string, env Env) map[string]templateEntry {
	defined := map[string]templateEntry{}
	for _, file := range sc.specFiles(sub) {
		r := scanned{file: file}
		data, err := readSpecFile(file)
		if err != nil {
			r.errs = append(r.errs, asSpecError(file, err))
			sc.results = append(sc.results, r)
			defined[stemOf(file)] = templateEntry{file: file}
			continue
		}
		dec, errs := decodeTemplate(file, data, env, readSpecFile)
		r.errs = errs
		n := dec.tmpl.Name
		if len(r.errs) == 0 {
			t := dec.tmpl
			r.template = &t
		}
		if _, dup := defined[n]; n != "" && !dup {
			defined[n] = templateEntry{tmpl: r.template, file: file}
		}
		sc.results = append(sc.results, r)
	}
	return defined
}

// scanGroups decodes the group files of sub and compiles each group
// against the agents hasAgent knows. It returns how many files it found.
func (sc *scanResult) scanGroups(sub string, hasAgent func(string) bool) int {
	defined := map[string]string{} // group name → file
	files := sc.specFiles(sub)
	for _, file := range files {
		r := scanned{file: file}
		data, err := readSpecFile(file)
		if err != nil {
			r.errs = append(r.errs, asSpecError(file, err))
			sc.results = append(sc.results, r)
			continue
		}
		dec, errs := decodeGroup(file, data)
		r.errs = errs
		if dec != nil {
			if n := dec.group.Name; n != "" {
				if other, dup := defined[n]; dup {
					r.errs = append(r.errs, &Error{File: file, Line: dec.nameLine, Key: "name",
						Msg: "group " + n + " is already defined in " + other})
				} else {
					defined[n] = file
				}
			}
			// A file that is not the right shape would only give
			// compile errors that echo its mistakes (an edge left out
			// for its bad type leaves a node with no way in, say).
			if len(r.errs) == 0 {
				r.errs = compileGroup(file, dec, hasAgent)
			}
			if len(r.errs) == 0 {
				g := dec.group
				r.group = &g
				if n, ok := dec.at["mcp"]; ok {
					r.mcpLine = n.Line
				}
			}
		}
		sc.results = append(sc.results, r)
	}
	return len(files)
}

// asSpecError returns err as an *Error about file.
func asSpecError(file string, err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{File: file, Msg: describeFSError(err), cause: err}
}

// describeFSError drops the path from an fs error: the *Error names it.
func describeFSError(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// joinErrors returns nil, the single error, or errors.Join of several.
func joinErrors(errs []*Error) error {
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	es := make([]error, len(errs))
	for i, e := range errs {
		es[i] = e
	}
	return errors.Join(es...)
}
