// Package schema provides JSON Schema for agent inputs, outputs and tool
// arguments: compiling and validating schemas, generating them from Go
// types, and building example values that meet them.
//
// It is built on github.com/google/jsonschema-go, which supports drafts
// 2020-12 (the default when a schema names no $schema) and 07. Compile adds
// what a service taking schemas from outside needs on top of it: references
// are resolved within the document only, and schemas whose references loop
// without descending into the value (which would recurse forever during
// validation) are rejected.
package schema

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/svc-dev/svc"
)

// Validator is a compiled JSON Schema. It is immutable, so one Validator
// may be shared by any number of goroutines.
type Validator struct {
	raw      json.RawMessage
	resolved *jsonschema.Resolved
	doc      *document
}

// Compile parses and checks a JSON Schema. An empty raw (or JSON null)
// means "no schema" and yields a nil *Validator, which accepts every value.
// A raw that is not JSON, is not a valid schema, refers outside itself or
// has a reference cycle that never descends into the value yields a
// SpecValidationError naming the problem.
func Compile(raw json.RawMessage) (*Validator, error) {
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || bytes.Equal(trimmed, []byte("null")) {
		return nil, nil
	}
	var tree any
	if err := json.Unmarshal(trimmed, &tree); err != nil {
		return nil, svc.Wrap(svc.KindSpecValidation, err, "schema is not valid JSON")
	}
	switch tree.(type) {
	case map[string]any, bool:
	default:
		return nil, svc.Errorf(svc.KindSpecValidation, "schema must be a JSON object or boolean, not %s", jsonKind(tree))
	}
	var s jsonschema.Schema
	if err := json.Unmarshal(trimmed, &s); err != nil {
		return nil, svc.Wrap(svc.KindSpecValidation, err, "invalid schema")
	}
	switch s.Schema {
	case "", "https://json-schema.org/draft/2020-12/schema",
		"http://json-schema.org/draft-07/schema#", "http://json-schema.org/draft-07/schema",
		"https://json-schema.org/draft-07/schema#":
	default:
		return nil, svc.Errorf(svc.KindSpecValidation, "invalid schema: $schema %q: only draft 2020-12 and draft-07 are supported", s.Schema)
	}
	// Index the schema as jsonschema-go understood it, not as written:
	// encoding/json matches keywords case-insensitively ("$REF" is a $ref),
	// and a reference the index missed could hide a cycle.
	canonical, err := json.Marshal(&s)
	if err != nil {
		return nil, svc.Wrap(svc.KindSpecValidation, err, "invalid schema")
	}
	tree = nil
	if err := json.Unmarshal(canonical, &tree); err != nil {
		return nil, svc.Wrap(svc.KindSpecValidation, err, "invalid schema")
	}
	doc, err := index(tree)
	if err != nil {
		return nil, svc.Wrap(svc.KindSpecValidation, err, "invalid schema")
	}
	resolved, err := s.Resolve(nil)
	if err != nil {
		return nil, svc.Wrap(svc.KindSpecValidation, err, "invalid schema")
	}
	// Only after the library has accepted the document: its checks produce
	// the better message for most malformed schemas, and ours assume a
	// well-formed one.
	if err := doc.checkRefs(); err != nil {
		return nil, svc.Wrap(svc.KindSpecValidation, err, "invalid schema")
	}
	return &Validator{raw: bytes.Clone(trimmed), resolved: resolved, doc: doc}, nil
}

// Validate reports whether value, a JSON text, meets the schema. A nil
// Validator accepts every value. The error is a plain error (callers wrap it
// in the kind that fits: a bad input is a SpecValidationError, a bad output
// an OutputValidationError) whose message names the failing keyword and the
// schema location.
func (v *Validator) Validate(value json.RawMessage) error {
	if v == nil {
		return nil
	}
	var instance any
	if err := json.Unmarshal(value, &instance); err != nil {
		return fmt.Errorf("value is not valid JSON: %w", err)
	}
	return v.validate(instance)
}

func (v *Validator) validate(instance any) error {
	if err := v.resolved.Validate(instance); err != nil {
		return fmt.Errorf("value does not match schema: %s", cleanMessage(err.Error()))
	}
	return nil
}

// Raw returns the schema text as compiled (whitespace-trimmed), or nil for a
// nil Validator. The caller must not modify it.
func (v *Validator) Raw() json.RawMessage {
	if v == nil {
		return nil
	}
	return v.raw
}

// For returns the JSON Schema of Go type T, as jsonschema.For builds it:
// property names come from `json` tags, descriptions from `jsonschema`
// tags, fields without omitempty/omitzero are required, and structs admit
// no other properties.
func For[T any]() (json.RawMessage, error) {
	s, err := jsonschema.For[T](nil)
	if err != nil {
		return nil, fmt.Errorf("schema for %T: %w", *new(T), err)
	}
	raw, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("schema for %T: %w", *new(T), err)
	}
	return raw, nil
}

// cleanMessage turns jsonschema-go's "validating root: validating
// /properties/a: type: ..." chain into "at /properties/a: type: ...": the
// innermost schema location and the keyword that failed. If the library
// changes its format the message passes through unchanged.
func cleanMessage(msg string) string {
	loc := ""
	for strings.HasPrefix(msg, "validating ") {
		rest := msg[len("validating "):]
		i := strings.Index(rest, ": ")
		if i < 0 {
			break
		}
		loc, msg = rest[:i], rest[i+2:]
	}
	switch loc {
	case "":
		return msg
	case "root":
		return "at the root: " + msg
	}
	return "at " + loc + ": " + msg
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case float64:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}
