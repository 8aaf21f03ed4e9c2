package spec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/schema"
)

var agentKeys = []string{
	"version", "name", "template", "model", "fallback_models", "instructions", "input_type", "output_type",
	"tools", "mcp_servers", "builtin_tools", "model_settings", "trust_level", "context_passer", "mcp",
	"approval", "approval_timeout_seconds", "approval_timeout_action",
}

// templateKeys are the keys of a template file: what agents share, and
// pre_instruction in place of instructions. No template key: templates
// do not name templates.
var templateKeys = []string{
	"version", "name", "model", "fallback_models", "pre_instruction",
	"tools", "mcp_servers", "builtin_tools", "model_settings", "trust_level",
}

// exposureKeys are the keys of the mcp block of an agent or group.
var exposureKeys = []string{"expose", "name", "description"}

var mcpKeys = []string{"name", "transport", "command", "args", "env", "url", "prefix", "timeout_seconds", "idempotent", "approval"}

// MCP transports (svc.MCPStdio and friends, by their older names here).
const (
	TransportStdio = svc.MCPStdio
	TransportHTTP  = svc.MCPHTTP
	TransportSSE   = svc.MCPSSE
)

// agentDecoder turns one agent file into an svc.Agent.
type agentDecoder struct {
	*decoder
	env Env
	// readFile reads $ref'd schema files; tests and the fuzz target swap it.
	readFile func(path string) ([]byte, error)
	root     *yaml.Node
	fs       map[string]field
	// lists holds the decoded string lists by key.
	lists map[string][]item
	// template is set when the file is a template's, not an agent's.
	template bool
	// tmpl is the template the agent names, when it names one that
	// loaded; tmplAt is where it named it.
	tmpl   *svc.AgentTemplate
	tmplAt *yaml.Node
	// at maps the field paths of svc.Agent.Validate ("tools[1]",
	// "mcp_servers[0].url") to where they were written, so its errors
	// are reported at their line under the key as written (a tool left
	// out of Agent.Tools shifts the indexes of the ones after it).
	at map[string]item
}

// decodedAgent is an agent and where its name came from, for duplicate
// reports.
type decodedAgent struct {
	agent    svc.Agent
	nameLine int
	// mcpLine is the line of the mcp block, 0 without one.
	mcpLine int
}

// decodeAgent decodes the agent spec data, read from file. The agent is
// usable only when there are no errors.
func decodeAgent(file string, data []byte, env Env, readFile func(string) ([]byte, error)) (decodedAgent, []*Error) {
	out, _, errs := decodeSpec(file, data, env, readFile, false)
	return out, errs
}

// decodedTemplate is a template and where its name came from.
type decodedTemplate struct {
	tmpl     svc.AgentTemplate
	nameLine int
}

// decodeTemplate decodes a template file (templates/NAME.yaml): the keys
// of an agent that agents share, with the same checks, but no model
// required and pre_instruction in place of instructions.
func decodeTemplate(file string, data []byte, env Env, readFile func(string) ([]byte, error)) (decodedTemplate, []*Error) {
	out, pre, errs := decodeSpec(file, data, env, readFile, true)
	a := out.agent
	return decodedTemplate{nameLine: out.nameLine, tmpl: svc.AgentTemplate{
		Name: a.Name, Model: a.Model, FallbackModels: a.FallbackModels, ModelSettings: a.ModelSettings,
		Tools: a.Tools, MCPServers: a.MCPServers, BuiltinTools: a.BuiltinTools, TrustLevel: a.TrustLevel,
		PreInstruction: pre,
	}}, errs
}

