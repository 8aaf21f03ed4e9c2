package openai

import (
	"cmp"
	"os"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/model"
)

// Preset is an OpenAI-compatible service under a provider name of its
// own: "groq:llama-3.3-70b" is the openai provider pointed at Groq's base
// URL with $GROQ_API_KEY. Everything else (settings, streaming, tool
// calls, errors) is the openai provider's.
type Preset struct {
	// Name is the provider name in model ids.
	Name string
	// BaseURL is the default base URL; empty when the service has none
	// (vLLM runs wherever it is deployed).
	BaseURL string
	// BaseURLEnv names the environment variable that overrides BaseURL.
	BaseURLEnv string
	// KeyEnv names the environment variable holding the API key (never
	// OPENAI_API_KEY's, which is not sent to another company).
	KeyEnv string
	// KeyRequired makes a call without a key fail before any request.
	KeyRequired bool
}

// Presets are the OpenAI-compatible services with a provider name of
// their own.
var Presets = []Preset{
	{Name: "groq", BaseURL: "https://api.groq.com/openai/v1", BaseURLEnv: "GROQ_BASE_URL", KeyEnv: "GROQ_API_KEY", KeyRequired: true},
	{Name: "mistral", BaseURL: "https://api.mistral.ai/v1", BaseURLEnv: "MISTRAL_BASE_URL", KeyEnv: "MISTRAL_API_KEY", KeyRequired: true},
	{Name: "together", BaseURL: "https://api.together.xyz/v1", BaseURLEnv: "TOGETHER_BASE_URL", KeyEnv: "TOGETHER_API_KEY", KeyRequired: true},
	{Name: "openrouter", BaseURL: "https://openrouter.ai/api/v1", BaseURLEnv: "OPENROUTER_BASE_URL", KeyEnv: "OPENROUTER_API_KEY", KeyRequired: true},
	{Name: "ollama", BaseURL: "http://localhost:11434/v1", BaseURLEnv: "OLLAMA_BASE_URL", KeyEnv: "OLLAMA_API_KEY"},
	{Name: "vllm", BaseURLEnv: "VLLM_BASE_URL", KeyEnv: "VLLM_API_KEY"},
}

// Config is the openai provider's configuration of the preset, read from
// the environment when New is called.
func (p Preset) Config() Config {
	cfg := Config{Provider: p.Name, KeyEnv: p.KeyEnv, RequireKey: p.KeyRequired, BaseURLEnv: p.BaseURLEnv}
	if p.BaseURL != "" {
		cfg.BaseURL = cmp.Or(os.Getenv(p.BaseURLEnv), p.BaseURL)
	}
	return cfg
}

// New is the preset's model.Factory: the openai provider configured by
// Config: its base URL $BaseURLEnv, else BaseURL; its key $KeyEnv.
func (p Preset) New(name string) (svc.Model, error) {
	return NewWithConfig(name, p.Config())
}

// Factory is p.New as a model.Factory.
func (p Preset) Factory() model.Factory { return p.New }
