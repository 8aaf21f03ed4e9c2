package model_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/model"
)

// instance is a model whose identity the tests can compare.
type instance struct{ name string }

func (m *instance) Generate(context.Context, svc.ModelRequest) (svc.ModelResponse, error) {
	return svc.ModelResponse{Output: json.RawMessage(`"` + m.name + `"`)}, nil
}

func TestResolve(t *testing.T) {
	var calls []string
	r := model.NewRegistry()
	r.Register("fake", func(name string) (svc.Model, error) {
		calls = append(calls, name)
		return &instance{name: name}, nil
	})

	m1, err := r.Resolve("fake:alpha")
	if err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	m2, err := r.Resolve("fake:alpha")
	if err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	if m1 == m2 {
		t.Error("two Resolve calls returned the same instance; want a new one each time")
	}
	// The name part may itself contain ':' (e.g. "ollama:llama3:8b").
	if _, err := r.Resolve("fake:llama3:8b"); err != nil {
		t.Fatalf("Resolve with ':' in the name: %v", err)
	}
	if want := []string{"alpha", "alpha", "llama3:8b"}; fmt.Sprint(calls) != fmt.Sprint(want) {
		t.Errorf("factory got names %q, want %q", calls, want)
	}
}

func TestResolveErrors(t *testing.T) {
	cause := errors.New("no API key")
	r := model.NewRegistry()
	r.Register("b", func(string) (svc.Model, error) { return &instance{}, nil })
	r.Register("a", func(string) (svc.Model, error) { return &instance{}, nil })
	r.Register("broken", func(string) (svc.Model, error) { return nil, cause })
	r.Register("kinded", func(name string) (svc.Model, error) {
		return nil, svc.Errorf(svc.KindSpecValidation, "bad name %q", name)
	})
	r.Register("nil", func(string) (svc.Model, error) { return nil, nil })

	tests := []struct {
		id       string
		kind     svc.Kind
		contains []string
	}{
		{"nope:x", svc.KindRegistry, []string{`model "nope:x": unknown provider "nope" (known: a, b, broken, kinded, nil)`}},
		{"noseparator", svc.KindSpecValidation, []string{`"noseparator"`, "provider:name"}},
		{":x", svc.KindSpecValidation, []string{"provider:name"}},
		{"a:", svc.KindSpecValidation, []string{"provider:name"}},
		{"broken:x", svc.KindRegistry, []string{`model "broken:x": no API key`}},
		{"kinded:x", svc.KindSpecValidation, []string{`model "kinded:x": bad name "x"`}},
		{"nil:x", svc.KindRegistry, []string{"returned no model"}},
	}
	for _, tt := range tests {
		t.Run(tt.id, func(t *testing.T) {
			m, err := r.Resolve(tt.id)
			if err == nil {
				t.Fatalf("Resolve(%q) = %v, want error", tt.id, m)
			}
			var se *svc.Error
			if !errors.As(err, &se) || se.Kind != tt.kind {
				t.Fatalf("Resolve(%q) error %v (%T), want *svc.Error of kind %s", tt.id, err, err, tt.kind)
			}
			for _, s := range tt.contains {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not contain %q", err, s)
				}
			}
		})
	}

	_, err := r.Resolve("broken:x")
	if !errors.Is(err, cause) {
		t.Errorf("factory error not in the chain: %v", err)
	}
	// Wrapped once: the id appears a single time.
	if n := strings.Count(err.Error(), "broken:x"); n != 1 {
		t.Errorf("error %q names the id %d times, want 1", err, n)
	}
}

func TestRegisterReplacesAndPanics(t *testing.T) {
	r := model.NewRegistry()
	r.Register("p", func(string) (svc.Model, error) { return &instance{name: "old"}, nil })
	r.Register("p", func(string) (svc.Model, error) { return &instance{name: "new"}, nil })
	m, err := r.Resolve("p:x")
	if err != nil {
		t.Fatal(err)
	}
	if got := m.(*instance).name; got != "new" {
		t.Errorf("after re-Register, Resolve used the %q factory, want new", got)
	}

	for _, tc := range []struct {
		name     string
		provider string
		f        model.Factory
	}{
		{"nil factory", "p", nil},
		{"empty provider", "", func(string) (svc.Model, error) { return nil, nil }},
		{"colon in provider", "a:b", func(string) (svc.Model, error) { return nil, nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Errorf("Register(%q, ...) did not panic", tc.provider)
				}
			}()
			r.Register(tc.provider, tc.f)
		})
	}
}

