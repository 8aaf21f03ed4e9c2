package svc

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// FieldError is one problem with one field of an agent definition, as
// Agent.Validate finds it. Validate is where the rules of a definition
// live; package spec, which reads definitions from YAML, reports these
// same errors at the file, line and key that Field names. A FieldError is
// a SpecValidationError: errors.Is(err, ErrSpecValidation) holds, and
// errors.As finds a *Error of that kind naming the agent.
type FieldError struct {
	// Agent is the agent's name, as given (it may be the invalid name).
	Agent string
	// Field is the path of the field in the shape of the YAML spec:
	// "name", "model", "fallback_models[1]", "tools[0]",
	// "mcp_servers[2].url".
	Field string
	// Msg says what is wrong, and usually what would be right.
	Msg string

	// server is set for the errors of MCPServer.Validate on its own,
	// which belong to a server rather than an agent; it holds the server's
	// name.
	server *string
}

// Error reads "agent triage: fallback_models[1]: model "x": want
// provider:name, e.g. test:echo". A message that starts with "is" follows
// the field as a sentence would ("agent a: tools[0] is nil"), and an
// invalid name reads "agent name "a b": ...".
func (e *FieldError) Error() string {
	what, name := "agent", e.Agent
	if e.server != nil {
		what, name = "mcp server", *e.server
	}
	if !ValidName(name) {
		name = strconv.Quote(name)
	}
	switch {
	case e.Field == "name":
		return what + " name " + e.Msg
	case e.Field == "":
		return what + " " + name + ": " + e.Msg
	case strings.HasPrefix(e.Msg, "is "):
		return what + " " + name + ": " + e.Field + " " + e.Msg
	}
	return what + " " + name + ": " + e.Field + ": " + e.Msg
}

// Is makes a FieldError a SpecValidationError (and an AgentRuntimeError).
func (e *FieldError) Is(target error) bool {
	return (&Error{Kind: KindSpecValidation}).Is(target)
}

// As lets errors.As read a FieldError as a *Error of kind
// SpecValidationError naming the agent, so KindOf and the HTTP error
// mapping see the right kind.
func (e *FieldError) As(target any) bool {
	t, ok := target.(**Error)
	if !ok {
		return false
	}
	*t = &Error{Kind: KindSpecValidation, Message: e.Error(), Agent: e.Agent}
	return true
}

// fieldErrors collects the FieldErrors of one definition.
type fieldErrors struct {
	agent  string
	server *string
	errs   []error
}

func (f *fieldErrors) add(field, format string, args ...any) {
	f.errs = append(f.errs, &FieldError{Agent: f.agent, Field: field, Msg: fmt.Sprintf(format, args...), server: f.server})
}

// err returns nil, the one error, or errors.Join of them all.
func (f *fieldErrors) err() error {
	switch len(f.errs) {
	case 0:
		return nil
	case 1:
		return f.errs[0]
	}
	return errors.Join(f.errs...)
}

// nameRule is what every name must look like, for messages.
const nameRule = "use letters, digits, '_', '-' and '.', starting with a letter or digit"

// MCP transports.
const (
	MCPStdio = "stdio" // a subprocess speaking over stdin and stdout
	MCPHTTP  = "http"  // streamable HTTP
	MCPSSE   = "sse"   // the older HTTP+SSE transport
)

// MaxMCPTimeoutSeconds bounds MCPServer.TimeoutSeconds (a day).
const MaxMCPTimeoutSeconds = 86400

// Validate checks an MCP server configuration: a valid name, a known
// transport with what it needs (a command for stdio, an http or https URL
// for http and sse) and nothing it would ignore, a valid tool name prefix,
// environment variable names and a timeout in range. It returns
// FieldErrors whose Field is relative to the server ("url", "env"), with
// Agent empty; they read "mcp server fs: url: ...". Agent.Validate checks every server of an agent this way.
func (s *MCPServer) Validate() error {
	f := &fieldErrors{server: &s.Name}
	s.check(f, "")
	return f.err()
}

func (s *MCPServer) check(f *fieldErrors, prefix string) {
	switch {
	case s.Name == "":
		f.add(prefix+"name", "missing: every server needs a name")
	case !ValidName(s.Name):
		f.add(prefix+"name", "%q: %s", s.Name, nameRule)
	}
	switch s.Transport {
	case "":
		f.add(prefix+"transport", "missing: want stdio, http or sse")
	case MCPStdio:
		if s.Command == "" {
			f.add(prefix+"command", "missing: the stdio transport runs a command")
		}
		if s.URL != "" {
			f.add(prefix+"url", "not used by the stdio transport (it is for http and sse)")
		}
	case MCPHTTP, MCPSSE:
		if s.URL == "" {
			f.add(prefix+"url", "missing: the %s transport connects to a URL", s.Transport)
		} else if u, err := url.Parse(s.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			f.add(prefix+"url", "%q: want an http:// or https:// URL", s.URL)
		}
		for _, x := range []struct {
			field string
			set   bool
		}{{"command", s.Command != ""}, {"args", len(s.Args) > 0}, {"env", len(s.Env) > 0}} {
			if x.set {
				f.add(prefix+x.field, "not used by the %s transport (it is for stdio)", s.Transport)
			}
		}
	default:
		f.add(prefix+"transport", "%q: want stdio, http or sse", s.Transport)
	}
	if s.Prefix != "" && !ValidName(s.Prefix) {
		f.add(prefix+"prefix", "%q: %s", s.Prefix, nameRule)
	}
	for _, name := range slices.Sorted(maps.Keys(s.Env)) {
		if name == "" || strings.ContainsAny(name, "=\x00") {
			f.add(prefix+"env", "%q is not a valid environment variable name", name)
		}
	}
	if t := s.TimeoutSeconds; t < 0 || t > MaxMCPTimeoutSeconds || math.IsNaN(t) {
		f.add(prefix+"timeout_seconds", "%v: want seconds above 0, at most %d (0: the default)", t, MaxMCPTimeoutSeconds)
	}
}
