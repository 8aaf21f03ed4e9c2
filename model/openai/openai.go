// Package openai is the "openai" model provider: models behind the OpenAI
// Chat Completions API or any server that speaks it (Ollama, vLLM, LM
// Studio, llama.cpp, LiteLLM, Azure-style proxies); "azure", Azure OpenAI
// through openai-go's azure package (NewAzure); and the presets of
// OpenAI-compatible services (Presets: groq, mistral, together,
// openrouter, ollama, vllm). A call with server tools (builtin_tools
// web_search, code_execution) goes to the Responses API (responses.go). It uses the official
// SDK, github.com/openai/openai-go/v3, for transport, authentication and
// retries, and decodes the answer itself so that a malformed body from a
// compatible server is a ProviderError rather than a half-filled struct.
//
// # Endpoint and key
//
// The base URL is, first to last: model_settings base_url, Config.BaseURL,
// OPENAI_BASE_URL, https://api.openai.com/v1. The API key is:
// model_settings api_key, the environment variable named by model_settings
// api_key_env, Config.APIKey, OPENAI_API_KEY. The last two are sent only to
// the configured origin: an agent whose base_url points elsewhere gets no
// key unless its own settings give one, so a spec cannot make the process
// send its OpenAI key to another server. A call to api.openai.com without
// a key fails before any request with a ProviderError of ClassAuth; other
// servers are called without an Authorization header.
//
// # model_settings
//
// Read by the provider and never sent: api_key, api_key_env, base_url,
// timeout (the whole call including retries: seconds, or a duration such as
// "90s"), max_retries (0 to 100; default Config.MaxRetries). Mapped:
// temperature, top_p, seed, stop (a string or a list; stop_sequences, the
// Messages API's name, is added to it), max_tokens (sent as
// max_completion_tokens to api.openai.com, whose reasoning models reject
// max_tokens, and as max_tokens to every other server, since that is the
// field compatible servers accept). Other providers' settings are left
// out, since an agent's model_settings serve its fallback models too: the
// test provider's (latency_ms, tokens, fail_times, fail_on, output,
// call_tools, stream_interval_ms) and the anthropic provider's
// structured_output and prompt_cache always, and top_k and thinking, which
// api.openai.com rejects, for api.openai.com only. stream (true or false)
// is the runtime's: the provider streams when the request has OnDelta.
// stream_idle_timeout_ms bounds the wait for a stream's next chunk
// (DefaultStreamIdleTimeout). Every other key goes into the request body
// as given (tool_choice, reasoning_effort, max_completion_tokens, top_k
// for vLLM, ...), replacing a field of the same name; model, messages and
// stream_options are refused. A setting of the wrong type is a
// SpecValidationError, and no request is made.
//
// # Streaming
//
// With OnDelta set, the call is made with stream: true and
// stream_options.include_usage, each text fragment is handed to OnDelta as
// its chunk arrives, and the chunks are assembled (tool-call arguments from
// their fragments, usage from the last chunk) into the answer the plain
// call gives. A stream silent for its idle timeout fails with ClassTimeout;
// one cut short (a reset, no finish_reason) with ClassTimeout; a malformed
// chunk with ClassServer. Usage's prompt_tokens_details.cached_tokens, plain
// or streamed, is CachedInputTokens.
//
// # Messages and output
//
// The instructions are the system message. A message's content, a JSON
// value, is sent as text: a JSON string as its text, anything else as its
// JSON. A failed tool call's result is sent prefixed "Error: ", since Chat
// Completions has no error flag. Tool specs become function tools. An
// answer with tool calls gives ToolCalls (ids made up as call_<i> when a
// server sends none); otherwise the text is Output as a JSON string. With
// an OutputSchema the request carries response_format json_schema (strict
// only when the schema is within strict mode's subset; a non-object schema
// is wrapped as the property "value" and unwrapped from the answer), and
// Output is the JSON the model wrote, or its text as a JSON string when it
// is not JSON, for the agent's corrective call to deal with.
//
// # Retries and errors
//
// The SDK retries connection errors, 408, 409, 429 and 5xx with
// exponential backoff, honouring retry-after-ms and Retry-After (up to two
// minutes; a longer wait ends the retries at once). After them a failure is
// a *model.ProviderError whose Class comes from the HTTP status; no response
// at all is ClassTimeout for a timeout or dropped connection and
// ClassServer otherwise. A cancelled ctx yields an error wrapping
// ctx.Err(), never a ProviderError.
//
// # Rate-limit headers
//
// Every answer, success or failure, plain or streamed, carries what the
// last attempt's x-ratelimit-* and retry headers said
// (model.OpenAIRateHint) as ModelResponse.RateLimit or
// ProviderError.RateLimit, which a learned rate limit paces the key by.
package openai

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/model"
)

