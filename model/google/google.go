// Package google is the "google" model provider (alias "gemini"): Gemini
// models behind the Gemini API, called through Google's official Go SDK,
// google.golang.org/genai.
//
// # Endpoint and key
//
// The key is, first to last: model_settings api_key, the environment
// variable named by model_settings api_key_env, Config.APIKey,
// GEMINI_API_KEY, GOOGLE_API_KEY; a call without one fails before any
// request with a ProviderError of ClassAuth. The base URL is
// model_settings base_url, Config.BaseURL, GOOGLE_GEMINI_BASE_URL, or the
// SDK's https://generativelanguage.googleapis.com/ (API version v1beta).
// The configured key is sent only to the configured base URL's origin, as
// with the openai provider.
//
// # model_settings
//
// Read by the provider and never sent: api_key, api_key_env, base_url,
// timeout (seconds or a duration such as "90s"), max_retries (0 to 100,
// default Config.MaxRetries), stream (the runtime's), stream_idle_timeout_ms.
// Mapped into generationConfig: temperature, top_p, top_k, max_tokens
// (maxOutputTokens), seed, stop and stop_sequences (stopSequences),
// presence_penalty, frequency_penalty, thinking_budget
// (thinkingConfig.thinkingBudget: 0 turns thinking off where the model
// allows it, -1 lets the model decide). Other keys are left out: an
// agent's model_settings serve its fallback models too, and the Gemini API
// refuses fields it does not know. A setting of the wrong type is a
// SpecValidationError, and no request is made.
//
// # Messages, tools and output
//
// The instructions are the system instruction. A message's content is
// sent as text (a JSON string as its text, any other value as its JSON).
// Tool specs become function declarations with parametersJsonSchema. A
// tool result is a functionResponse of the call's function name, its
// response {"result": value}, or {"error": value} for a failed call. The
// Gemini API gives function calls no ids (newer models may): the provider
// makes them up ("gc_<n>") and sends back only the server's own. A call's
// thought signature (which Gemini's thinking models require to be sent
// back with the call in the next turn) rides in the call's id after a
// '~', so that it survives the conversation's round trip through the
// runtime. With an OutputSchema and no tools, the request asks for JSON
// (responseMimeType application/json with responseJsonSchema); with
// tools, whose use Gemini 2.x refuses to combine with a JSON answer, the
// schema is asked for by the instructions alone and the agent's
// validation and corrective call do the rest.
//
// # Server tools
//
// The request's ServerTools (builtin_tools web_search, web_fetch,
// code_execution) are sent as grounding with Google Search, URL context
// and code execution; the grounding metadata, the URL context metadata
// and each code run come back as ServerToolUses. A request with them
// never asks for a JSON answer, which Gemini refuses beside them.
//
// # Usage and cost
//
// InputTokens are promptTokenCount (cachedContentTokenCount of them are
// CachedInputTokens), OutputTokens candidatesTokenCount plus
// thoughtsTokenCount (thinking is billed as output), TokensUsed
// totalTokenCount. The cost comes from the price table.
//
// # Streaming
//
// With OnDelta set the call is streamGenerateContent (server-sent
// events); each text fragment goes to OnDelta as its chunk arrives, and
// the chunks are assembled into the answer the plain call gives. A stream
// silent for its idle timeout fails with ClassTimeout.
//
// # Retries and errors
//
// The SDK retries 408, 429 and 5xx and connection errors, with
// exponential backoff from Config.RetryDelay (1 s by default). A failure
// after them is a *model.ProviderError classed by its HTTP status, but
// for a 400 whose details say API_KEY_INVALID (the Gemini API's answer to
// a wrong key), which is ClassAuth, and a 400 saying the input token
// count exceeds the maximum, which is ClassContext. The wait a 429's
// RetryInfo detail asks for (or a Retry-After header) is RetryAfter and
// the error's RateLimit hint. A cancelled ctx yields an error wrapping
// ctx.Err(), never a ProviderError.
package google

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/genai"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/model"
)

// Provider is the provider name in model ids: "google:<model>".
const Provider = "google"

// Alias is the provider's other name: "gemini:<model>".
const Alias = "gemini"