// decodeSpec decodes an agent file, or a template file when template is
// set (then it returns the pre_instruction too).
func decodeSpec(file string, data []byte, env Env, readFile func(string) ([]byte, error), template bool) (decodedAgent, string, []*Error) {
	what := "an agent spec: a mapping starting with version: 1"
	if template {
		what = "a template spec: a mapping starting with version: 1"
	}
	root, perr := parseMapping(file, data, what)
	if perr != nil {
		return decodedAgent{}, "", []*Error{perr}
	}
	d := &agentDecoder{
		decoder:  newDecoder(file, len(data)),
		env:      env,
		readFile: readFile,
		root:     root,
		lists:    map[string][]item{},
		at:       map[string]item{},
		template: template,
	}
	keys := agentKeys
	if template {
		keys = templateKeys
	}
	d.fs = d.fields(root, "", keys)
	d.version(root, d.fs)

	out := decodedAgent{nameLine: root.Line}
	a := &out.agent
	stem := stemOf(file)
	a.Name = stem
	if f, ok := d.get("name"); ok {
		out.nameLine = f.val.Line
		d.mark("name", f.val)
		if name, ok := d.str(f.val, "name"); ok {
			a.Name = name
			if name != stem {
				what := "an agent's"
				if template {
					what = "a template's"
				}
				d.fail(f.val, "name", "%q does not match the file name %s: %s file is named after it", name, filepath.Base(file), what)
			}
		}
	}
	if f, ok := d.get("template"); ok {
		d.useTemplate(f.val)
	}
	if f, ok := d.get("model"); ok {
		d.mark("model", f.val)
		a.Model, _ = d.str(f.val, "model")
	} else if !template && !d.failed("template") && (d.tmpl == nil || d.tmpl.Model == "") {
		msg := "missing: name the model as provider:name, e.g. `model: test:echo`"
		if d.tmpl != nil {
			msg += " (template " + d.tmpl.Name + " names none)"
		}
		d.fail(root, "model", "%s", msg)
	}
	if f, ok := d.get("fallback_models"); ok {
		d.lists["fallback_models"] = d.strList(f.val, "fallback_models")
		for _, it := range d.lists["fallback_models"] {
			d.at[fmt.Sprintf("fallback_models[%d]", len(a.FallbackModels))] = it
			a.FallbackModels = append(a.FallbackModels, it.Value)
		}
	}
	if f, ok := d.get("instructions"); ok {
		a.Instructions, _ = d.str(f.val, "instructions")
	}
	var pre string
	if f, ok := d.get("pre_instruction"); ok {
		pre, _ = d.str(f.val, "pre_instruction")
	}
	if f, ok := d.get("trust_level"); ok {
		d.mark("trust_level", f.val)
		if s, ok := d.str(f.val, "trust_level"); ok {
			a.TrustLevel = svc.TrustLevel(s)
		}
	} else if d.tmpl != nil {
		// The tools are checked against the level the agent will have.
		a.TrustLevel = d.tmpl.TrustLevel
	}
	if f, ok := d.get("context_passer"); ok {
		d.mark("context_passer", f.val)
		if r := resolve(f.val); r.Kind == yaml.ScalarNode && r.ShortTag() == "!!str" {
			a.ContextPasser = r.Value // Validate rejects anything but "full"
		} else {
			d.fail(f.val, "context_passer", "want null or \"full\", got %s", describe(f.val))
		}
	}
	a.InputType = d.schema("input_type")
	a.OutputType = d.schema("output_type")
	a.Tools = d.tools(a)
	if f, ok := d.get("mcp_servers"); ok {
		a.MCPServers = d.mcpServers(f.val)
	}
	a.BuiltinTools = d.builtins()
	if f, ok := d.get("model_settings"); ok {
		d.mark("model_settings", f.val) // CheckAgent's model_settings.KEY errors
		if resolve(f.val).Kind != yaml.MappingNode {
			d.fail(f.val, "model_settings", "want a mapping, got %s", describe(f.val))
		} else if v, ok := d.goValue(f.val, "model_settings"); ok {
			a.ModelSettings = v.(map[string]any)
		}
	}

	d.approval(a)
	if f, ok := d.get("mcp"); ok {
		d.mark("mcp", f.val)
		out.mcpLine = f.key.Line
		a.MCP = d.exposure(f.val)
	}
	own := a.ModelSettings
	if d.tmpl != nil {
		d.applyTemplate(a)
	}

	// The rules of an agent are svc.Agent.Validate's; what this decoder
	// checks itself is the file's shape and the names the environment
	// knows (tools, builtins, models, schema files).
	err := a.Validate()
	if _, own := d.get("model"); !own && (template || d.failed("template")) {
		// A template need not name one; an agent whose template is at
		// fault is told so at its template key.
		err = dropField(err, "model")
	}
	d.report(err)
	d.checkModels(a)
	switch {
	case template:
		// Not an agent: the runtime's compile is for the agents that use it.
		d.checkSettings(a)
	case len(d.errs) == 0 && d.env.CheckAgent != nil:
		d.checkAgent(*a)
	case len(d.errs) > 0:
		d.checkSettings(a)
	}
	// After CheckAgent, which runs only on a file without faults: the
	// file's other faults are reported in the same pass. The template's
	// own settings were checked in its file.
	d.rateLimit(own)

	return out, pre, d.finish()
}