// Provider is the provider name in model ids: "openai:<model>".
const Provider = "openai"

// DefaultBaseURL is the OpenAI API.
const DefaultBaseURL = "https://api.openai.com/v1"

// DefaultMaxRetries is how often a failed call is retried when
// Config.MaxRetries is 0.
const DefaultMaxRetries = 2

// Config configures a model. Empty fields take their defaults.
type Config struct {
	// APIKey defaults to $OPENAI_API_KEY.
	APIKey string
	// BaseURL defaults to $OPENAI_BASE_URL, then DefaultBaseURL.
	BaseURL string
	// HTTPClient defaults to a client shared by every model of the package
	// (one connection pool per process, not per agent).
	HTTPClient *http.Client
	// MaxRetries is the number of retries after a failed attempt: 0 means
	// DefaultMaxRetries, a negative number means none.
	MaxRetries int
	// Provider names the provider in errors ("openai" when empty): a
	// preset's errors say "groq:llama-3.3-70b", not "openai:...".
	Provider string
	// KeyEnv is the environment variable APIKey defaults to
	// (OPENAI_API_KEY when empty), named in the error of a call made
	// without a key; RequireKey makes a call without a
	// key fail before any request, as a call to api.openai.com does.
	KeyEnv     string
	RequireKey bool
	// Azure, when set, makes the model call an Azure OpenAI resource: the
	// base URL is the resource endpoint, the key goes in the api-key
	// header, and the model name is the deployment (see NewAzure).
	Azure *AzureConfig
	// BaseURLEnv, when set and BaseURL is empty, is the environment
	// variable that names the base URL (read in place of OPENAI_BASE_URL);
	// when it is unset too, every call needs model_settings base_url.
	BaseURLEnv string
}

// New returns a model named name configured from the environment. It is a
// model.Factory for provider "openai".
func New(name string) (svc.Model, error) {
	return NewWithConfig(name, Config{})
}

