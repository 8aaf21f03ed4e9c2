package svc_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/svc-dev/svc"
)

// sentinels maps every kind to its sentinel; the test below fails when a
// kind is added to svc.Kinds without one.
var sentinels = map[svc.Kind]error{
	svc.KindRuntime:              svc.ErrRuntime,
	svc.KindSpecValidation:       svc.ErrSpecValidation,
	svc.KindTopology:             svc.ErrTopology,
	svc.KindPayloadTooLarge:      svc.ErrPayloadTooLarge,
	svc.KindTrustViolation:       svc.ErrTrustViolation,
	svc.KindRegistry:             svc.ErrRegistry,
	svc.KindRunState:             svc.ErrRunState,
	svc.KindBudgetExceeded:       svc.ErrBudgetExceeded,
	svc.KindDepthLimit:           svc.ErrDepthLimit,
	svc.KindSpawnCycle:           svc.ErrSpawnCycle,
	svc.KindSpawn:                svc.ErrSpawn,
	svc.KindToolExecution:        svc.ErrToolExecution,
	svc.KindAllAgentsFailed:      svc.ErrAllAgentsFailed,
	svc.KindModel:                svc.ErrModel,
	svc.KindTimeout:              svc.ErrTimeout,
	svc.KindCancelled:            svc.ErrCancelled,
	svc.KindShuttingDown:         svc.ErrShuttingDown,
	svc.KindOutputValidation:     svc.ErrOutputValidation,
	svc.KindUnauthorized:         svc.ErrUnauthorized,
	svc.KindUnsupportedMediaType: svc.ErrUnsupportedMediaType,
	svc.KindForbiddenOrigin:      svc.ErrForbiddenOrigin,
	svc.KindNotFound:             svc.ErrNotFound,
	svc.KindMethodNotAllowed:     svc.ErrMethodNotAllowed,
	svc.KindCondition:            svc.ErrCondition,
	svc.KindBadRequest:           svc.ErrBadRequest,
	svc.KindHeaderTooLarge:       svc.ErrHeaderTooLarge,
	svc.KindRequestTimeout:       svc.ErrRequestTimeout,
	svc.KindMisdirectedRequest:   svc.ErrMisdirectedRequest,
	svc.KindOverloaded:           svc.ErrOverloaded,
	svc.KindContext:              svc.ErrContext,
	svc.KindSpawnCap:             svc.ErrSpawnCap,
	svc.KindApprovalRequired:     svc.ErrApprovalRequired,
	svc.KindForbidden:            svc.ErrForbidden,
}

// ancestors is the hierarchy of docs/api.md written out by hand, so that a
// change to Kind.Parent shows up here rather than being checked against
// itself.
func ancestors(k svc.Kind) []svc.Kind {
	switch k {
	case svc.KindRuntime:
		return []svc.Kind{svc.KindRuntime}
	case svc.KindTopology, svc.KindPayloadTooLarge, svc.KindUnsupportedMediaType, svc.KindBadRequest, svc.KindHeaderTooLarge:
		return []svc.Kind{k, svc.KindSpecValidation, svc.KindRuntime}
	}
	return []svc.Kind{k, svc.KindRuntime}
}

func TestKindsHaveDistinctSentinels(t *testing.T) {
	if len(svc.Kinds) != len(sentinels) {
		t.Fatalf("svc.Kinds has %d kinds, the test knows %d sentinels", len(svc.Kinds), len(sentinels))
	}
	if svc.Kinds[0] != svc.KindRuntime {
		t.Errorf("Kinds[0] = %s, want the base %s", svc.Kinds[0], svc.KindRuntime)
	}
	seen := map[svc.Kind]bool{}
	for _, k := range svc.Kinds {
		if seen[k] {
			t.Errorf("kind %s listed twice", k)
		}
		seen[k] = true
		s, ok := sentinels[k]
		if !ok {
			t.Errorf("kind %s has no sentinel in the test table", k)
			continue
		}
		var e *svc.Error
		if !errors.As(s, &e) || e.Kind != k {
			t.Errorf("sentinel for %s has kind %v", k, e)
		}
	}
}

