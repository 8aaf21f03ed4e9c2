package svc_test

import (
	"context"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc"
)

func TestDefaultOptions(t *testing.T) {
	o := svc.DefaultOptions()
	want := svc.Options{TimeoutSeconds: 300, MaxSpawnDepth: 4, MaxSpawnChildren: 32, RetryMaxAttempts: 1, RetryBackoffFactor: 1.5, TokenBudget: 0, MCPEagerStart: false,
		DeltaIntervalMS: 50, DeltaBytes: 256}
	if !reflect.DeepEqual(o, want) {
		t.Errorf("DefaultOptions() = %+v, want %+v", o, want)
	}
	if err := o.Validate(); err != nil {
		t.Errorf("defaults do not validate: %v", err)
	}
	if o.Timeout() != 300*time.Second {
		t.Errorf("Timeout() = %v", o.Timeout())
	}
	s := o.String()
	for _, part := range []string{"timeout_seconds=300", "max_spawn_depth=4", "retry_max_attempts=1", "retry_backoff_factor=1.5", "token_budget=0", "max_tokens_per_run=0", "mcp_eager_start=false", "max_spawn_children=32"} {
		if !strings.Contains(s, part) {
			t.Errorf("String() = %q lacks %q", s, part)
		}
	}
}

func TestOptionsValidate(t *testing.T) {
	with := func(mod func(o *svc.Options)) svc.Options {
		o := svc.DefaultOptions()
		mod(&o)
		return o
	}
	tests := []struct {
		name    string
		opts    svc.Options
		wantErr string // the option named in the error; "" for valid
	}{
		{"small timeout", with(func(o *svc.Options) { o.TimeoutSeconds = 0.001 }), ""},
		{"depth zero", with(func(o *svc.Options) { o.MaxSpawnDepth = 0 }), ""},
		{"factor one", with(func(o *svc.Options) { o.RetryBackoffFactor = 1 }), ""},
		{"budget", with(func(o *svc.Options) { o.TokenBudget = 1000 }), ""},
		{"eager", with(func(o *svc.Options) { o.MCPEagerStart = true; o.RetryMaxAttempts = 5 }), ""},
		{"zero timeout", with(func(o *svc.Options) { o.TimeoutSeconds = 0 }), "timeout_seconds"},
		{"negative timeout", with(func(o *svc.Options) { o.TimeoutSeconds = -1 }), "timeout_seconds"},
		{"NaN timeout", with(func(o *svc.Options) { o.TimeoutSeconds = math.NaN() }), "timeout_seconds"},
		{"infinite timeout", with(func(o *svc.Options) { o.TimeoutSeconds = math.Inf(1) }), "timeout_seconds"},
		{"negative depth", with(func(o *svc.Options) { o.MaxSpawnDepth = -1 }), "max_spawn_depth"},
		{"one child", with(func(o *svc.Options) { o.MaxSpawnChildren = 1 }), ""},
		{"zero children", with(func(o *svc.Options) { o.MaxSpawnChildren = 0 }), "max_spawn_children"},
		{"negative children", with(func(o *svc.Options) { o.MaxSpawnChildren = -3 }), "max_spawn_children"},
		{"zero attempts", with(func(o *svc.Options) { o.RetryMaxAttempts = 0 }), "retry_max_attempts"},
		{"factor below one", with(func(o *svc.Options) { o.RetryBackoffFactor = 0.5 }), "retry_backoff_factor"},
		{"zero factor", with(func(o *svc.Options) { o.RetryBackoffFactor = 0 }), "retry_backoff_factor"},
		{"NaN factor", with(func(o *svc.Options) { o.RetryBackoffFactor = math.NaN() }), "retry_backoff_factor"},
		{"infinite factor", with(func(o *svc.Options) { o.RetryBackoffFactor = math.Inf(1) }), "retry_backoff_factor"},
		{"negative budget", with(func(o *svc.Options) { o.TokenBudget = -1 }), "token_budget"},
		{"negative per-run cap", with(func(o *svc.Options) { o.MaxTokensPerRun = -1 }), "max_tokens_per_run"},
		{"zero value", svc.Options{}, "timeout_seconds"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.opts.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Errorf("Validate() = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, svc.ErrSpecValidation) {
				t.Fatalf("Validate() = %v, want a SpecValidationError", err)
			}
			if !strings.HasPrefix(err.Error(), tt.wantErr+" ") {
				t.Errorf("Validate() = %q, want it to name %s", err, tt.wantErr)
			}
		})
	}
}

func TestOptionsBackoff(t *testing.T) {
	tests := []struct {
		factor  float64
		attempt int
		want    time.Duration
	}{
		{1.5, -1, 0},
		{1.5, 0, 0},
		{1.5, 1, 0},
		{1.5, 2, svc.RetryBackoffBase},
		{1.5, 2, 100 * time.Millisecond},
		{1.5, 3, 150 * time.Millisecond},
		{1.5, 4, 225 * time.Millisecond},
		{2, 5, 800 * time.Millisecond},
		{1, 10, 100 * time.Millisecond},
	}
	for _, tt := range tests {
		o := svc.Options{RetryBackoffFactor: tt.factor}
		if got := o.Backoff(tt.attempt); got != tt.want {
			t.Errorf("factor %v: Backoff(%d) = %v, want %v", tt.factor, tt.attempt, got, tt.want)
		}
	}
}

func TestOptionsTimeout(t *testing.T) {
	for secs, want := range map[float64]time.Duration{0.2: 200 * time.Millisecond, 1: time.Second, 60: time.Minute} {
		if got := (svc.Options{TimeoutSeconds: secs}).Timeout(); got != want {
			t.Errorf("Timeout() for %v s = %v, want %v", secs, got, want)
		}
	}
}

func TestContextHelpers(t *testing.T) {
	bg := context.Background()
	if svc.RequestIDFrom(bg) != "" || svc.DepthFrom(bg) != -1 || svc.ParentTraceFrom(bg) != "" {
		t.Fatal("an empty context carries values")
	}
	ctx := svc.WithRequestID(bg, "req")
	if svc.RequestIDFrom(ctx) != "req" {
		t.Errorf("RequestIDFrom = %q", svc.RequestIDFrom(ctx))
	}
	// The keys are distinct: setting one does not set the others.
	if svc.DepthFrom(ctx) != -1 || svc.ParentTraceFrom(ctx) != "" {
		t.Error("WithRequestID leaked into another key")
	}
	ctx = svc.WithDepth(ctx, 0)
	if svc.DepthFrom(ctx) != 0 {
		t.Errorf("DepthFrom = %d, want 0 (set, not absent)", svc.DepthFrom(ctx))
	}
	ctx = svc.WithParentTrace(ctx, "parent")
	ctx = svc.WithDepth(ctx, 3)
	if svc.DepthFrom(ctx) != 3 || svc.ParentTraceFrom(ctx) != "parent" || svc.RequestIDFrom(ctx) != "req" {
		t.Errorf("got depth %d, parent %q, request %q", svc.DepthFrom(ctx), svc.ParentTraceFrom(ctx), svc.RequestIDFrom(ctx))
	}
	// A plain string key of the same text cannot collide with them.
	type foreign string
	other := context.WithValue(bg, foreign("requestID"), "x")
	if svc.RequestIDFrom(other) != "" {
		t.Error("a foreign key collides with the request id key")
	}
}
