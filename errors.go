package svc

import (
	"context"
	"errors"
	"fmt"
)

// Kind names a domain error kind. Its value is the wire name carried in the
// `error` field of a problem+json body (for example "BudgetExceededError"), so a
// client can rebuild the same kind from a response.
type Kind string

// The error kinds. Their HTTP statuses live in one table in package
// http/server; their hierarchy is given by Kind.Parent.
const (
	// KindRuntime is the base of every domain error. A client that meets a kind
	// it does not know keeps the name and still matches ErrRuntime.
	KindRuntime         Kind = "AgentRuntimeError"
	KindSpecValidation  Kind = "SpecValidationError"
	KindTopology        Kind = "TopologyError"
	KindPayloadTooLarge Kind = "PayloadTooLargeError"
	// KindUnsupportedMediaType is a request body that is not
	// application/json.
	KindUnsupportedMediaType Kind = "UnsupportedMediaTypeError"
	// KindForbiddenOrigin is a browser request from an origin the server
	// does not allow.
	KindForbiddenOrigin  Kind = "ForbiddenOriginError"
	KindTrustViolation   Kind = "TrustViolationError"
	KindRegistry         Kind = "RegistryError"
	KindRunState         Kind = "RunStateError"
	KindBudgetExceeded   Kind = "BudgetExceededError"
	KindDepthLimit       Kind = "DepthLimitError"
	KindSpawnCycle       Kind = "SpawnCycleError"
	KindSpawn            Kind = "SpawnError"
	KindToolExecution    Kind = "ToolExecutionError"
	KindAllAgentsFailed  Kind = "AllAgentsFailedError"
	KindModel            Kind = "ModelError"
	KindTimeout          Kind = "TimeoutError"
	KindCancelled        Kind = "CancelledError"
	KindShuttingDown     Kind = "ShuttingDownError"
	KindUnauthorized     Kind = "UnauthorizedError"
	KindOutputValidation Kind = "OutputValidationError"
	// KindNotFound is a request for a path the server has no route for
	// (as opposed to KindRegistry, a known route naming an unknown agent,
	// group or run).
	KindNotFound Kind = "NotFoundError"
	// KindMethodNotAllowed is a known path asked with a method it does not
	// serve.
	KindMethodNotAllowed Kind = "MethodNotAllowedError"
	// KindCondition is a group's CEL expression (when, fan_out, input) that
	// compiled but failed while a run evaluated it: the cost limit, an
	// overflow, a key missing from the output, a value of the wrong type.
	// The request was fine; the run failed.
	KindCondition Kind = "ConditionError"
	// KindBadRequest is an HTTP request the server could not parse: a
	// malformed request line or header, an invalid % escape in the path.
	KindBadRequest Kind = "BadRequestError"
	// KindHeaderTooLarge is a request whose headers exceed the server's
	// bound.
	KindHeaderTooLarge Kind = "HeaderTooLargeError"
	// KindRequestTimeout is a request whose body did not arrive within
	// the server's read timeout (svc serve --read-timeout).
	KindRequestTimeout Kind = "RequestTimeoutError"
	// KindMisdirectedRequest is a request whose Host header names a host
	// the server does not serve (svc serve --allowed-hosts): a page that
	// reached a loopback server through DNS rebinding.
	KindMisdirectedRequest Kind = "MisdirectedRequestError"
	// KindOverloaded is a request the server has no room for now (its
	// connections are at svc serve --max-connections); retry after the
	// Retry-After header's seconds.
	KindOverloaded Kind = "OverloadedError"
	// KindContext is a model call whose prompt does not fit the model's
	// context window (the provider's context-length error), and no
	// fallback model with a larger window could take it: the input, or
	// the conversation it grew into, is too long. Retrying the same
	// request cannot help.
	KindContext Kind = "ContextError"
	// KindSpawnCap is a spawn_agents call asking for more children than
	// the runtime's max_spawn_children: the operator's bound on one call's
	// fan-out. It ends the run that made the call (the run is refused,
	// like one past the depth limit), since a model that asks for
	// hundreds of agents at once is a runaway, not a mistake to retry.
	KindSpawnCap Kind = "SpawnCapError"
	// KindApprovalRequired is a call that needs a person's approval or
	// answer (an approval tool, ask_human) made by a run that cannot wait
	// for one: a synchronous run or a gather. Submit the run instead.
	KindApprovalRequired Kind = "ApprovalRequiredError"
	// KindForbidden is a request whose API key is valid but lacks the
	// scope the route needs (svc serve --api-keys).
	KindForbidden Kind = "ForbiddenError"
)

// Kinds lists every kind the runtime produces, base first.
var Kinds = []Kind{
	KindRuntime, KindSpecValidation, KindTopology, KindPayloadTooLarge,
	KindTrustViolation, KindRegistry, KindRunState, KindBudgetExceeded,
	KindDepthLimit, KindSpawnCycle, KindSpawn, KindToolExecution,
	KindAllAgentsFailed, KindModel, KindTimeout, KindCancelled,
	KindShuttingDown, KindOutputValidation, KindUnauthorized,
	KindUnsupportedMediaType, KindForbiddenOrigin, KindNotFound,
	KindMethodNotAllowed, KindCondition, KindBadRequest, KindHeaderTooLarge,
	KindRequestTimeout, KindMisdirectedRequest, KindOverloaded, KindContext,
	KindSpawnCap, KindApprovalRequired, KindForbidden,
}