func TestErrorIsMatchesKindAndAncestorsOnly(t *testing.T) {
	for _, k := range svc.Kinds {
		t.Run(string(k), func(t *testing.T) {
			want := map[svc.Kind]bool{}
			for _, a := range ancestors(k) {
				want[a] = true
			}
			err := svc.Errorf(k, "something about %s", "x")
			wrapped := fmt.Errorf("outer: %w", fmt.Errorf("middle: %w", err))
			for _, target := range svc.Kinds {
				for name, e := range map[string]error{"bare": err, "wrapped": wrapped} {
					if got := errors.Is(e, sentinels[target]); got != want[target] {
						t.Errorf("%s: errors.Is(%s error, Err%s) = %v, want %v", name, k, target, got, want[target])
					}
				}
			}
			// Parent agrees with the hand-written hierarchy.
			anc := ancestors(k)
			if len(anc) > 1 && k.Parent() != anc[1] {
				t.Errorf("%s.Parent() = %q, want %q", k, k.Parent(), anc[1])
			}
			if k == svc.KindRuntime && k.Parent() != "" {
				t.Errorf("the base has parent %q", k.Parent())
			}
		})
	}
}

func TestUnknownKindIsRuntimeOnly(t *testing.T) {
	err := fmt.Errorf("ctx: %w", &svc.Error{Kind: svc.Kind("FooError"), Message: "from a newer server"})
	for _, k := range svc.Kinds {
		want := k == svc.KindRuntime
		if got := errors.Is(err, sentinels[k]); got != want {
			t.Errorf("errors.Is(FooError, Err%s) = %v, want %v", k, got, want)
		}
	}
	if got := svc.KindOf(err); got != "FooError" {
		t.Errorf("KindOf = %q, want the unknown name kept", got)
	}
}

func TestErrorIsOnlyMatchesSentinelsByKind(t *testing.T) {
	a := svc.Errorf(svc.KindModel, "provider down")
	b := svc.Errorf(svc.KindModel, "provider down")
	if errors.Is(a, b) {
		t.Error("two distinct non-sentinel errors of the same kind match each other")
	}
	if !errors.Is(a, a) {
		t.Error("an error does not match itself")
	}
	for name, target := range map[string]*svc.Error{
		"agent":   {Kind: svc.KindModel, Agent: "x"},
		"task":    {Kind: svc.KindModel, TaskID: "t"},
		"cause":   {Kind: svc.KindModel, Err: io.EOF},
		"message": {Kind: svc.KindModel, Message: "m"},
	} {
		if errors.Is(a, target) {
			t.Errorf("target with %s set matched by kind", name)
		}
	}
	if errors.Is(svc.ErrSpecValidation, svc.ErrTopology) {
		t.Error("a SpecValidationError matches the more specific ErrTopology")
	}
	if errors.Is(a, io.EOF) {
		t.Error("an *Error without a cause matches io.EOF")
	}
}

func TestErrorAsThroughWrapping(t *testing.T) {
	inner := &svc.Error{Kind: svc.KindBudgetExceeded, Message: "over budget", Agent: "a", TaskID: "t1", Reason: "budget"}
	err := fmt.Errorf("run a: %w", fmt.Errorf("invocation: %w", inner))
	var got *svc.Error
	if !errors.As(err, &got) {
		t.Fatal("errors.As found no *svc.Error")
	}
	if got != inner {
		t.Fatalf("errors.As found %+v, want the inner error", got)
	}
	if got.Agent != "a" || got.TaskID != "t1" || got.Reason != "budget" {
		t.Errorf("fields lost: %+v", got)
	}
	// Wrap keeps the cause reachable.
	w := svc.Wrap(svc.KindToolExecution, io.ErrUnexpectedEOF, "tool read_file")
	if !errors.Is(fmt.Errorf("x: %w", w), io.ErrUnexpectedEOF) {
		t.Error("Wrap's cause is not reachable with errors.Is")
	}
	if !errors.Is(w, svc.ErrToolExecution) || !errors.Is(w, svc.ErrRuntime) {
		t.Error("Wrap's kind does not match its sentinels")
	}
}

