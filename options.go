package svc

import (
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"time"
)

// Options are the runtime options of the spec, by the same names in
// runtime.yaml and as `svc serve` flags.
type Options struct {
	// TimeoutSeconds bounds one run (a Run, one gather task); 300 by default.
	TimeoutSeconds float64 `json:"timeout_seconds" yaml:"timeout_seconds"`
	// MaxSpawnDepth is the deepest nesting of agent invocations; 4 by default.
	// A top-level run is depth 0.
	MaxSpawnDepth int `json:"max_spawn_depth" yaml:"max_spawn_depth"`
	// RetryMaxAttempts is how many times an invocation runs at most; 1 (no
	// retry) by default.
	RetryMaxAttempts int `json:"retry_max_attempts" yaml:"retry_max_attempts"`
	// RetryBackoffFactor grows the pause between attempts: attempt n+1 waits
	// RetryBackoffBase × factor^(n-1). 1.5 by default.
	RetryBackoffFactor float64 `json:"retry_backoff_factor" yaml:"retry_backoff_factor"`
	// TokenBudget is one token budget for the whole runtime, shared by
	// every run, as in the spec: each model call reserves an estimate
	// against it first (the pre-check) and charges what it used after (the
	// post-charge). The call whose post-charge spends it keeps its answer
	// (its budget_exceeded event has the overshoot); from then on, every
	// run is refused with a BudgetExceededError (429) until the process
	// restarts or an operator resets it. 0 means no budget.
	TokenBudget int64 `json:"token_budget" yaml:"token_budget"`
	// MaxTokensPerRun caps the tokens of one run (all its invocations and
	// the runs nested in it) when its TaskSpec has no TokenBudget of its
	// own; in a gather each task is a run. 0 means no per-run cap. This
	// limit is separate from TokenBudget, and both apply.
	MaxTokensPerRun int64 `json:"max_tokens_per_run" yaml:"max_tokens_per_run"`
	// MaxSpawnChildren is the most children one spawn_agents call may ask
	// for; 32 by default. A call asking for more ends its run with a
	// SpawnCapError: the bound on one call's fan-out, beside
	// MaxSpawnDepth's bound on nesting.
	MaxSpawnChildren int `json:"max_spawn_children" yaml:"max_spawn_children"`
	// ApprovalTimeoutSeconds and ApprovalTimeoutAction are the defaults of
	// the agents' (svc.Agent): how long a submitted run waits for an
	// approval or an answer (0: for ever) and what happens then ("deny",
	// the default, or "fail").
	ApprovalTimeoutSeconds float64 `json:"approval_timeout_seconds,omitempty" yaml:"approval_timeout_seconds"`
	ApprovalTimeoutAction  string  `json:"approval_timeout_action,omitempty" yaml:"approval_timeout_action"`
	// MCPEagerStart starts MCP tool servers with the runtime instead of on
	// first use.
	MCPEagerStart bool `json:"mcp_eager_start" yaml:"mcp_eager_start"`
	// DeltaIntervalMS and DeltaBytes coalesce a streamed answer's fragments:
	// an invocation's fragments are handed on together at most once per
	// DeltaIntervalMS milliseconds, or as soon as DeltaBytes bytes wait, so
	// a fast model cannot flood the subscribers (50 and 256 by default).
	// The first fragment, and one after a pause longer than the interval,
	// go at once. 0 for both hands on every fragment as it comes.
	DeltaIntervalMS int `json:"delta_interval_ms" yaml:"delta_interval_ms"`
	DeltaBytes      int `json:"delta_bytes" yaml:"delta_bytes"`
	// RateLimits are named limits on the calls to model providers; an
	// agent draws from one by naming it (model_settings.rate_limit), and
	// agents that name the same one share it (one API key used by
	// several agents). None by default.
	RateLimits map[string]RateLimit `json:"rate_limits,omitempty" yaml:"rate_limits"`
}

// RateLimit is what a named limit allows (package ratelimit paces it);
// zero fields do not limit. Per-minute limits are paced evenly: a second's
// worth may go at once, never a minute's.
type RateLimit struct {
	RequestsPerMinute float64 `json:"requests_per_minute,omitempty" yaml:"requests_per_minute"`
	TokensPerMinute   float64 `json:"tokens_per_minute,omitempty" yaml:"tokens_per_minute"`
	MaxConcurrent     int     `json:"max_concurrent,omitempty" yaml:"max_concurrent"`
}

// Validate refuses negative or non-finite values, and a limit that
// limits nothing.
func (l RateLimit) Validate() error {
	for _, f := range []struct {
		name string
		v    float64
	}{{"requests_per_minute", l.RequestsPerMinute}, {"tokens_per_minute", l.TokensPerMinute}} {
		if f.v < 0 || math.IsNaN(f.v) || math.IsInf(f.v, 0) {
			return Errorf(KindSpecValidation, "%s %v: must be a positive number", f.name, f.v)
		}
	}
	if l.MaxConcurrent < 0 {
		return Errorf(KindSpecValidation, "max_concurrent %d: must be a positive number", l.MaxConcurrent)
	}
	if l == (RateLimit{}) {
		return Errorf(KindSpecValidation, "give requests_per_minute, tokens_per_minute or max_concurrent")
	}
	return nil
}

