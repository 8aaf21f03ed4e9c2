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
// errors.Is(err, svc.ErrSpecValidation) holds.
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
}

// Error formats the problem as "file:line: key: msg", leaving out a zero
// line and an empty key, the way compilers do so editors can jump to it.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	if e.Key != "" {
		b.WriteString(e.Key)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Is makes every *Error a SpecValidationError (and so an AgentRuntimeError).
func (e *Error) Is(target error) bool {
	return specKind.Is(target)
}

// Unwrap exposes the cause, if any, and a *svc.Error of kind
// SpecValidationError so that svc.KindOf and errors.As find the kind.
func (e *Error) Unwrap() []error {
	kind := &svc.Error{Kind: svc.KindSpecValidation, Message: e.Error()}
	if e.cause != nil {
		return []error{kind, e.cause}
	}
	return []error{kind}
}

var specKind = &svc.Error{Kind: svc.KindSpecValidation}

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