// NewWithConfig returns a model named name (the part after "openai:").
// A bad base URL is a SpecValidationError. A missing key is reported by the
// first call, since the agent's model_settings may still supply one.
func NewWithConfig(name string, cfg Config) (svc.Model, error) {
	if strings.TrimSpace(name) == "" {
		return nil, svc.Errorf(svc.KindRegistry, "openai model: empty model name (want openai:<model>, e.g. openai:gpt-4o-mini)")
	}
	if cfg.APIKey == "" {
		// A preset reads its own variable, never OPENAI_API_KEY: the
		// OpenAI key must not go to another company's server.
		cfg.APIKey = os.Getenv(cmp.Or(cfg.KeyEnv, "OPENAI_API_KEY"))
	}
	var baseEnv string
	switch {
	case cfg.BaseURL != "":
	case cfg.BaseURLEnv != "":
		if cfg.BaseURL = os.Getenv(cfg.BaseURLEnv); cfg.BaseURL == "" {
			// A placeholder that no call uses (endpoint refuses first).
			baseEnv, cfg.BaseURL = cfg.BaseURLEnv, "http://unset.invalid"
		}
	default:
		if cfg.BaseURL = os.Getenv("OPENAI_BASE_URL"); cfg.BaseURL == "" {
			cfg.BaseURL = DefaultBaseURL
		}
	}
	base, err := parseBaseURL(cfg.BaseURL)
	if err != nil {
		return nil, svc.Errorf(svc.KindSpecValidation, "openai model %s: base URL %q: %v", name, cfg.BaseURL, err)
	}
	retries := cfg.MaxRetries
	switch {
	case retries == 0:
		retries = DefaultMaxRetries
	case retries < 0:
		retries = 0
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = sharedHTTPClient()
	}
	provider := cfg.Provider
	if provider == "" {
		provider = Provider
	}
	keyEnv := cfg.KeyEnv
	if keyEnv == "" {
		keyEnv = "OPENAI_API_KEY"
	}
	m := &chatModel{
		name:       name,
		provider:   provider,
		keyEnv:     keyEnv,
		requireKey: cfg.RequireKey,
		azure:      cfg.Azure,
		baseEnv:    baseEnv,
		apiKey:     cfg.APIKey,
		baseURL:    base,
		// Built without openai.NewClient, which would read OPENAI_* itself
		// (organisation, project, admin key, custom headers) and send them
		// to whatever base URL a call uses.
		chat:      sdk.NewChatCompletionService(option.WithHTTPClient(hc), option.WithMaxRetries(retries)),
		responses: responses.NewResponseService(option.WithHTTPClient(hc), option.WithMaxRetries(retries)),
		files:     sdk.NewFileService(option.WithHTTPClient(hc), option.WithMaxRetries(retries)),
		batches:   sdk.NewBatchService(option.WithHTTPClient(hc), option.WithMaxRetries(retries)),
	}
	if provider != Provider || cfg.Azure != nil {
		// Only OpenAI's own API (and servers that copy it) has the
		// Batch API this package speaks: a preset's or Azure's model is
		// a plain Model.
		return m, nil
	}
	return &batchModel{m}, nil
}

// sharedHTTPClient is the default transport: one pool for every model, and
// a bound on the wait for response headers so that a server that accepts a
// connection and never answers cannot hold a call (and its retries) forever
// when the caller set no deadline. A streamed call's headers come before
// its first token, a plain call's after its last, so the bound is generous.
var sharedHTTPClient = sync.OnceValue(func() *http.Client {
	if t, ok := http.DefaultTransport.(*http.Transport); ok {
		t = t.Clone()
		t.ResponseHeaderTimeout = 10 * time.Minute
		return &http.Client{Transport: t}
	}
	return &http.Client{Transport: http.DefaultTransport}
})

type chatModel struct {
	name       string
	provider   string // in errors: "openai", or a preset's or azure's name
	keyEnv     string // where the configured key comes from, for errors
	requireKey bool
	azure      *AzureConfig
	// baseEnv, when set, says that no base URL was configured and names
	// the variable that would give one: every call needs base_url.
	baseEnv string
	apiKey  string
	baseURL *url.URL
	chat    sdk.ChatCompletionService
	// responses makes the calls with server tools (responses.go).
	responses responses.ResponseService
	// files and batches serve provider batches (batch.go).
	files   sdk.FileService
	batches sdk.BatchService
}