// approval decodes approval (a list of tool names, or "all") and its
// timeout keys.
func (d *agentDecoder) approval(a *svc.Agent) {
	if f, ok := d.get("approval"); ok {
		d.mark("approval", f.val)
		if r := resolve(f.val); r != nil && r.Kind == yaml.ScalarNode && r.ShortTag() == "!!str" {
			if r.Value != "all" {
				d.fail(f.val, "approval", "want a list of tool names or \"all\", got %q", r.Value)
			} else {
				a.Approval = []string{svc.ApprovalAll}
			}
		} else {
			for _, it := range d.strList(f.val, "approval") {
				d.at[fmt.Sprintf("approval[%d]", len(a.Approval))] = it
				a.Approval = append(a.Approval, it.Value)
			}
		}
	}
	if f, ok := d.get("approval_timeout_seconds"); ok {
		d.mark("approval_timeout_seconds", f.val)
		if v, ok := d.number(f.val, "approval_timeout_seconds"); ok {
			a.ApprovalTimeoutSeconds = v
		}
	}
	if f, ok := d.get("approval_timeout_action"); ok {
		d.mark("approval_timeout_action", f.val)
		a.ApprovalTimeoutAction, _ = d.str(f.val, "approval_timeout_action")
	}
}

// useTemplate looks up the template an agent names. An unknown template,
// or one whose file has errors, is reported at the agent's template key.
func (d *agentDecoder) useTemplate(n *yaml.Node) {
	d.mark("template", n)
	name, ok := d.str(n, "template")
	if !ok {
		return
	}
	t, ok := d.env.templates[name]
	switch {
	case !ok:
		names := make([]string, 0, len(d.env.templates))
		for n := range d.env.templates {
			names = append(names, n)
		}
		d.fail(n, "template", "unknown template %q (%s)", name, known(names, "known templates", "there is no "+TemplatesDir+"/*.yaml"))
	case t.tmpl == nil:
		d.fail(n, "template", "template %s has errors (see %s)", name, t.file)
	default:
		d.tmpl, d.tmplAt = t.tmpl, n
	}
}

// applyTemplate puts the template under the agent (svc.AgentTemplate.Apply:
// the agent's fields win; a list the file gives, even empty, replaces the
// template's). The fields that came from the template are located at the
// agent's template key, and the template's tools are checked against the
// agent's trust level.
func (d *agentDecoder) applyTemplate(a *svc.Agent) {
	if _, ok := d.get("fallback_models"); ok && a.FallbackModels == nil {
		a.FallbackModels = []string{}
	}
	if _, ok := d.get("tools"); ok && a.Tools == nil {
		a.Tools = []svc.Tool{}
	}
	if _, ok := d.get("mcp_servers"); ok && a.MCPServers == nil {
		a.MCPServers = []svc.MCPServer{}
	}
	if _, ok := d.get("builtin_tools"); ok && a.BuiltinTools == nil {
		a.BuiltinTools = []string{}
	}
	for _, k := range []string{"model", "fallback_models", "tools", "mcp_servers", "builtin_tools", "trust_level"} {
		if _, ok := d.get(k); !ok {
			d.at[k] = item{Node: d.tmplAt, Key: "template"}
		}
	}
	if _, ok := d.get("tools"); !ok {
		trust := a.Trust()
		for _, t := range d.tmpl.Tools {
			if trust.Valid() && !trust.Allows(t.Access()) {
				at, key := d.tmplAt, "template"
				if f, ok := d.get("trust_level"); ok {
					at, key = f.val, "trust_level"
				}
				d.fail(at, key, "tool %s of template %s needs %s access; %s", t.Name(), d.tmpl.Name, t.Access(), trustAdvice(a, t.Access()))
			}
		}
	}
	*a = d.tmpl.Apply(*a)
}

