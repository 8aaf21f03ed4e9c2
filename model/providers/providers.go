// Package providers registers the hosted model providers linked into a
// binary: "openai" (any OpenAI-compatible endpoint), "anthropic", "azure"
// (Azure OpenAI), the OpenAI-compatible presets (groq, mistral, together,
// openrouter, ollama, vllm), "google" (alias "gemini") and "bedrock". They
// live outside package model so that an embedding host that needs only the
// test provider, or its own, does not link the SDKs.
package providers

import (
	"github.com/svc-dev/svc/model"
	"github.com/svc-dev/svc/model/anthropic"
	"github.com/svc-dev/svc/model/bedrock"
	"github.com/svc-dev/svc/model/google"
	"github.com/svc-dev/svc/model/openai"
)

// Register adds the hosted providers to r, replacing any provider
// registered under those names.
func Register(r *model.Registry) {
	r.Register(openai.Provider, openai.New)
	r.Register(anthropic.Provider, anthropic.New)
	r.Register(openai.AzureProvider, openai.NewAzure)
	for _, p := range openai.Presets {
		r.Register(p.Name, p.New)
	}
	r.Register(google.Provider, google.New)
	r.Register(google.Alias, google.NewGemini)
	r.Register(bedrock.Provider, bedrock.New)
}

// Default returns model.Default() (the test provider) with the hosted
// providers registered.
func Default() *model.Registry {
	r := model.Default()
	Register(r)
	return r
}
