// Package providers registers the hosted model providers linked into a
// binary: "openai" (any OpenAI-compatible endpoint) and "anthropic". They
// live outside package model so that an embedding host that needs only the
// test provider, or its own, does not link the SDKs.
package providers

import (
	"github.com/svc-dev/svc/model"
	"github.com/svc-dev/svc/model/anthropic"
	"github.com/svc-dev/svc/model/openai"
)

// Register adds the openai and anthropic providers to r, replacing any
// provider registered under those names.
func Register(r *model.Registry) {
	r.Register(openai.Provider, openai.New)
	r.Register(anthropic.Provider, anthropic.New)
}

// Default returns model.Default() (the test provider) with the hosted
// providers registered.
func Default() *model.Registry {
	r := model.Default()
	Register(r)
	return r
}