// dropField removes the *svc.FieldError of field from an error of
// svc.Agent.Validate.
func dropField(err error, field string) error {
	if err == nil {
		return nil
	}
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	var keep []error
	for _, e := range errs {
		var fe *svc.FieldError
		if errors.As(e, &fe) && fe.Field == field {
			continue
		}
		keep = append(keep, e)
	}
	return errors.Join(keep...)
}

// exposure decodes the mcp block of an agent or group:
// {expose: bool, name: tool name, description: text}.
func (d *decoder) exposure(n *yaml.Node) svc.MCPExposure {
	var out svc.MCPExposure
	if resolve(n).Kind != yaml.MappingNode {
		d.fail(n, "mcp", "want a mapping {expose: true|false, name: TOOL, description: TEXT}, got %s", describe(n))
		return out
	}
	fs := d.fields(resolve(n), "mcp", exposureKeys)
	if f, ok := fs["expose"]; ok && !isNull(f.val) {
		if b, ok := d.boolean(f.val, "mcp.expose"); ok {
			out.Expose = &b
		}
	}
	if f, ok := fs["name"]; ok && !isNull(f.val) {
		if s, ok := d.str(f.val, "mcp.name"); ok {
			if !svc.ValidMCPToolName(s) {
				d.fail(f.val, "mcp.name", "%q: an MCP tool name is 1 to 128 of A-Z a-z 0-9 _ - .", s)
			} else {
				out.Name = s
			}
		}
	}
	if f, ok := fs["description"]; ok && !isNull(f.val) {
		out.Description, _ = d.str(f.val, "mcp.description")
	}
	return out
}

// rateLimit checks that model_settings.rate_limit names a limit of the
// runtime's rate_limits (when scan knows them). A value that is not a
// name is left to CheckAgent, whose compile says what it wants.
func (d *agentDecoder) rateLimit(ms map[string]any) {
	name, ok := ms["rate_limit"].(string)
	if !ok || name == "" || d.env.limits == nil || d.env.limits[name] {
		return
	}
	f, _ := d.get("model_settings")
	n := f.val
	if at := settingNode(f.val, "rate_limit"); at != nil {
		n = at
	}
	names := make([]string, 0, len(d.env.limits))
	for l := range d.env.limits {
		names = append(names, l)
	}
	d.fail(n, "model_settings.rate_limit", "no limit %q in the runtime's rate_limits (%s)", name,
		known(names, RuntimeFile+" declares", RuntimeFile+" declares none"))
}

// get returns a key's field when the key is present and not null; null
// means "not set" for every optional key.
func (d *agentDecoder) get(key string) (field, bool) {
	f, ok := d.fs[key]
	if !ok || isNull(f.val) {
		return field{}, false
	}
	return f, true
}

func stemOf(file string) string {
	base := filepath.Base(file)
	return strings.TrimSuffix(base, filepath.Ext(base))
}

// tools looks the tool names up in the environment and checks each against
// the agent's trust level, which is why it runs after trust_level is read.
func (d *agentDecoder) tools(a *svc.Agent) []svc.Tool {
	f, ok := d.get("tools")
	if !ok {
		return nil
	}
	items := d.strList(f.val, "tools")
	d.lists["tools"] = items
	trust := a.Trust()
	// A template without a trust level leaves it to its agents: its
	// tools are checked against each agent's level (applyTemplate).
	checkTrust := !d.template || a.TrustLevel != ""
	var out []svc.Tool
	for _, it := range items {
		t := d.env.Tools[it.Value]
		if t == nil {
			d.fail(it.Node, it.Key, "unknown tool %q (%s)", it.Value, known(toolNames(d.env.Tools), "known tools", "no tools are registered"))
			continue
		}
		// Not a rule of svc.Agent (a Go agent may list such a tool, and
		// calling it fails with TrustViolationError): a spec is told at once.
		if checkTrust && trust.Valid() && !trust.Allows(t.Access()) {
			d.fail(it.Node, it.Key, "tool %s needs %s access; %s", it.Value, t.Access(), trustAdvice(a, t.Access()))
			continue
		}
		d.at[fmt.Sprintf("tools[%d]", len(out))] = it
		out = append(out, t)
	}
	return out
}

