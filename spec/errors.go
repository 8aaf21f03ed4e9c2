package spec

import (
	"errors"
	"fmt"
	"strings"

	"github.com/svc-dev/svc"
)

// Error is one problem in one spec file. Every error from Load, Validate
// and LoadOptions about a file's content is an *Error (several are joined
// with errors.Join), and all of them are SpecValidationErrors:
// errors.Is(err, svc.ErrSpecValidation) holds. The problems group.Compile
// finds in a group file (unknown agents, cycles, bad CEL, ...) are
// TopologyErrors as well: errors.Is(err, svc.ErrTopology) holds for them,
// and errors.As finds the *group.Error.
type Error struct {
	// File is the file's path, joined to the directory as the caller gave it.
	File string
	// Line is 1-based; 0 when the problem is the file as a whole.
	Line int
	// Key is the path of the offending key: "model", "fallback_models[1]",
	// "mcp_servers[0].url"; "" for syntax errors and whole-file problems.
	Key string
	Msg string

	// cause is the underlying error (an fs error, say), kept for errors.Is.
	cause error
	// kind is the error's kind: KindSpecValidation when empty, or
	// KindTopology, a kind of SpecValidationError.
	kind svc.Kind
}

// Error formats the problem as "file:line: key: msg", leaving out a zero
// line, an empty key and an empty file (a problem of the whole directory), the way compilers do so editors can jump to it.
func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		if e.Line > 0 {
			fmt.Fprintf(&b, ":%d", e.Line)
		}
		b.WriteString(": ")
	}
	if e.Key != "" {
		b.WriteString(e.Key)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Kind is SpecValidationError, or TopologyError for a group whose graph
// does not hold together.
func (e *Error) Kind() svc.Kind {
	if e.kind == "" {
		return svc.KindSpecValidation
	}
	return e.kind
}

// Is makes every *Error a SpecValidationError (and so an AgentRuntimeError),
// and a TopologyError when it is one.
func (e *Error) Is(target error) bool {
	return (&svc.Error{Kind: e.Kind()}).Is(target)
}

// Unwrap exposes the cause, if any, and a *svc.Error of kind
// SpecValidationError so that svc.KindOf and errors.As find the kind.
func (e *Error) Unwrap() []error {
	kind := &svc.Error{Kind: e.Kind(), Message: e.Error()}
	if e.cause != nil {
		return []error{kind, e.cause}
	}
	return []error{kind}
}

// rootError is a problem with the specs directory itself (missing, not a
// directory, unreadable): nothing in it could be checked.
type rootError struct {
	dir string
	err error
}

func (e *rootError) Error() string { return "specs directory " + e.dir + ": " + e.err.Error() }

func (e *rootError) Unwrap() []error {
	return []error{&svc.Error{Kind: svc.KindSpecValidation, Message: e.Error()}, e.err}
}

// IsRootError reports whether err says the specs directory itself could not
// be read, as opposed to problems in the files inside it.
func IsRootError(err error) bool {
	var r *rootError
	return errors.As(err, &r)
}