// DefaultMaxRetries is how often a failed call is retried when
// Config.MaxRetries is 0.
const DefaultMaxRetries = 2

// DefaultStreamIdleTimeout bounds the wait for a stream's next chunk.
const DefaultStreamIdleTimeout = 5 * time.Minute

// Config configures a model. Empty fields take their defaults.
type Config struct {
	// APIKey defaults to $GEMINI_API_KEY, then $GOOGLE_API_KEY.
	APIKey string
	// BaseURL defaults to $GOOGLE_GEMINI_BASE_URL, then the SDK's.
	BaseURL string
	// HTTPClient's transport is used for the calls (default: a pool
	// shared by every model of the package).
	HTTPClient *http.Client
	// MaxRetries is the number of retries after a failed attempt: 0 means
	// DefaultMaxRetries, a negative number none.
	MaxRetries int
	// RetryDelay is the first retry's wait (default 1 s, plus up to as
	// much again at random), doubling after.
	RetryDelay time.Duration
	// Provider names the provider in errors ("google" when empty).
	Provider string
}

// New returns a model named name configured from the environment. It is a
// model.Factory for provider "google".
func New(name string) (svc.Model, error) { return NewWithConfig(name, Config{}) }

// NewGemini is New for the alias "gemini": its errors say "gemini".
func NewGemini(name string) (svc.Model, error) {
	return NewWithConfig(name, Config{Provider: Alias})
}