func toolNames(m map[string]svc.Tool) []string {
	names := make([]string, 0, len(m))
	for n, t := range m {
		if t != nil {
			names = append(names, n)
		}
	}
	return names
}

func known(names []string, label, none string) string {
	if len(names) == 0 {
		return none
	}
	names = slices.Clone(names)
	slices.Sort(names)
	return label + ": " + strings.Join(names, ", ")
}

// trustAdvice says what the agent's trust level allows and which level the
// tool needs, so the fix is in the message.
func trustAdvice(a *svc.Agent, need svc.Access) string {
	level := string(a.Trust())
	if a.TrustLevel == "" {
		level += " (the default)"
	}
	var allows string
	switch a.Trust() {
	case svc.TrustSandbox:
		allows = "allows no tools"
	case svc.TrustLow:
		allows = "allows read-only tools"
	case svc.TrustMedium:
		allows = "allows read-only and network tools"
	default:
		allows = "allows every tool"
	}
	use := fmt.Sprintf("use %s or higher", need.MinTrust())
	if need.MinTrust() == svc.TrustHigh {
		use = "use high"
	}
	return fmt.Sprintf("trust_level %s %s (%s)", level, allows, use)
}

func (d *agentDecoder) builtins() []string {
	f, ok := d.get("builtin_tools")
	if !ok {
		return nil
	}
	items := d.strList(f.val, "builtin_tools")
	d.lists["builtin_tools"] = items
	var out []string
	for _, it := range items {
		if !slices.Contains(d.env.Builtins, it.Value) {
			d.fail(it.Node, it.Key, "unknown builtin tool %q (%s)", it.Value,
				known(d.env.Builtins, "known builtin tools", "this build has no builtin tools"))
			continue
		}
		d.at[fmt.Sprintf("builtin_tools[%d]", len(out))] = it
		out = append(out, it.Value)
	}
	return out
}

// checkModels asks the environment whether each model identifier resolves.
// Identifiers that are already reported (malformed, wrong type) are skipped.
func (d *agentDecoder) checkModels(a *svc.Agent) {
	if d.env.CheckModel == nil {
		return
	}
	check := func(n *yaml.Node, key, id string) {
		if d.failed(key) {
			return
		}
		if _, _, err := svc.ParseModelID(id); err != nil {
			return
		}
		// The registry's error names the id already.
		if err := d.env.CheckModel(id); err != nil {
			d.fail(n, key, "%v", err)
		}
	}
	if f, ok := d.get("model"); ok {
		check(f.val, "model", a.Model)
	}
	for _, it := range d.lists["fallback_models"] {
		check(it.Node, it.Key, it.Value)
	}
}

// mark notes where a top-level key of svc.Agent was written.
func (d *agentDecoder) mark(key string, n *yaml.Node) {
	d.at[key] = item{Node: n, Key: key}
}

// report turns the errors of svc.Agent.Validate into errors at the line
// of the field each names, under its key as written. A field the decoder
// has already reported (or one inside it, or around it) is skipped: that
// report is the more precise, and the value Validate saw is a
// placeholder.
func (d *agentDecoder) report(err error) {
	if err == nil {
		return
	}
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	for _, e := range errs {
		var fe *svc.FieldError
		if !errors.As(e, &fe) {
			d.fail(d.root, "", "%s", e.Error()) // not expected; never dropped
			continue
		}
		n, key := d.locate(fe.Field)
		if d.reported(key) {
			continue
		}
		msg := fe.Msg
		if key == "name" && n == d.root {
			msg += " (the name comes from the file name)"
		}
		d.fail(n, key, "%s", msg)
	}
}

// locate finds where field was written: the field itself, else the
// nearest enclosing field that was ("mcp_servers[0].command", missing,
// is reported at mcp_servers[0]), else the top of the file.
func (d *agentDecoder) locate(field string) (*yaml.Node, string) {
	for k := field; k != ""; k = parentKey(k) {
		if it, ok := d.at[k]; ok {
			if it.Key == "template" {
				return it.Node, it.Key // the field came from the template
			}
			return it.Node, it.Key + field[len(k):]
		}
	}
	return d.root, field
}