// Generate makes one Chat Completions call. See the package doc for the
// settings and errors.
func (m *chatModel) Generate(ctx context.Context, req svc.ModelRequest) (resp svc.ModelResponse, err error) {
	name := req.Model
	if name == "" {
		name = m.name
	}
	// The SDK and the decoder are not expected to panic; if one does on
	// some server's odd answer, that is this call's failure, not the
	// process's.
	defer func() {
		if p := recover(); p != nil {
			resp, err = svc.ModelResponse{}, &model.ProviderError{Provider: Provider, Model: name, Class: model.ClassServer,
				Message: fmt.Sprintf("panic handling the call: %v", p)}
		}
		// The helpers below name the provider "openai"; a preset's or
		// Azure's errors carry their own name (the one in the model id).
		if pe, ok := errors.AsType[*model.ProviderError](err); ok && m.provider != Provider && pe.Provider == Provider {
			pe.Provider = m.provider
		}
	}()

	s, err := parseSettings(req.Settings)
	if err != nil {
		return svc.ModelResponse{}, err
	}
	base, key, err := m.endpoint(name, &s)
	if err != nil {
		return svc.ModelResponse{}, err
	}
	body, out, err := buildParams(name, &req, &s, isOpenAI(base) || m.azure != nil)
	if err != nil {
		return svc.ModelResponse{}, err
	}
	if err := ctx.Err(); err != nil {
		return svc.ModelResponse{}, fmt.Errorf("openai model %s: %w", name, err)
	}

	callCtx := ctx
	if s.timeout > 0 {
		var cancel context.CancelFunc
		callCtx, cancel = context.WithTimeout(ctx, s.timeout)
		defer cancel()
	}
	if len(req.ServerTools) > 0 {
		return m.generateResponses(ctx, callCtx, name, key, base, &req, &s, out.structured)
	}
	if req.OnDelta != nil {
		return m.generateStream(ctx, callCtx, name, key, base, body, out, &s, req.OnDelta)
	}
	var (
		httpResp *http.Response
		raw      []byte
	)
	defer func() { resp, err = withHint(resp, err, httpResp) }()
	opts := append(m.auth(base, key),
		option.WithResponseInto(&httpResp),
		// Raw bytes: decoded below with encoding/json, which reports a
		// wrong type instead of leaving a field empty, and also accepts a
		// JSON answer sent with a wrong Content-Type.
		option.WithResponseBodyInto(&raw),
	)
	if s.maxRetries >= 0 {
		opts = append(opts, option.WithMaxRetries(s.maxRetries))
	}
	if _, err := m.chat.New(callCtx, body, opts...); err != nil {
		return svc.ModelResponse{}, callError(ctx, name, err, httpResp)
	}
	status := 0
	if httpResp != nil {
		status = httpResp.StatusCode
	}
	return decodeResponse(name, status, raw, out)
}

// withHint adds to a call's result what its answer's headers said of the
// provider's rate limits (res is the last answer, nil when none came), on
// the response or on the ProviderError, success or failure, so that a
// learned rate limit can pace the key by them.
func withHint(resp svc.ModelResponse, err error, res *http.Response) (svc.ModelResponse, error) {
	if res == nil {
		return resp, err
	}
	if err == nil {
		resp.RateLimit = model.OpenAIRateHint(res.Header, time.Now())
	} else if pe, ok := errors.AsType[*model.ProviderError](err); ok && pe.RateLimit == nil {
		pe.RateLimit = model.OpenAIRateHint(res.Header, time.Now())
	}
	return resp, err
}

// endpoint picks the base URL and key of a call (see the package doc).
func (m *chatModel) endpoint(name string, s *settings) (*url.URL, string, error) {
	base, configuredKey := m.baseURL, true
	if s.baseURL != nil {
		base = s.baseURL
		configuredKey = sameOrigin(base, m.baseURL)
	} else if m.baseEnv != "" {
		// A provider with no default endpoint (vllm, azure) and none
		// configured: nothing to call.
		return nil, "", &model.ProviderError{Provider: Provider, Model: name, Class: model.ClassAuth,
			Message: "no endpoint: set " + m.baseEnv + ", or model_settings base_url"}
	}
	var key string
	switch {
	case s.apiKey != "":
		key = s.apiKey
	case s.apiKeyEnv != "":
		key = os.Getenv(s.apiKeyEnv)
		if key == "" {
			return nil, "", &model.ProviderError{Provider: Provider, Model: name, Class: model.ClassAuth,
				Message: fmt.Sprintf("model_settings.api_key_env names %s, which is not set", s.apiKeyEnv)}
		}
	case configuredKey:
		key = m.apiKey
	}
	if key == "" && (isOpenAI(base) || m.requireKey && configuredKey) {
		return nil, "", &model.ProviderError{Provider: Provider, Model: name, Class: model.ClassAuth,
			Message: "no API key for " + base.Host + ": set " + m.keyEnv + ", or model_settings api_key or api_key_env"}
	}
	return base, key, nil
}

// auth is the options that point a call at base with key: a bearer token
// for OpenAI and compatible servers, or Azure's endpoint, api-version,
// deployment path and api-key header.
func (m *chatModel) auth(base *url.URL, key string) []option.RequestOption {
	if m.azure == nil {
		return []option.RequestOption{option.WithBaseURL(base.String()), option.WithAPIKey(key)}
	}
	return m.azure.options(base, key)
}

