package openai

import (
	"cmp"
	"net"
	"net/url"
	"os"
	"strings"

	"github.com/openai/openai-go/v3/azure"
	"github.com/openai/openai-go/v3/option"

	svc "github.com/svc-dev/svc"
)

// AzureProvider is the provider name of Azure OpenAI: "azure:<deployment>".
const AzureProvider = "azure"

// DefaultAzureAPIVersion is the Azure OpenAI data-plane API version used
// when neither AZURE_OPENAI_API_VERSION nor OPENAI_API_VERSION is set: the
// latest generally available one as of 2025-11.
const DefaultAzureAPIVersion = "2024-10-21"

// AzureConfig is what makes a model call Azure OpenAI (Config.Azure).
type AzureConfig struct {
	// APIVersion is sent as the api-version query parameter.
	APIVersion string
}

// NewAzure returns a model of the Azure OpenAI deployment named name,
// configured from the environment: the resource endpoint
// AZURE_OPENAI_ENDPOINT (https://<resource>.openai.azure.com; or
// model_settings base_url), the key AZURE_OPENAI_API_KEY (or
// model_settings api_key, api_key_env), the API version
// AZURE_OPENAI_API_VERSION, else OPENAI_API_VERSION, else
// DefaultAzureAPIVersion. It is a model.Factory for provider "azure".
// Calls go through openai-go's azure package: POST
// {endpoint}/openai/deployments/{name}/chat/completions?api-version=...
// with the key in the api-key header.
func NewAzure(name string) (svc.Model, error) {
	return NewWithConfig(name, Config{
		Provider:   AzureProvider,
		KeyEnv:     "AZURE_OPENAI_API_KEY",
		RequireKey: true,
		BaseURLEnv: "AZURE_OPENAI_ENDPOINT",
		Azure: &AzureConfig{APIVersion: cmp.Or(os.Getenv("AZURE_OPENAI_API_VERSION"),
			os.Getenv("OPENAI_API_VERSION"), DefaultAzureAPIVersion)},
	})
}

// options point a call at the Azure resource endpoint with key. Plain
// http is allowed to a loopback address only (a local test server or
// proxy); openai-go refuses to send the key anywhere else without TLS.
func (a *AzureConfig) options(endpoint *url.URL, key string) []option.RequestOption {
	opts := []option.RequestOption{
		azure.WithEndpoint(strings.TrimSuffix(endpoint.String(), "/"), a.APIVersion),
		azure.WithAPIKey(key),
	}
	if endpoint.Scheme == "http" && loopback(endpoint.Hostname()) {
		opts = append(opts, azure.WithUnsafeAllowHTTP())
	}
	return opts
}

func loopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