func TestProviders(t *testing.T) {
	r := model.NewRegistry()
	if got := r.Providers(); len(got) != 0 {
		t.Errorf("empty registry Providers() = %q", got)
	}
	for _, p := range []string{"openai", "anthropic", "test"} {
		r.Register(p, func(string) (svc.Model, error) { return &instance{}, nil })
	}
	if got, want := r.Providers(), []string{"anthropic", "openai", "test"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Providers() = %q, want %q", got, want)
	}
}

func TestConcurrentUse(t *testing.T) {
	r := model.NewRegistry()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := fmt.Sprintf("p%d", i)
			for range 100 {
				r.Register(p, func(string) (svc.Model, error) { return &instance{}, nil })
				if _, err := r.Resolve(p + ":x"); err != nil {
					t.Error(err)
					return
				}
				_ = r.Providers()
			}
		}()
	}
	wg.Wait()
	if n := len(r.Providers()); n != 8 {
		t.Errorf("%d providers registered, want 8", n)
	}
}

func TestDefault(t *testing.T) {
	r := model.Default()
	if got := r.Providers(); fmt.Sprint(got) != "[test]" {
		t.Errorf("Default().Providers() = %q, want [test]", got)
	}
	// Each call is a fresh registry: registering on one leaves the next alone.
	r.Register("extra", func(string) (svc.Model, error) { return &instance{}, nil })
	if got := model.Default().Providers(); fmt.Sprint(got) != "[test]" {
		t.Errorf("Default() shares state across calls: %q", got)
	}

	m, err := r.Resolve("test:echo")
	if err != nil {
		t.Fatalf("Resolve(test:echo): %v", err)
	}
	in := json.RawMessage(`{"q":"hi"}`)
	resp, err := m.Generate(context.Background(), svc.ModelRequest{
		Model:    "echo",
		Messages: []svc.Message{{Role: svc.RoleUser, Content: in}},
	})
	if err != nil {
		t.Fatalf("echo Generate: %v", err)
	}
	if string(resp.Output) != string(in) {
		t.Errorf("echo answered %s, want %s", resp.Output, in)
	}

	if _, err := r.Resolve("test:no-such-model"); err == nil {
		t.Error("Resolve(test:no-such-model) succeeded")
	}
}

// Per-agent state lives in the instance: fail_times counts the calls of one
// resolved model, not of every model of the provider.
func TestDefaultInstancesDoNotShareState(t *testing.T) {
	r := model.Default()
	req := svc.ModelRequest{
		Model:    "echo",
		Messages: []svc.Message{{Role: svc.RoleUser, Content: json.RawMessage(`"x"`)}},
		Settings: map[string]any{"fail_times": 1},
	}
	for i := range 2 {
		m, err := r.Resolve("test:echo")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Generate(context.Background(), req); err == nil {
			t.Errorf("instance %d: first call succeeded, want the fail_times failure", i)
		}
		if _, err := m.Generate(context.Background(), req); err != nil {
			t.Errorf("instance %d: second call failed: %v", i, err)
		}
	}
}

// Model ids come from spec files and request bodies: Resolve must never
// panic and must fail only with the documented kinds.
func FuzzResolve(f *testing.F) {
	for _, s := range []string{"test:echo", "test:fail", "test:", ":", "", "nope:x", "test:a:b", "\x00:\xff"} {
		f.Add(s)
	}
	r := model.Default()
	f.Fuzz(func(t *testing.T, id string) {
		m, err := r.Resolve(id)
		if err != nil {
			if k := svc.KindOf(err); k != svc.KindRegistry && k != svc.KindSpecValidation {
				t.Fatalf("Resolve(%q): kind %s: %v", id, k, err)
			}
			return
		}
		if m == nil {
			t.Fatalf("Resolve(%q) returned nil model and nil error", id)
		}
	})
}