// NewWithConfig returns a model named name (the part after "google:").
func NewWithConfig(name string, cfg Config) (svc.Model, error) {
	if strings.TrimSpace(name) == "" {
		return nil, svc.Errorf(svc.KindRegistry, "google model: empty model name (want google:<model>, e.g. google:gemini-2.5-flash)")
	}
	cfg.APIKey = cmp.Or(cfg.APIKey, os.Getenv("GEMINI_API_KEY"), os.Getenv("GOOGLE_API_KEY"))
	cfg.BaseURL = cmp.Or(cfg.BaseURL, os.Getenv("GOOGLE_GEMINI_BASE_URL"))
	var base *url.URL
	if cfg.BaseURL != "" {
		u, err := parseBaseURL(cfg.BaseURL)
		if err != nil {
			return nil, svc.Errorf(svc.KindSpecValidation, "google model %s: base URL %q: %v", name, cfg.BaseURL, err)
		}
		base = u
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
	return &geminiModel{
		name: name, provider: cmp.Or(cfg.Provider, Provider), apiKey: cfg.APIKey, baseURL: base,
		retries: retries, retryDelay: cmp.Or(cfg.RetryDelay, time.Second),
		http: &http.Client{Transport: recording{base: transportOf(hc)}, CheckRedirect: hc.CheckRedirect, Jar: hc.Jar},
	}, nil
}

// defaultBase is the SDK's endpoint, for the key's origin check.
var defaultBase = &url.URL{Scheme: "https", Host: "generativelanguage.googleapis.com", Path: "/"}

var sharedHTTPClient = sync.OnceValue(func() *http.Client {
	if t, ok := http.DefaultTransport.(*http.Transport); ok {
		t = t.Clone()
		t.ResponseHeaderTimeout = 10 * time.Minute
		return &http.Client{Transport: t}
	}
	return &http.Client{Transport: http.DefaultTransport}
})

func transportOf(c *http.Client) http.RoundTripper {
	if c.Transport != nil {
		return c.Transport
	}
	return http.DefaultTransport
}

type geminiModel struct {
	name, provider string
	apiKey         string
	baseURL        *url.URL // nil: the SDK's
	retries        int
	retryDelay     time.Duration
	http           *http.Client

	// clients are the SDK clients by (base URL, key): a client holds its
	// key, and an agent's settings may give another.
	clients sync.Map // clientKey -> *genai.Client
}

type clientKey struct{ base, key string }

func (m *geminiModel) client(ctx context.Context, base *url.URL, key string) (*genai.Client, error) {
	k := clientKey{key: key}
	if base != nil {
		k.base = base.String()
	}
	if c, ok := m.clients.Load(k); ok {
		return c.(*genai.Client), nil
	}
	cfg := &genai.ClientConfig{APIKey: key, Backend: genai.BackendGeminiAPI, HTTPClient: m.http}
	if base != nil {
		cfg.HTTPOptions.BaseURL = base.String()
	}
	c, err := genai.NewClient(ctx, cfg)
	if err != nil {
		return nil, err
	}
	actual, _ := m.clients.LoadOrStore(k, c)
	return actual.(*genai.Client), nil
}

// Generate makes one generateContent call (streamGenerateContent with
// OnDelta). See the package doc.
func (m *geminiModel) Generate(ctx context.Context, req svc.ModelRequest) (resp svc.ModelResponse, err error) {
	name := cmp.Or(req.Model, m.name)
	defer func() {
		if p := recover(); p != nil {
			resp, err = svc.ModelResponse{}, &model.ProviderError{Provider: m.provider, Model: name, Class: model.ClassServer,
				Message: fmt.Sprintf("panic handling the call: %v", p)}
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
	contents, gcfg, structured, err := buildRequest(&req, &s)
	if err != nil {
		return svc.ModelResponse{}, &model.ProviderError{Provider: m.provider, Model: name, Class: model.ClassInvalid, Message: err.Error()}
	}
	attempts := int32(m.retries + 1)
	if s.maxRetries >= 0 {
		attempts = int32(s.maxRetries + 1)
	}
	// Jitter up to the first wait (the SDK's default is a whole second
	// whatever the wait).
	delay := m.retryDelay.Seconds()
	gcfg.HTTPOptions = &genai.HTTPOptions{RetryOptions: &genai.HTTPRetryOptions{Attempts: &attempts, InitialDelay: &delay, Jitter: &delay}}
	if err := ctx.Err(); err != nil {
		return svc.ModelResponse{}, fmt.Errorf("google model %s: %w", name, err)
	}
	c, err := m.client(ctx, base, key)
	if err != nil {
		return svc.ModelResponse{}, &model.ProviderError{Provider: m.provider, Model: name, Class: model.ClassAuth, Message: err.Error(), Err: err}
	}
	callCtx := ctx
	if s.timeout > 0 {
		var cancel context.CancelFunc
		callCtx, cancel = context.WithTimeout(ctx, s.timeout)
		defer cancel()
	}
	last := &lastResponse{}
	callCtx = context.WithValue(callCtx, lastKey{}, last)
	if req.OnDelta != nil {
		return m.stream(ctx, callCtx, c, name, contents, gcfg, &s, structured, last, req.OnDelta)
	}
	r, err := c.Models.GenerateContent(callCtx, name, contents, gcfg)
	if err != nil {
		return svc.ModelResponse{}, m.callError(ctx, name, err, last)
	}
	var a assembled
	if err := a.add(r); err != nil {
		return svc.ModelResponse{}, m.malformed(name, last, err.Error())
	}
	out, err := a.response(structured)
	if err != nil {
		return svc.ModelResponse{}, m.malformed(name, last, err.Error())
	}
	return out, nil
}

// endpoint picks the base URL and key of a call (see the package doc).
func (m *geminiModel) endpoint(name string, s *settings) (*url.URL, string, error) {
	base, configuredKey := m.baseURL, true
	if s.baseURL != nil {
		base = s.baseURL
		configuredKey = sameOrigin(base, cmp.Or(m.baseURL, defaultBase))
	}
	var key string
	switch {
	case s.apiKey != "":
		key = s.apiKey
	case s.apiKeyEnv != "":
		if key = os.Getenv(s.apiKeyEnv); key == "" {
			return nil, "", &model.ProviderError{Provider: m.provider, Model: name, Class: model.ClassAuth,
				Message: fmt.Sprintf("model_settings.api_key_env names %s, which is not set", s.apiKeyEnv)}
		}
	case configuredKey:
		key = m.apiKey
	}
	if key == "" {
		return nil, "", &model.ProviderError{Provider: m.provider, Model: name, Class: model.ClassAuth,
			Message: "no API key: set GEMINI_API_KEY (or GOOGLE_API_KEY), or model_settings api_key or api_key_env"}
	}
	return base, key, nil
}

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

func parseBaseURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, err
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, errors.New("not an absolute http or https URL")
	}
	return u, nil
}

// lastResponse is the status and headers of a call's last HTTP answer:
// the SDK's errors carry neither, and a 429's Retry-After is in them.
type lastResponse struct {
	mu     sync.Mutex
	status int
	header http.Header
}

type lastKey struct{}

// recording is the transport that fills a call's lastResponse.
type recording struct{ base http.RoundTripper }

func (t recording) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(r)
	if last, ok := r.Context().Value(lastKey{}).(*lastResponse); ok && resp != nil {
		last.mu.Lock()
		last.status, last.header = resp.StatusCode, resp.Header.Clone()
		last.mu.Unlock()
	}
	return resp, err
}