// Parent is the kind this kind specialises: TopologyError,
// PayloadTooLargeError, UnsupportedMediaTypeError, BadRequestError and
// HeaderTooLargeError are SpecValidationErrors, every other kind is an AgentRuntimeError, and the
// base has no parent.
func (k Kind) Parent() Kind {
	switch k {
	case KindRuntime:
		return ""
	case KindTopology, KindPayloadTooLarge, KindUnsupportedMediaType, KindBadRequest, KindHeaderTooLarge:
		return KindSpecValidation
	default:
		return KindRuntime
	}
}

// Sentinels for errors.Is. errors.Is(err, ErrSpecValidation) holds for a
// TopologyError too; errors.Is(err, ErrRuntime) holds for every *Error.
var (
	ErrRuntime              = &Error{Kind: KindRuntime}
	ErrSpecValidation       = &Error{Kind: KindSpecValidation}
	ErrTopology             = &Error{Kind: KindTopology}
	ErrPayloadTooLarge      = &Error{Kind: KindPayloadTooLarge}
	ErrUnsupportedMediaType = &Error{Kind: KindUnsupportedMediaType}
	ErrForbiddenOrigin      = &Error{Kind: KindForbiddenOrigin}
	ErrTrustViolation       = &Error{Kind: KindTrustViolation}
	ErrRegistry             = &Error{Kind: KindRegistry}
	ErrRunState             = &Error{Kind: KindRunState}
	ErrBudgetExceeded       = &Error{Kind: KindBudgetExceeded}
	ErrDepthLimit           = &Error{Kind: KindDepthLimit}
	ErrSpawnCycle           = &Error{Kind: KindSpawnCycle}
	ErrSpawn                = &Error{Kind: KindSpawn}
	ErrToolExecution        = &Error{Kind: KindToolExecution}
	ErrAllAgentsFailed      = &Error{Kind: KindAllAgentsFailed}
	ErrModel                = &Error{Kind: KindModel}
	ErrTimeout              = &Error{Kind: KindTimeout}
	ErrCancelled            = &Error{Kind: KindCancelled}
	ErrShuttingDown         = &Error{Kind: KindShuttingDown}
	ErrUnauthorized         = &Error{Kind: KindUnauthorized}
	ErrOutputValidation     = &Error{Kind: KindOutputValidation}
	ErrNotFound             = &Error{Kind: KindNotFound}
	ErrMethodNotAllowed     = &Error{Kind: KindMethodNotAllowed}
	ErrCondition            = &Error{Kind: KindCondition}
	ErrBadRequest           = &Error{Kind: KindBadRequest}
	ErrHeaderTooLarge       = &Error{Kind: KindHeaderTooLarge}
	ErrRequestTimeout       = &Error{Kind: KindRequestTimeout}
	ErrMisdirectedRequest   = &Error{Kind: KindMisdirectedRequest}
	ErrOverloaded           = &Error{Kind: KindOverloaded}
	ErrContext              = &Error{Kind: KindContext}
	ErrSpawnCap             = &Error{Kind: KindSpawnCap}
	ErrApprovalRequired     = &Error{Kind: KindApprovalRequired}
	ErrForbidden            = &Error{Kind: KindForbidden}
)

// Error is the one concrete domain error. Kind says what went wrong; the
// other fields say where. Use errors.As to read it and errors.Is with the
// sentinels above to test its kind.
type Error struct {
	Kind    Kind
	Message string
	// Agent and TaskID name the agent and task involved, when there is one.
	Agent  string
	TaskID string
	// Reason is a short machine-readable reason ("interrupted", "timeout",
	// "invalid_output") carried into agent_failed events.
	Reason string
	// Err is the underlying cause, if any.
	Err error
}

// Errorf builds an *Error of the given kind.
func Errorf(kind Kind, format string, args ...any) *Error {
	return &Error{Kind: kind, Message: fmt.Sprintf(format, args...)}
}

// Wrap builds an *Error of the given kind around cause; the message is
// msg, followed by the cause's text.
func Wrap(kind Kind, cause error, msg string) *Error {
	return &Error{Kind: kind, Message: msg, Err: cause}
}

func (e *Error) Error() string {
	msg := e.Message
	if msg == "" {
		msg = string(e.Kind)
	}
	if e.Err != nil {
		if e.Message == "" {
			return e.Err.Error()
		}
		return msg + ": " + e.Err.Error()
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is a sentinel of this error's kind or of one of
// its ancestors. Only sentinels (errors with just a Kind) match by kind;
// any other *Error matches only itself.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	if !ok || t.Message != "" || t.Err != nil || t.Agent != "" || t.TaskID != "" {
		return false
	}
	for k := e.Kind; k != ""; k = k.Parent() {
		if k == t.Kind {
			return true
		}
	}
	// A kind this build does not know is still an AgentRuntimeError.
	return t.Kind == KindRuntime
}

// KindOf returns "" for nil, the kind of the first *Error in err's chain, KindTimeout
// for a context deadline, KindCancelled for a context cancellation, and
// KindRuntime otherwise.
func KindOf(err error) Kind {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return KindTimeout
	}
	if errors.Is(err, context.Canceled) {
		return KindCancelled
	}
	return KindRuntime
}

// ReasonOf returns the Reason of the first *Error in err's chain that has one.
func ReasonOf(err error) string {
	for err != nil {
		var e *Error
		if !errors.As(err, &e) {
			return ""
		}
		if e.Reason != "" {
			return e.Reason
		}
		err = e.Err
	}
	return ""
}
