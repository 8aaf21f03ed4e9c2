// Package tools provides function tools built from Go functions, the trust
// gate that decides which tools an agent may call, and the built-in tools
// YAML agents can name (current_time, read_file, write_file, http_get).
package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/schema"
)

// Func builds a tool from fn. The input schema is generated from In with
// schema.For (property names from `json` tags, descriptions from
// `jsonschema` tags); arguments must meet it, and are decoded strictly:
// unknown fields are an error even where the schema would allow them. The
// result is fn's Out as JSON.
//
// Call's errors are ToolExecutionErrors naming the tool, except that an
// error fn returns with a kind of its own (a TrustViolationError from a
// nested run, say) keeps it.
func Func[In, Out any](name, description string, access svc.Access, fn func(ctx context.Context, in In) (Out, error)) (svc.Tool, error) {
	if !svc.ValidName(name) {
		return nil, svc.Errorf(svc.KindSpecValidation, "tool name %q: use letters, digits, '_', '-' and '.', starting with a letter or digit", name)
	}
	if fn == nil {
		return nil, svc.Errorf(svc.KindSpecValidation, "tool %s: nil function", name)
	}
	if access < svc.AccessRead || access > svc.AccessWrite {
		return nil, svc.Errorf(svc.KindSpecValidation, "tool %s: access %v: want AccessRead, AccessNetwork or AccessWrite", name, access)
	}
	raw, err := schema.For[In]()
	if err != nil {
		return nil, svc.Wrap(svc.KindSpecValidation, err, "tool "+name)
	}
	v, err := schema.Compile(raw)
	if err != nil {
		return nil, svc.Wrap(svc.KindSpecValidation, err, "tool "+name)
	}
	t := &funcTool{name: name, description: description, access: access, schema: raw}
	t.call = func(ctx context.Context, args json.RawMessage) (json.RawMessage, error) {
		args = bytes.TrimSpace(args)
		if len(args) == 0 || bytes.Equal(args, []byte("null")) {
			// Models call argument-less tools with nothing at all.
			args = json.RawMessage("{}")
		}
		if err := v.Validate(args); err != nil {
			return nil, t.errorf(err, "invalid arguments")
		}
		var in In
		if err := decodeStrict(args, &in); err != nil {
			return nil, t.errorf(err, "invalid arguments")
		}
		out, err := fn(ctx, in)
		if err != nil {
			var se *svc.Error
			if errors.As(err, &se) {
				return nil, err
			}
			return nil, t.errorf(err, "")
		}
		res, err := json.Marshal(out)
		if err != nil {
			return nil, t.errorf(err, "encoding result")
		}
		return res, nil
	}
	return t, nil
}

// MustFunc is Func for package-level tools: it panics on a bad definition,
// which is a programming error.
func MustFunc[In, Out any](name, description string, access svc.Access, fn func(ctx context.Context, in In) (Out, error)) svc.Tool {
	t, err := Func(name, description, access, fn)
	if err != nil {
		panic(err)
	}
	return t
}

type funcTool struct {
	name, description string
	access            svc.Access
	schema            json.RawMessage
	call              func(ctx context.Context, args json.RawMessage) (json.RawMessage, error)
}

func (t *funcTool) Name() string                 { return t.name }
func (t *funcTool) Description() string          { return t.description }
func (t *funcTool) InputSchema() json.RawMessage { return t.schema }
func (t *funcTool) Access() svc.Access           { return t.access }

// Call runs the tool. A panic in the function becomes an error: a tool is
// outside code running inside an agent run, and one bad call must not take
// the process down.
func (t *funcTool) Call(ctx context.Context, args json.RawMessage) (res json.RawMessage, err error) {
	defer func() {
		if p := recover(); p != nil {
			res, err = nil, svc.Errorf(svc.KindToolExecution, "tool %s panicked: %v", t.name, p)
		}
	}()
	return t.call(ctx, args)
}

func (t *funcTool) errorf(cause error, what string) error {
	msg := "tool " + t.name
	if what != "" {
		msg += ": " + what
	}
	return svc.Wrap(svc.KindToolExecution, cause, msg)
}

// decodeStrict decodes one JSON value into v, rejecting unknown fields and
// trailing data.
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("unexpected data after the arguments")
	}
	return nil
}

// Check is the trust gate: nil if an agent at trust level trust may call t,
// else a TrustViolationError. An empty trust level is svc.DefaultTrustLevel,
// as for an agent that names none.
func Check(trust svc.TrustLevel, t svc.Tool) error {
	if trust == "" {
		trust = svc.DefaultTrustLevel
	}
	a := t.Access()
	if trust.Allows(a) {
		return nil
	}
	return svc.Errorf(svc.KindTrustViolation, "tool %s needs %s access, which trust level %s does not allow (needs %s or higher)",
		t.Name(), a, trust, a.MinTrust())
}

// NotIdempotent returns t declared not idempotent (svc.IdempotentTool): a
// call of it that was in flight when a submitted run's process died is not
// made again when the run resumes; the model is told its outcome is
// unknown instead. Use it for tools whose second call would do harm (a
// payment, an email).
func NotIdempotent(t svc.Tool) svc.Tool { return notIdempotent{t} }

type notIdempotent struct{ svc.Tool }

func (notIdempotent) Idempotent() bool { return false }

// NeedsApproval keeps what the wrapped tool says.
func (n notIdempotent) NeedsApproval() bool { return svc.ToolNeedsApproval(n.Tool) }

// NeedsApproval returns t declared to need a person's approval before each
// call (svc.ApprovalTool), whichever agent lists it: a submitted run waits
// for one, a synchronous run fails with an ApprovalRequiredError. An agent
// spec's approval list does the same for the tools it names.
func NeedsApproval(t svc.Tool) svc.Tool { return needsApproval{t} }

type needsApproval struct{ svc.Tool }

func (needsApproval) NeedsApproval() bool { return true }

// Idempotent keeps what the wrapped tool says.
func (n needsApproval) Idempotent() bool { return svc.ToolIdempotent(n.Tool) }