// reported reports whether an error was recorded for key, for a key
// inside it, or for one enclosing it.
func (d *agentDecoder) reported(key string) bool {
	if d.failed(key) {
		return true
	}
	for k := parentKey(key); k != ""; k = parentKey(k) {
		for _, e := range d.errs {
			if e.Key == k {
				return true
			}
		}
	}
	return false
}

// schema decodes input_type or output_type: a JSON Schema written as YAML
// (a mapping, or true/false), or {$ref: file} naming a JSON or YAML file
// beside the spec, which is read and inlined.
func (d *agentDecoder) schema(key string) json.RawMessage {
	f, ok := d.get(key)
	if !ok {
		return nil
	}
	d.mark(key, f.val)
	r := resolve(f.val)
	if r.Kind == yaml.ScalarNode && r.ShortTag() == "!!bool" {
		var b bool
		_ = r.Decode(&b)
		return json.RawMessage(strconv.FormatBool(b))
	}
	if r.Kind != yaml.MappingNode {
		d.fail(f.val, key, "want a mapping (a JSON Schema), got %s", describe(f.val))
		return nil
	}

	var raw json.RawMessage
	at := f.val
	if ref, refNode, isFile := d.fileRef(r, key); refNode != nil {
		if !isFile {
			return nil // reported
		}
		at = refNode
		if raw = d.loadRef(refNode, key, ref); raw == nil {
			return nil
		}
	} else if raw, ok = d.jsonValue(f.val, key); !ok {
		return nil
	}
	if err := checkSchema(raw); err != nil {
		d.fail(at, key, "not a valid JSON Schema: %v", err)
		return nil
	}
	return raw
}

// fileRef finds a top-level $ref naming a file. It returns the $ref's value
// node when there is a $ref (nil otherwise), and whether it names a file
// that can be loaded. A "#..." reference is the schema's own business and
// is left in place.
func (d *agentDecoder) fileRef(m *yaml.Node, key string) (ref string, node *yaml.Node, isFile bool) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if k := resolve(m.Content[i]); k.Kind != yaml.ScalarNode || k.Value != "$ref" {
			continue
		}
		node = m.Content[i+1]
		ref, ok := d.str(node, key+".$ref")
		switch {
		case !ok:
			return "", node, false
		case strings.HasPrefix(ref, "#"):
			return "", nil, false
		case strings.Contains(ref, "://"):
			d.fail(node, key+".$ref", "remote schema %q is not supported: save it beside the spec and refer to the file", ref)
			return "", node, false
		case ref == "":
			d.fail(node, key+".$ref", "want a file path relative to this file")
			return "", node, false
		case len(m.Content) > 2:
			d.fail(node, key+".$ref", "a $ref to a file must be the only key of %s", key)
			return "", node, false
		}
		return ref, node, true
	}
	return "", nil, false
}

// loadRef reads the schema file ref names, relative to the spec's directory.
// Errors inside that file name that file and its lines.
func (d *agentDecoder) loadRef(n *yaml.Node, key, ref string) json.RawMessage {
	path := ref
	if !filepath.IsAbs(path) {
		path = filepath.Join(filepath.Dir(d.file), ref)
	}
	data, err := d.readFile(path)
	if err != nil {
		msg := err.Error()
		var se *Error
		if errors.As(err, &se) {
			msg = se.Msg
		}
		d.fail(n, key+".$ref", "cannot read %s: %s", path, msg)
		return nil
	}
	if strings.EqualFold(filepath.Ext(path), ".json") {
		return d.jsonSchemaFile(path, data)
	}
	root, perr := parseMapping(path, data, "a JSON Schema mapping")
	if perr != nil {
		d.errs = append(d.errs, perr)
		return nil
	}
	sub := newDecoder(path, len(data))
	raw, ok := sub.jsonValue(root, "")
	d.errs = append(d.errs, sub.errs...)
	if !ok {
		return nil
	}
	return raw
}