// RetryBackoffBase is the pause before the first retry.
const RetryBackoffBase = 100 * time.Millisecond

// DefaultOptions returns the defaults of docs/specs.md, "Runtime options".
func DefaultOptions() Options {
	return Options{
		TimeoutSeconds:     300,
		MaxSpawnDepth:      4,
		MaxSpawnChildren:   32,
		RetryMaxAttempts:   1,
		RetryBackoffFactor: 1.5,
		DeltaIntervalMS:    50,
		DeltaBytes:         256,
	}
}

// IsZero reports whether o is the zero Options (no option given at all),
// which a runtime takes for DefaultOptions.
func (o Options) IsZero() bool { return reflect.DeepEqual(o, Options{}) }

// Timeout is TimeoutSeconds as a duration.
func (o Options) Timeout() time.Duration {
	return time.Duration(o.TimeoutSeconds * float64(time.Second))
}

// Backoff is the pause before attempt number attempt (2 for the first retry).
func (o Options) Backoff(attempt int) time.Duration {
	if attempt < 2 {
		return 0
	}
	return time.Duration(float64(RetryBackoffBase) * math.Pow(o.RetryBackoffFactor, float64(attempt-2)))
}

// Validate rejects options no runtime can honour.
func (o Options) Validate() error {
	switch {
	case !(o.TimeoutSeconds > 0) || math.IsInf(o.TimeoutSeconds, 0):
		return Errorf(KindSpecValidation, "timeout_seconds %v: must be a positive number", o.TimeoutSeconds)
	case o.MaxSpawnDepth < 0:
		return Errorf(KindSpecValidation, "max_spawn_depth %d: must be 0 or more", o.MaxSpawnDepth)
	case o.MaxSpawnChildren < 1:
		return Errorf(KindSpecValidation, "max_spawn_children %d: must be 1 or more", o.MaxSpawnChildren)
	case o.RetryMaxAttempts < 1:
		return Errorf(KindSpecValidation, "retry_max_attempts %d: must be 1 or more", o.RetryMaxAttempts)
	case o.RetryBackoffFactor < 1 || math.IsInf(o.RetryBackoffFactor, 0) || math.IsNaN(o.RetryBackoffFactor):
		return Errorf(KindSpecValidation, "retry_backoff_factor %v: must be 1 or more", o.RetryBackoffFactor)
	case o.TokenBudget < 0:
		return Errorf(KindSpecValidation, "token_budget %d: must be 0 (none) or more", o.TokenBudget)
	case o.MaxTokensPerRun < 0:
		return Errorf(KindSpecValidation, "max_tokens_per_run %d: must be 0 (none) or more", o.MaxTokensPerRun)
	case o.ApprovalTimeoutSeconds < 0 || math.IsInf(o.ApprovalTimeoutSeconds, 0) || math.IsNaN(o.ApprovalTimeoutSeconds):
		return Errorf(KindSpecValidation, "approval_timeout_seconds %v: must be 0 (none) or a positive number", o.ApprovalTimeoutSeconds)
	case o.ApprovalTimeoutAction != "" && o.ApprovalTimeoutAction != TimeoutDeny && o.ApprovalTimeoutAction != TimeoutFail:
		return Errorf(KindSpecValidation, "approval_timeout_action %q: want deny or fail", o.ApprovalTimeoutAction)
	case o.DeltaIntervalMS < 0:
		return Errorf(KindSpecValidation, "delta_interval_ms %d: must be 0 (no wait) or more", o.DeltaIntervalMS)
	case o.DeltaBytes < 0:
		return Errorf(KindSpecValidation, "delta_bytes %d: must be 0 (no limit) or more", o.DeltaBytes)
	}
	for _, name := range slices.Sorted(maps.Keys(o.RateLimits)) {
		if !ValidName(name) {
			return Errorf(KindSpecValidation, "rate_limits: name %q: use letters, digits, '_', '-' and '.', starting with a letter or digit", name)
		}
		if err := o.RateLimits[name].Validate(); err != nil {
			return Wrap(KindSpecValidation, err, "rate_limits."+name)
		}
	}
	return nil
}

// String is a compact description for logs.
func (o Options) String() string {
	return fmt.Sprintf("timeout_seconds=%v max_spawn_depth=%d retry_max_attempts=%d retry_backoff_factor=%v token_budget=%d max_tokens_per_run=%d mcp_eager_start=%v delta_interval_ms=%d delta_bytes=%d max_spawn_children=%d",
		o.TimeoutSeconds, o.MaxSpawnDepth, o.RetryMaxAttempts, o.RetryBackoffFactor, o.TokenBudget, o.MaxTokensPerRun, o.MCPEagerStart, o.DeltaIntervalMS, o.DeltaBytes, o.MaxSpawnChildren)
}

// Version is the version of svc. Nothing has been released yet.
const Version = "0.0.0"