func isOpenAI(u *url.URL) bool { return strings.EqualFold(u.Hostname(), "api.openai.com") }

func sameOrigin(a, b *url.URL) bool {
	return strings.EqualFold(a.Scheme, b.Scheme) && strings.EqualFold(a.Hostname(), b.Hostname()) && port(a) == port(b)
}

func port(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	if strings.EqualFold(u.Scheme, "https") {
		return "443"
	}
	return "80"
}

// callError turns the SDK's error into ours. resp is the last response, if
// one came.
func callError(ctx context.Context, name string, err error, resp *http.Response) error {
	if ctx.Err() != nil {
		return fmt.Errorf("openai model %s: %w", name, ctx.Err())
	}
	pe := &model.ProviderError{Provider: Provider, Model: name, Err: err}
	var apiErr *sdk.Error
	switch {
	case errors.As(err, &apiErr):
		pe.Status = apiErr.StatusCode
		pe.Message = apiErr.Message
		if pe.Message == "" && apiErr.Response != nil {
			pe.Message = bodyMessage(apiErr.Response)
		}
		if apiErr.Response != nil {
			resp = apiErr.Response
		}
	case resp != nil && resp.StatusCode >= 400:
		// The SDK could not read the error body as {"error": {...}} (vLLM
		// answers {"object": "error", "message": ...}) and returned its
		// decoding error; the status still says what happened.
		pe.Status = resp.StatusCode
		pe.Message = bodyMessage(resp)
	}
	if pe.Status != 0 {
		pe.Class = model.ClassOf(pe.Status)
		if apiErr != nil && apiErr.Code == "context_length_exceeded" {
			pe.Class = model.ClassContext
		}
		if pe.Message == "" {
			pe.Message = http.StatusText(pe.Status)
		}
		pe.RetryAfter = retryAfter(resp)
		if resp != nil {
			pe.RateLimit = model.OpenAIRateHint(resp.Header, time.Now())
		}
		return pe
	}
	pe.Class = transportClass(err)
	return pe
}

// transportClass classifies a call that got no response: a deadline (the
// timeout setting, a transport timeout) or a connection the server dropped
// is a timeout, anything else (refused, DNS) a server failure.
func transportClass(err error) model.Class {
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded),
		errors.As(err, &ne) && ne.Timeout(),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return model.ClassTimeout
	}
	return model.ClassServer
}

// retryAfter reads the wait the server asked for, in the SDK's order of
// preference.
func retryAfter(resp *http.Response) time.Duration {
	if resp == nil {
		return 0
	}
	if ms := resp.Header.Get("Retry-After-Ms"); ms != "" {
		if f, err := strconv.ParseFloat(ms, 64); err == nil && f >= 0 && f < float64(24*time.Hour/time.Millisecond) {
			return time.Duration(f * float64(time.Millisecond))
		}
	}
	return model.ParseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
}

// maxMessage bounds an error message taken from a response body, which may
// be an HTML error page.
const maxMessage = 512

// bodyMessage finds the message in an error body the SDK left readable:
// {"error": {"message"}}, {"error": "..."}, {"message"}, {"detail"}, or the
// text itself.
func bodyMessage(resp *http.Response) string {
	if resp == nil || resp.Body == nil {
		return ""
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return ""
	}
	var v struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		Detail  json.RawMessage `json:"detail"`
	}
	if json.Unmarshal(b, &v) == nil {
		var inner struct {
			Message string `json:"message"`
		}
		var str string
		switch {
		case json.Unmarshal(v.Error, &inner) == nil && inner.Message != "":
			return clip(inner.Message)
		case json.Unmarshal(v.Error, &str) == nil && str != "":
			return clip(str)
		case v.Message != "":
			return clip(v.Message)
		case json.Unmarshal(v.Detail, &str) == nil && str != "":
			return clip(str)
		case len(v.Detail) > 0:
			return clip(string(v.Detail))
		}
	}
	return clip(strings.TrimSpace(string(b)))
}

func clip(s string) string {
	if len(s) <= maxMessage {
		return s
	}
	cut := maxMessage
	for cut > 0 && !isRuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }
