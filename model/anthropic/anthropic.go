// Package anthropic is the "anthropic" model provider: Claude models through
// the Messages API, by way of the official SDK
// (github.com/anthropics/anthropic-sdk-go). A model id is
// "anthropic:<model>", for example "anthropic:claude-haiku-4-5".
//
// # Credentials and endpoint
//
// The API key is, first to last: model_settings api_key, the environment
// variable named by model_settings api_key_env, Config.APIKey, then
// ANTHROPIC_API_KEY (or, failing that, ANTHROPIC_AUTH_TOKEN as a bearer
// token). The base URL is model_settings base_url, Config.BaseURL, then
// ANTHROPIC_BASE_URL, then the SDK's https://api.anthropic.com. The SDK's
// other environment defaults (profiles, federation, config files) are not
// used, so what a model talks to depends only on the above.
//
// # The request
//
// Instructions become the system prompt. Message contents are JSON values:
// a JSON string is sent as its text, any other value as its JSON text. An
// assistant message's tool calls become tool_use blocks; tool messages
// become tool_result blocks (is_error from Message.IsError), and
// consecutive tool results share one user message, as the API requires.
// Tools are sent with their input schemas as given.
//
// # Structured output
//
// When the request has an OutputSchema the answer must be JSON meeting it.
// By default (model_settings structured_output "tool") the schema becomes
// the input schema of an extra tool, [FinalAnswerTool], that tool_choice
// forces ("any" tool when the agent has tools of its own, so it may still
// call them first); the input of that call is the Output. This works with
// every Claude model. A schema whose root is not an object is wrapped as
// {"value": schema} and unwrapped again, because tool inputs must be
// objects. When the model calls FinalAnswerTool alongside other tools, the
// answer wins and the other calls are dropped: the model has said it is
// done. structured_output "native" instead sends the schema as
// output_config.format (the API's structured outputs, on the models that
// support them, after the SDK's transformation to the supported schema
// subset) and reads the answer's text as JSON. Forced tool use cannot be
// combined with extended thinking; use "native" there.
//
// # model_settings
//
//	max_tokens          int, default 4096 (the API requires one)
//	temperature, top_p  number
//	top_k               int
//	stop                string or list of strings (-> stop_sequences);
//	                    stop_sequences is accepted as well
//	structured_output   "tool" (default) or "native", see above
//	api_key, api_key_env, base_url
//	                    credentials and endpoint, see above; never sent
//	stream              true or false: the runtime's (calls stream when
//	                    the request has OnDelta); never sent
//	stream_idle_timeout_ms
//	                    a stream silent this long fails as a timeout
//	                    (DefaultStreamIdleTimeout)
//	prompt_cache        true: the system prompt and the tools are marked
//	                    cache_control ephemeral
//
// Cached input (usage cache_read_input_tokens) is CachedInputTokens, and
// counted in InputTokens with the cache writes, plain or streamed.
//
// Keys that only another provider understands ([DroppedSettings], seed
// among them) are dropped so that one agent's model_settings can serve
// fallback models of different providers. Every other key is passed
// through into the request body as is (thinking, metadata, service_tier,
// tool_choice, ...), overriding what this package would send under it.
//
// # Failures
//
// The SDK retries 408, 409, 429 and 5xx (529 overloaded included) and
// dropped connections, MaxRetries times (default 2), waiting what the
// server's retry-after-ms or Retry-After asks or else backing off
// exponentially. A wait longer than Config.MaxRetryWait, or past the
// context's deadline, is not waited out: the call fails at once with the
// server's RetryAfter, so the agent can try its fallback models instead.
// A call that still fails returns a *model.ProviderError classed from the
// HTTP status and the API's error type. A cancelled context aborts the
// call and the error wraps context.Canceled (and is not a ProviderError,
// so no fallback is tried); a context deadline is a ProviderError of class
// timeout wrapping context.DeadlineExceeded. Bad model_settings are
// SpecValidationErrors.
//
// # Rate-limit headers
//
// Every answer, success or failure, plain or streamed, carries what the
// last attempt's anthropic-ratelimit-* and retry headers said
// (model.AnthropicRateHint) as ModelResponse.RateLimit or
// ProviderError.RateLimit, which a learned rate limit paces the key by.
package anthropic

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"
	"github.com/anthropics/anthropic-sdk-go/packages/param"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/model"
)

// Provider is the provider name of model ids this package serves.
const Provider = "anthropic"

// Defaults.
const (
	// DefaultMaxTokens is max_tokens when model_settings has none: the API
	// requires a value.
	DefaultMaxTokens = 4096
	// DefaultMaxRetries is the SDK's own default.
	DefaultMaxRetries = 2
	// DefaultMaxRetryWait bounds the Retry-After the client waits out
	// itself; a longer one fails the call so that fallbacks get a turn.
	DefaultMaxRetryWait = 60 * time.Second
)

