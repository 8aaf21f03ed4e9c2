// Package model resolves "provider:name" model identifiers to svc.Model
// instances through a registry of provider factories.
package model

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/model/testmodel"
)

// Factory builds a model of one provider from the name part of
// "provider:name". It returns a new instance on every call: per-instance
// state (a test model's fail_times counter, a provider client's connection
// pool) then belongs to the one agent that resolved it.
type Factory func(name string) (svc.Model, error)

// Registry maps provider names to factories. It is safe for concurrent use.
type Registry struct {
	mu        sync.RWMutex
	factories map[string]Factory
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{factories: make(map[string]Factory)}
}

// Default returns a new registry holding the providers every build has: the
// deterministic "test" provider. Each call returns a fresh registry, so a
// caller may register more providers without affecting anyone else.
func Default() *Registry {
	r := NewRegistry()
	r.Register("test", testmodel.New)
	return r
}

// Register makes provider resolvable through f, replacing any factory
// registered under the same name (so a host can override a built-in
// provider). It panics on a nil factory or a provider name that could never
// be resolved: those are programming errors, like a nil http.Handler.
func (r *Registry) Register(provider string, f Factory) {
	if f == nil {
		panic("model: Register " + provider + ": nil factory")
	}
	if provider == "" || strings.Contains(provider, ":") {
		panic(fmt.Sprintf("model: Register %q: provider name must be non-empty and contain no ':'", provider))
	}
	r.mu.Lock()
	r.factories[provider] = f
	r.mu.Unlock()
}

// Resolve builds a new model for id ("provider:name"). A malformed id is a
// SpecValidationError, an unknown provider a RegistryError; an error from
// the provider's factory is returned with the id added, keeping its kind
// when it has one and RegistryError otherwise.
func (r *Registry) Resolve(id string) (svc.Model, error) {
	provider, name, err := svc.ParseModelID(id)
	if err != nil {
		return nil, svc.Wrap(svc.KindSpecValidation, err, "")
	}
	r.mu.RLock()
	f, ok := r.factories[provider]
	r.mu.RUnlock()
	if !ok {
		return nil, svc.Errorf(svc.KindRegistry, "model %q: unknown provider %q (known: %s)",
			id, provider, strings.Join(r.Providers(), ", "))
	}
	m, err := f(name)
	if err != nil {
		kind := svc.KindRegistry
		var se *svc.Error
		if errors.As(err, &se) {
			kind = se.Kind
		}
		return nil, svc.Wrap(kind, err, fmt.Sprintf("model %q", id))
	}
	if m == nil {
		return nil, svc.Errorf(svc.KindRegistry, "model %q: provider %q returned no model", id, provider)
	}
	return m, nil
}

// Providers returns the registered provider names, sorted.
func (r *Registry) Providers() []string {
	r.mu.RLock()
	out := make([]string, 0, len(r.factories))
	for p := range r.factories {
		out = append(out, p)
	}
	r.mu.RUnlock()
	slices.Sort(out)
	return out
}