func (d *agentDecoder) jsonSchemaFile(path string, data []byte) json.RawMessage {
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		e := &Error{File: path, Msg: "invalid JSON: " + err.Error()}
		var se *json.SyntaxError
		if errors.As(err, &se) {
			e.Line = 1 + bytes.Count(data[:min(int(se.Offset), len(data))], []byte("\n"))
		}
		d.errs = append(d.errs, e)
		return nil
	}
	switch v.(type) {
	case map[string]any, bool:
	default:
		d.errs = append(d.errs, &Error{File: path, Line: 1, Msg: "want a JSON Schema: an object (or true or false)"})
		return nil
	}
	var buf bytes.Buffer
	_ = json.Compact(&buf, data) // valid: just unmarshalled
	return buf.Bytes()
}

// checkSchema rejects what the JSON Schema validator could not use later:
// it is schema.Compile, the compile a runtime applies to the agent's
// input_type and output_type when it registers the agent, so a schema this
// accepts the runtime accepts.
func checkSchema(raw json.RawMessage) error {
	_, err := schema.Compile(raw)
	var e *svc.Error
	if errors.As(err, &e) && e.Message == "invalid schema" && e.Err != nil {
		// The location is the key this is reported under.
		return errors.New(strings.ReplaceAll(e.Err.Error(), "jsonschema.Schema: <anonymous schema>: ", ""))
	}
	return err
}

// checkAgent runs Env.CheckAgent on an agent the decoder found no fault
// with and reports what it refuses at the line of the field the error
// names ("agent NAME: input_type: ..." is reported at input_type), else at
// the top of the file.
func (d *agentDecoder) checkAgent(a svc.Agent) {
	err := d.env.CheckAgent(a)
	if err == nil {
		return
	}
	d.checkErrors(a, err)
}

// checkErrors reports an error of Env.CheckAgent or Env.CheckSettings.
// Several faults (model_settings keys, say) come joined: each is reported
// at its own line.
func (d *agentDecoder) checkErrors(a svc.Agent, err error) {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			d.checkError(a, e)
		}
		return
	}
	d.checkError(a, err)
}

// checkSettings runs Env.CheckSettings on the settings of an agent with
// other faults (CheckAgent, which checks them too, does not run then),
// with the models that are not at fault themselves.
func (d *agentDecoder) checkSettings(a *svc.Agent) {
	if d.env.CheckSettings == nil || len(a.ModelSettings) == 0 || d.reported("model_settings") {
		return
	}
	var ids []string
	if f, ok := d.get("model"); ok && !d.failed("model") && f.val != nil {
		ids = append(ids, a.Model)
	}
	for _, it := range d.lists["fallback_models"] {
		if !d.failed(it.Key) {
			ids = append(ids, it.Value)
		}
	}
	if len(ids) == 0 {
		return
	}
	if err := d.env.CheckSettings(ids, a.ModelSettings); err != nil {
		d.checkErrors(*a, err)
	}
}

// checkError reports one error of Env.CheckAgent.
func (d *agentDecoder) checkError(a svc.Agent, err error) {
	msg := err.Error()
	msg = strings.TrimPrefix(msg, "agent "+a.Name+": ")
	key := ""
	if i := strings.Index(msg, ": "); i > 0 && !strings.ContainsAny(msg[:i], " \"'") {
		key, msg = msg[:i], msg[i+2:]
	}
	n, k := d.root, key
	if key != "" {
		n, k = d.locate(key)
		if rest, ok := strings.CutPrefix(key, "model_settings."); ok {
			if f, ok := d.get("model_settings"); ok {
				if at := settingNode(f.val, rest); at != nil {
					n = at
				}
			}
		}
	}
	d.fail(n, k, "%s", msg)
}

// settingNode finds the node of path ("tool_arguments.x", "call_tools[1]")
// under a model_settings node: a mapping's key, a list's item; nil when
// it is not there.
func settingNode(n *yaml.Node, path string) *yaml.Node {
	n = resolve(n)
	if n == nil || path == "" {
		return nil
	}
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i].Value
			rest, ok := strings.CutPrefix(path, k)
			if !ok {
				continue
			}
			switch {
			case rest == "":
				return n.Content[i]
			case rest[0] == '.' || rest[0] == '[':
				if at := settingNode(n.Content[i+1], strings.TrimPrefix(rest, ".")); at != nil {
					return at
				}
			}
		}
	case yaml.SequenceNode:
		if path[0] != '[' {
			return nil
		}
		end := strings.IndexByte(path, ']')
		i, err := strconv.Atoi(path[1:max(end, 1)])
		if end < 0 || err != nil || i < 0 || i >= len(n.Content) {
			return nil
		}
		if rest := strings.TrimPrefix(path[end+1:], "."); rest != "" {
			return settingNode(n.Content[i], rest)
		}
		return n.Content[i]
	}
	return nil
}