// Environment variables read by New and NewWithConfig.
const (
	EnvAPIKey    = "ANTHROPIC_API_KEY"
	EnvAuthToken = "ANTHROPIC_AUTH_TOKEN"
	EnvBaseURL   = "ANTHROPIC_BASE_URL"
)

// Config configures a model beyond what the environment gives. Zero fields
// take their defaults.
type Config struct {
	// APIKey defaults to $ANTHROPIC_API_KEY.
	APIKey string
	// BaseURL defaults to $ANTHROPIC_BASE_URL, then the SDK's production
	// URL.
	BaseURL string
	// HTTPClient defaults to a client shared by every model of this
	// package, so that agents share one connection pool.
	HTTPClient *http.Client
	// MaxRetries is how many times a failed attempt is retried: 0 means
	// DefaultMaxRetries, a negative value no retries.
	MaxRetries int
	// MaxRetryWait is the longest Retry-After waited out before retrying:
	// 0 means DefaultMaxRetryWait.
	MaxRetryWait time.Duration
}

// New returns a model for name (the part after "anthropic:"), configured
// from the environment. It is a model.Factory.
func New(name string) (svc.Model, error) {
	return NewWithConfig(name, Config{})
}

var _ model.Factory = New

// NewWithConfig returns a model for name configured by cfg, its zero
// fields filled from the environment and the defaults. It makes no call:
// a missing key is reported by Generate, since model_settings may yet
// supply one.
func NewWithConfig(name string, cfg Config) (svc.Model, error) {
	if name == "" {
		return nil, svc.Errorf(svc.KindRegistry, "anthropic: empty model name (want anthropic:<model>, e.g. anthropic:claude-haiku-4-5)")
	}
	if cfg.APIKey == "" {
		cfg.APIKey = os.Getenv(EnvAPIKey)
	}
	if cfg.BaseURL == "" {
		cfg.BaseURL = os.Getenv(EnvBaseURL)
	}
	if cfg.BaseURL != "" {
		if err := checkBaseURL(cfg.BaseURL); err != nil {
			return nil, svc.Wrap(svc.KindSpecValidation, err, "anthropic:"+name)
		}
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = sharedHTTPClient()
	}
	retries := cfg.MaxRetries
	switch {
	case retries == 0:
		retries = DefaultMaxRetries
	case retries < 0:
		retries = 0
	}
	wait := cfg.MaxRetryWait
	if wait <= 0 {
		wait = DefaultMaxRetryWait
	}

	opts := []option.RequestOption{
		// Credentials and endpoint come from the rules in the package doc
		// only, not from profiles or files the SDK would otherwise find.
		option.WithoutEnvironmentDefaults(),
		option.WithHTTPClient(hc),
		option.WithMaxRetries(retries),
		option.WithMiddleware(capRetryWait(wait)),
	}
	if cfg.BaseURL != "" {
		opts = append(opts, option.WithBaseURL(cfg.BaseURL))
	}
	m := &anthropicModel{name: name, apiKey: cfg.APIKey}
	if cfg.APIKey != "" {
		opts = append(opts, option.WithAPIKey(cfg.APIKey))
	} else if tok := os.Getenv(EnvAuthToken); tok != "" {
		m.authToken = true
		opts = append(opts, option.WithAuthToken(tok))
	}
	m.client = anthropic.NewClient(opts...)
	return m, nil
}

// sharedHTTPClient is the default HTTP client. It has no timeout of its
// own: each attempt gets one from Generate, and the caller's context
// bounds the whole call.
var sharedHTTPClient = sync.OnceValue(func() *http.Client {
	if t, ok := http.DefaultTransport.(*http.Transport); ok {
		return &http.Client{Transport: t.Clone()}
	}
	return &http.Client{Transport: http.DefaultTransport}
})

func checkBaseURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("base URL %q: %w", s, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("base URL %q: want an http or https URL", s)
	}
	return nil
}

// anthropicModel is one model of the provider. It holds no per-call
// state, so one instance serves concurrent calls.
type anthropicModel struct {
	name      string
	client    anthropic.Client
	apiKey    string // the key from Config or the environment, "" if none
	authToken bool   // a bearer token from the environment stands in for the key
}