func TestErrorText(t *testing.T) {
	tests := []struct {
		name string
		err  *svc.Error
		want string
	}{
		{"message", svc.Errorf(svc.KindModel, "model %s failed", "m"), "model m failed"},
		{"kind only", &svc.Error{Kind: svc.KindTimeout}, "TimeoutError"},
		{"wrap", svc.Wrap(svc.KindModel, io.EOF, "call openai"), "call openai: EOF"},
		{"wrap without message", svc.Wrap(svc.KindModel, io.EOF, ""), "EOF"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.err.Error(); got != tt.want {
				t.Errorf("Error() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestKindOf(t *testing.T) {
	deadline, cancel := context.WithTimeout(context.Background(), 0)
	defer cancel()
	<-deadline.Done()
	cancelled, cancel2 := context.WithCancel(context.Background())
	cancel2()
	tests := []struct {
		name string
		err  error
		want svc.Kind
	}{
		{"nil", nil, ""},
		{"plain", errors.New("boom"), svc.KindRuntime},
		{"deadline", context.DeadlineExceeded, svc.KindTimeout},
		{"ctx deadline", deadline.Err(), svc.KindTimeout},
		{"wrapped deadline", fmt.Errorf("call: %w", context.DeadlineExceeded), svc.KindTimeout},
		{"cancelled", cancelled.Err(), svc.KindCancelled},
		{"wrapped cancel", fmt.Errorf("call: %w", context.Canceled), svc.KindCancelled},
		{"domain", svc.Errorf(svc.KindRegistry, "unknown agent"), svc.KindRegistry},
		{"wrapped domain", fmt.Errorf("x: %w", svc.Errorf(svc.KindDepthLimit, "deep")), svc.KindDepthLimit},
		// The first *Error in the chain decides, even over a context cause.
		{"domain around deadline", svc.Wrap(svc.KindModel, context.DeadlineExceeded, "provider"), svc.KindModel},
		{"outer kind wins", svc.Wrap(svc.KindSpawn, svc.Errorf(svc.KindModel, "m"), "spawn"), svc.KindSpawn},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := svc.KindOf(tt.err); got != tt.want {
				t.Errorf("KindOf(%v) = %q, want %q", tt.err, got, tt.want)
			}
		})
	}
}

func TestReasonOf(t *testing.T) {
	withReason := func(kind svc.Kind, reason string, cause error) *svc.Error {
		return &svc.Error{Kind: kind, Message: string(kind), Reason: reason, Err: cause}
	}
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"nil", nil, ""},
		{"plain", errors.New("x"), ""},
		{"no reason", svc.Errorf(svc.KindModel, "m"), ""},
		{"own", withReason(svc.KindTimeout, "timeout", nil), "timeout"},
		{"wrapped by fmt", fmt.Errorf("a: %w", withReason(svc.KindTimeout, "timeout", nil)), "timeout"},
		{"inner", svc.Wrap(svc.KindSpawn, withReason(svc.KindOutputValidation, "invalid_output", nil), "spawn"), "invalid_output"},
		{"inner through fmt", svc.Wrap(svc.KindSpawn, fmt.Errorf("b: %w", withReason(svc.KindCancelled, "interrupted", nil)), "spawn"), "interrupted"},
		{"outer first", withReason(svc.KindSpawn, "outer", withReason(svc.KindModel, "inner", nil)), "outer"},
		{"context cause", svc.Wrap(svc.KindModel, context.Canceled, "m"), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := svc.ReasonOf(tt.err); got != tt.want {
				t.Errorf("ReasonOf = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestErrorInfoRoundTrip(t *testing.T) {
	if svc.ErrorInfoOf(nil) != nil {
		t.Error("ErrorInfoOf(nil) is not nil")
	}
	var none *svc.ErrorInfo
	if err := none.Err(); err != nil {
		t.Errorf("nil ErrorInfo.Err() = %#v, want a nil error", err)
	}
	tests := []struct {
		name     string
		err      error
		wantType svc.Kind
	}{
		{"domain", &svc.Error{Kind: svc.KindBudgetExceeded, Message: "used 120 of 100 tokens", Reason: "budget"}, svc.KindBudgetExceeded},
		{"wrapped", fmt.Errorf("run: %w", &svc.Error{Kind: svc.KindTopology, Message: "cycle", Reason: "cycle"}), svc.KindTopology},
		{"deadline", fmt.Errorf("model: %w", context.DeadlineExceeded), svc.KindTimeout},
		{"plain", errors.New("disk on fire"), svc.KindRuntime},
		{"unknown kind", &svc.Error{Kind: "FooError", Message: "new"}, "FooError"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			info := svc.ErrorInfoOf(tt.err)
			if info.Type != string(tt.wantType) || info.Message != tt.err.Error() || info.Reason != svc.ReasonOf(tt.err) {
				t.Fatalf("ErrorInfoOf = %+v, want type %s, message %q, reason %q", info, tt.wantType, tt.err.Error(), svc.ReasonOf(tt.err))
			}
			back := info.Err()
			if svc.KindOf(back) != tt.wantType {
				t.Errorf("Err() kind = %s, want %s", svc.KindOf(back), tt.wantType)
			}
			if back.Error() != tt.err.Error() {
				t.Errorf("Err() text = %q, want %q", back.Error(), tt.err.Error())
			}
			if svc.ReasonOf(back) != info.Reason {
				t.Errorf("Err() reason = %q, want %q", svc.ReasonOf(back), info.Reason)
			}
			for _, a := range ancestors(tt.wantType) {
				if s, known := sentinels[a]; known && !errors.Is(back, s) {
					t.Errorf("Err() does not match Err%s", a)
				}
			}
			if again := svc.ErrorInfoOf(back); *again != *info {
				t.Errorf("second trip = %+v, want %+v", again, info)
			}
		})
	}
}