// mcpServers decodes the list of MCP tool servers: the shape of each
// entry (a mapping of known keys, each of its type). What a server needs
// (a name, a transport and what that transport uses) is
// svc.Agent.Validate's to say, so every entry that is a mapping is kept,
// in order, for Validate to see at its index.
func (d *agentDecoder) mcpServers(n *yaml.Node) []svc.MCPServer {
	r := resolve(n)
	if r.Kind != yaml.SequenceNode {
		d.fail(n, "mcp_servers", "want a list of servers, got %s", describe(n))
		return nil
	}
	var out []svc.MCPServer
	for i, e := range r.Content {
		path := fmt.Sprintf("mcp_servers[%d]", i)
		m := resolve(e)
		if m.Kind != yaml.MappingNode {
			d.fail(e, path, "want a mapping with name and transport, got %s", describe(e))
			continue
		}
		at := fmt.Sprintf("mcp_servers[%d]", len(out))
		d.at[at] = item{Node: m, Key: path}
		fs := d.fields(m, path, mcpKeys)
		get := func(k string) (*yaml.Node, bool) {
			f, ok := fs[k]
			if !ok || isNull(f.val) {
				return nil, false
			}
			d.at[at+"."+k] = item{Node: f.val, Key: path + "." + k}
			return f.val, true
		}
		str := func(k string) string {
			if v, ok := get(k); ok {
				s, _ := d.str(v, path+"."+k)
				return s
			}
			return ""
		}
		s := svc.MCPServer{
			Name: str("name"), Transport: str("transport"),
			Command: str("command"), URL: str("url"), Prefix: str("prefix"),
		}
		if v, ok := get("args"); ok {
			s.Args = d.scalarList(v, path+".args")
		}
		if v, ok := get("timeout_seconds"); ok {
			if f, ok := d.number(v, path+".timeout_seconds"); ok {
				if f == 0 {
					// 0 is how Go asks for the default; a file leaves the key out.
					d.fail(v, path+".timeout_seconds", "0: want seconds above 0 (leave the key out for the default)")
				}
				s.TimeoutSeconds = f
			}
		}
		if v, ok := get("env"); ok {
			s.Env = d.envMap(v, path+".env")
		}
		if v, ok := get("idempotent"); ok {
			if b, ok := d.boolean(v, path+".idempotent"); ok {
				s.Idempotent = &b
			}
		}
		if v, ok := get("approval"); ok {
			for _, it := range d.strList(v, path+".approval") {
				s.Approval = append(s.Approval, it.Value)
			}
		}
		out = append(out, s)
	}
	return out
}

// scalarList decodes command arguments: scalars of any type, as written.
func (d *decoder) scalarList(n *yaml.Node, key string) []string {
	r := resolve(n)
	if r.Kind != yaml.SequenceNode {
		d.fail(n, key, "want a list of strings, got %s", describe(n))
		return nil
	}
	out := make([]string, 0, len(r.Content))
	for i, e := range r.Content {
		if s, ok := d.scalarText(e, fmt.Sprintf("%s[%d]", key, i)); ok {
			out = append(out, s)
		}
	}
	return out
}

// envMap decodes environment variables: names to scalars, as written.
func (d *decoder) envMap(n *yaml.Node, key string) map[string]string {
	r := resolve(n)
	if r.Kind != yaml.MappingNode {
		d.fail(n, key, "want a mapping of variable names to values, got %s", describe(n))
		return nil
	}
	out := make(map[string]string, len(r.Content)/2)
	for i := 0; i+1 < len(r.Content); i += 2 {
		name, ok := mapKey(d, r.Content[i], key, out)
		if !ok {
			continue
		}
		if v, ok := d.scalarText(r.Content[i+1], join(key, name)); ok {
			out[name] = v
		}
	}
	return out
}