// Generate makes one Messages API call; see the package doc.
func (m *anthropicModel) Generate(ctx context.Context, req svc.ModelRequest) (resp svc.ModelResponse, err error) {
	s, err := parseSettings(req.Settings)
	if err != nil {
		return svc.ModelResponse{}, svc.Wrap(svc.KindSpecValidation, err, "anthropic:"+m.name+" model_settings")
	}
	name := req.Model
	if name == "" {
		name = m.name
	}
	opts, err := m.callOptions(name, &s)
	if err != nil {
		return svc.ModelResponse{}, err
	}
	b, err := buildRequest(name, &req, &s)
	if err != nil {
		return svc.ModelResponse{}, &model.ProviderError{Provider: Provider, Model: name, Class: model.ClassInvalid, Message: err.Error(), Err: err}
	}

	if len(b.betas) > 0 {
		opts = append(opts, option.WithHeader("anthropic-beta", strings.Join(b.betas, ",")))
	}
	// A turn with server tools may pause (stop_reason pause_turn) before
	// it is done; it continues when its content is sent back as the
	// assistant's message, and the answer is the whole turn's.
	var prior []anthropic.ContentBlockUnion
	var used anthropic.Usage
	for pauses := 0; ; pauses++ {
		msg, res, err := m.once(ctx, name, b, opts, &s, req.OnDelta)
		if err != nil {
			return withHint(svc.ModelResponse{}, err, res)
		}
		addUsage(&used, &msg.Usage)
		if msg.StopReason == "pause_turn" && pauses < MaxPauses {
			b.params.Messages = append(b.params.Messages, assistantParam(msg.Content))
			prior = append(prior, msg.Content...)
			continue
		}
		msg.Content = append(prior, msg.Content...)
		msg.Usage = used
		resp, err := b.response(name, msg, res)
		return withHint(resp, err, res)
	}
}

// MaxPauses bounds how often one turn with server tools may pause and be
// continued (stop_reason pause_turn) before its answer so far is taken.
const MaxPauses = 8

// once makes one Messages API call, plain or streamed.
func (m *anthropicModel) once(ctx context.Context, name string, b *built, opts []option.RequestOption,
	s *settings, onDelta func(string)) (*anthropic.Message, *http.Response, error) {
	if onDelta != nil {
		return m.generateStream(ctx, name, b, opts, s, onDelta)
	}
	var res *http.Response
	opts = append(opts,
		option.WithResponseInto(&res),
		// The SDK refuses non-streaming calls whose max_tokens could take
		// over ten minutes unless it is given the attempt's timeout; give it
		// one sized like its own rule.
		option.WithRequestTimeout(attemptTimeout(b.params.MaxTokens)))
	msg, err := m.client.Messages.New(ctx, b.params, opts...)
	if err != nil {
		return nil, res, callError(ctx, name, err, res)
	}
	if msg == nil || !msg.JSON.Content.Valid() {
		return nil, res, &model.ProviderError{Provider: Provider, Model: name, Status: status(res),
			Class: model.ClassServer, Message: "malformed response: no content"}
	}
	return msg, res, nil
}

// addUsage adds a call's usage to a turn's.
func addUsage(to, u *anthropic.Usage) {
	to.InputTokens += u.InputTokens
	to.OutputTokens += u.OutputTokens
	to.CacheCreationInputTokens += u.CacheCreationInputTokens
	to.CacheReadInputTokens += u.CacheReadInputTokens
}

// assistantParam is a paused turn's content sent back as the assistant's
// message, block by block as the API sent it.
func assistantParam(content []anthropic.ContentBlockUnion) anthropic.MessageParam {
	blocks := make([]json.RawMessage, 0, len(content))
	for _, c := range content {
		if raw := blockJSON(c); raw != nil {
			blocks = append(blocks, raw)
		}
	}
	raw, _ := json.Marshal(map[string]any{"role": "assistant", "content": blocks})
	return param.Override[anthropic.MessageParam](json.RawMessage(raw))
}

// callOptions are the per-call options: the key and base URL that
// model_settings choose.
func (m *anthropicModel) callOptions(name string, s *settings) ([]option.RequestOption, error) {
	var opts []option.RequestOption
	key := s.apiKey
	if key == "" && s.apiKeyEnv != "" {
		key = os.Getenv(s.apiKeyEnv)
		if key == "" {
			return nil, &model.ProviderError{Provider: Provider, Model: name, Class: model.ClassAuth,
				Message: "model_settings api_key_env: environment variable " + s.apiKeyEnv + " is not set"}
		}
	}
	switch {
	case key != "":
		opts = append(opts, option.WithAPIKey(key))
		if m.authToken {
			// One credential per call: the settings' key replaces the token.
			opts = append(opts, option.WithHeaderDel("authorization"))
		}
	case m.apiKey == "" && !m.authToken:
		return nil, &model.ProviderError{Provider: Provider, Model: name, Class: model.ClassAuth,
			Message: "no API key: set " + EnvAPIKey + " or model_settings api_key or api_key_env"}
	}
	if s.baseURL != "" {
		opts = append(opts, option.WithBaseURL(s.baseURL))
	}
	return opts, nil
}

// attemptTimeout is the SDK's own estimate for a non-streaming call of
// maxTokens: ten minutes, more for large max_tokens, at most an hour.
func attemptTimeout(maxTokens int64) time.Duration {
	d := time.Duration(float64(time.Hour) * float64(maxTokens) / 128000)
	return min(max(d, 10*time.Minute), time.Hour)
}