func (l *lastResponse) get() (int, http.Header) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.status, l.header
}

// callError turns the SDK's error into ours.
func (m *geminiModel) callError(ctx context.Context, name string, err error, last *lastResponse) error {
	if ctx.Err() != nil {
		return fmt.Errorf("google model %s: %w", name, ctx.Err())
	}
	pe := &model.ProviderError{Provider: m.provider, Model: name, Err: err}
	status, header := last.get()
	var apiErr genai.APIError
	if errors.As(err, &apiErr) {
		pe.Status, pe.Message = apiErr.Code, clip(apiErr.Message)
		if pe.Status == 0 {
			pe.Status = status
		}
		pe.Class = model.ClassOf(pe.Status)
		switch {
		case pe.Status == http.StatusBadRequest && detailReason(apiErr.Details) == "API_KEY_INVALID":
			pe.Class = model.ClassAuth
		case pe.Status == http.StatusBadRequest && contextLength(apiErr.Message):
			pe.Class = model.ClassContext
		}
		pe.RetryAfter = retryDelay(apiErr.Details)
		if pe.RetryAfter == 0 && header != nil {
			pe.RetryAfter = model.RetryAfterOf(header, time.Now())
		}
		if pe.RetryAfter > 0 {
			pe.RateLimit = &svc.RateHint{RetryAfter: pe.RetryAfter}
		}
		if pe.Message == "" {
			pe.Message = http.StatusText(pe.Status)
		}
		return pe
	}
	if status >= 200 && status < 300 {
		// The answer came and could not be read.
		return m.malformed(name, last, err.Error())
	}
	pe.Class = transportClass(err)
	pe.Message = err.Error()
	return pe
}

func (m *geminiModel) malformed(name string, last *lastResponse, msg string) error {
	status, _ := last.get()
	return &model.ProviderError{Provider: m.provider, Model: name, Status: status, Class: model.ClassServer,
		Message: "malformed response: " + clip(msg)}
}

// contextLength reports whether a 400's message says the prompt is too
// long: "The input token count (N) exceeds the maximum number of tokens
// allowed (M)."
func contextLength(msg string) bool {
	m := strings.ToLower(msg)
	return strings.Contains(m, "exceeds the maximum number of tokens") || strings.Contains(m, "input token count")
}

// detailReason is the reason of a google.rpc.ErrorInfo detail.
func detailReason(details []map[string]any) string {
	for _, d := range details {
		if t, _ := d["@type"].(string); strings.HasSuffix(t, "google.rpc.ErrorInfo") {
			r, _ := d["reason"].(string)
			return r
		}
	}
	return ""
}

// retryDelay is the wait a google.rpc.RetryInfo detail asks for ("30s",
// "0.5s").
func retryDelay(details []map[string]any) time.Duration {
	for _, d := range details {
		if t, _ := d["@type"].(string); strings.HasSuffix(t, "google.rpc.RetryInfo") {
			s, _ := d["retryDelay"].(string)
			if v, err := time.ParseDuration(s); err == nil && v > 0 && v < 24*time.Hour {
				return v
			}
		}
	}
	return 0
}

// transportClass classifies a call that got no answer: a deadline or a
// dropped connection is a timeout, anything else a server failure.
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

const maxMessage = 512

func clip(s string) string {
	if len(s) <= maxMessage {
		return s
	}
	cut := maxMessage
	for cut > 0 && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut] + "…"
}
