// Package bedrock is the "bedrock" model provider: models on Amazon
// Bedrock called through the Converse and ConverseStream APIs of the
// official SDK, github.com/aws/aws-sdk-go-v2/service/bedrockruntime. The
// model name is the Bedrock model id or inference profile
// ("bedrock:anthropic.claude-sonnet-4-5-20250929-v1:0",
// "bedrock:us.amazon.nova-pro-v1:0").
//
// # Credentials, region and endpoint
//
// Credentials, region and endpoint come from the standard AWS
// configuration (config.LoadDefaultConfig): AWS_ACCESS_KEY_ID,
// AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN, AWS_PROFILE and the shared
// config files, SSO, web identity, the container and instance roles;
// AWS_REGION (or AWS_DEFAULT_REGION, or the profile's region; us-east-1
// when none says); AWS_ENDPOINT_URL_BEDROCK_RUNTIME or AWS_ENDPOINT_URL
// for another endpoint (a VPC endpoint, a proxy, a test server).
// model_settings region and base_url override the last two per agent.
// Requests are signed with SigV4. A call whose credentials cannot be
// found fails with a ProviderError of ClassAuth.
//
// # model_settings
//
// Read by the provider: region, base_url, timeout (seconds or a duration
// such as "90s"), max_retries (0 to 100, default Config.MaxRetries),
// stream (the runtime's), stream_idle_timeout_ms. Mapped into
// inferenceConfig: max_tokens (maxTokens), temperature, top_p (topP),
// stop and stop_sequences (stopSequences). Other keys are left out, since
// an agent's model_settings serve its fallback models too. A setting of
// the wrong type is a SpecValidationError, and no request is made.
//
// # Messages, tools and output
//
// The instructions are the system prompt. A message's content is sent as
// text (a JSON string as its text, any other value as its JSON). Tool
// specs become toolSpec tools with their JSON schema; a tool result is a
// toolResult block (json for an object, text otherwise; status error for
// a failed call), the results of one turn in one user message as Converse
// requires. An output schema is asked for by the instructions alone (the
// agent validates the answer and makes its corrective call): Converse's
// structured output is not offered by every model.
//
// # Usage and cost
//
// InputTokens are usage.inputTokens plus cacheReadInputTokens and
// cacheWriteInputTokens (Bedrock counts them apart; CachedInputTokens are
// the reads), OutputTokens usage.outputTokens. The cost comes from the
// price table, by the model id as written after "bedrock:".
//
// # Streaming
//
// With OnDelta set the call is ConverseStream (AWS's binary event-stream
// framing): each text delta goes to OnDelta as it arrives and the events
// are assembled into the answer the plain call gives; tool-use input is
// assembled from its fragments. A stream silent for its idle timeout
// fails with ClassTimeout.
//
// # Retries and errors
//
// The SDK's standard retryer retries throttling (429), 5xx and connection
// errors with exponential backoff up to Config.MaxBackoff. A failure
// after them is a *model.ProviderError classed by its HTTP status
// (ThrottlingException 429 is ClassRateLimit, ServiceUnavailableException
// 503 ClassOverloaded, AccessDeniedException and
// UnrecognizedClientException 403 ClassAuth, ModelErrorException 424
// ClassServer), but for a ValidationException saying the input is too
// long, which is ClassContext. A ConverseStream that ends with an
// exception event is classed by the exception's name. A cancelled ctx
// yields an error wrapping ctx.Err(), never a ProviderError.
package bedrock

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	"github.com/aws/smithy-go"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/model"
)

// Provider is the provider name in model ids: "bedrock:<model id>".
const Provider = "bedrock"

// DefaultRegion is the region when the AWS configuration names none.
const DefaultRegion = "us-east-1"

// DefaultMaxRetries is how often a failed call is retried when
// Config.MaxRetries is 0.
const DefaultMaxRetries = 2

// DefaultStreamIdleTimeout bounds the wait for a stream's next event.
const DefaultStreamIdleTimeout = 5 * time.Minute

// Config configures a model. Empty fields take their defaults.
type Config struct {
	// AWS is the AWS configuration; by default config.LoadDefaultConfig's
	// (read when the first call is made, so that a spec validates on a
	// machine without credentials).
	AWS *aws.Config
	// Region overrides the configuration's region.
	Region string
	// BaseURL overrides the endpoint.
	BaseURL string
	// HTTPClient defaults to a client shared by every model of the package.
	HTTPClient *http.Client
	// MaxRetries is the number of retries after a failed attempt: 0 means
	// DefaultMaxRetries, a negative number none.
	MaxRetries int
	// MaxBackoff bounds the wait between attempts (the SDK's 20 s when 0).
	MaxBackoff time.Duration
}

// New returns a model of the Bedrock model id name, configured from the
// standard AWS configuration. It is a model.Factory for "bedrock".
func New(name string) (svc.Model, error) { return NewWithConfig(name, Config{}) }

// NewWithConfig returns a model of the Bedrock model id name.
func NewWithConfig(name string, cfg Config) (svc.Model, error) {
	if strings.TrimSpace(name) == "" {
		return nil, svc.Errorf(svc.KindRegistry, "bedrock model: empty model id (want bedrock:<model id>, e.g. bedrock:amazon.nova-lite-v1:0)")
	}
	if cfg.BaseURL != "" {
		if _, err := parseBaseURL(cfg.BaseURL); err != nil {
			return nil, svc.Errorf(svc.KindSpecValidation, "bedrock model %s: base URL %q: %v", name, cfg.BaseURL, err)
		}
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
	return &bedrockModel{name: name, cfg: cfg, retries: retries,
		http: &http.Client{Transport: ownBody{transportOf(hc)}, CheckRedirect: hc.CheckRedirect, Jar: hc.Jar}}, nil
}

func transportOf(c *http.Client) http.RoundTripper {
	if c.Transport != nil {
		return c.Transport
	}
	return http.DefaultTransport
}

// ownBody sends a copy of the request body. The SDK handles its request
// body again once the response's headers are in (while net/http's write
// loop may still hold it), and net/http then closes the connection under
// a ConverseStream being read: "decode event: use of closed network
// connection" after the first event, in about a third of slow streams
// (seen against llmsim; TestStreamSurvivesPauses). A Converse body is a
// few kilobytes of JSON, so the copy costs little.
type ownBody struct{ base http.RoundTripper }

func (t ownBody) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return t.base.RoundTrip(r)
	}
	b, err := io.ReadAll(r.Body)
	_ = r.Body.Close()
	if err != nil {
		return nil, err
	}
	r = r.Clone(r.Context())
	r.Body = io.NopCloser(bytes.NewReader(b))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	r.ContentLength = int64(len(b))
	return t.base.RoundTrip(r)
}

var sharedHTTPClient = sync.OnceValue(func() *http.Client {
	if t, ok := http.DefaultTransport.(*http.Transport); ok {
		t = t.Clone()
		t.ResponseHeaderTimeout = 10 * time.Minute
		return &http.Client{Transport: t}
	}
	return &http.Client{Transport: http.DefaultTransport}
})

type bedrockModel struct {
	name    string
	cfg     Config
	retries int
	http    *http.Client

	once   sync.Once
	aws    aws.Config
	awsErr error

	// clients are the SDK clients by the settings that shape one.
	clients sync.Map // clientKey -> *bedrockruntime.Client
}

type clientKey struct {
	region, base string
	attempts     int
}

// awsConfig loads the AWS configuration once, at the first call.
func (m *bedrockModel) awsConfig(ctx context.Context) (aws.Config, error) {
	m.once.Do(func() {
		if m.cfg.AWS != nil {
			m.aws = m.cfg.AWS.Copy()
			return
		}
		m.aws, m.awsErr = config.LoadDefaultConfig(context.WithoutCancel(ctx))
	})
	return m.aws, m.awsErr
}

// client is the SDK client of one call: the model's configuration with
// the call's region, endpoint and retries (made once for each such
// combination).
func (m *bedrockModel) client(ctx context.Context, s *settings) (*bedrockruntime.Client, error) {
	ac, err := m.awsConfig(ctx)
	if err != nil {
		return nil, err
	}
	region := cmp.Or(s.region, m.cfg.Region, ac.Region, DefaultRegion)
	base := cmp.Or(s.baseURL, m.cfg.BaseURL)
	attempts := m.retries + 1
	if s.maxRetries >= 0 {
		attempts = s.maxRetries + 1
	}
	k := clientKey{region: region, base: base, attempts: attempts}
	if c, ok := m.clients.Load(k); ok {
		return c.(*bedrockruntime.Client), nil
	}
	c := bedrockruntime.NewFromConfig(ac, func(o *bedrockruntime.Options) {
		o.Region = region
		if base != "" {
			o.BaseEndpoint = aws.String(base)
		}
		o.HTTPClient = m.http
		o.Retryer = retry.NewStandard(func(r *retry.StandardOptions) {
			r.MaxAttempts = attempts
			if m.cfg.MaxBackoff > 0 {
				r.MaxBackoff = m.cfg.MaxBackoff
				r.Backoff = retry.NewExponentialJitterBackoff(m.cfg.MaxBackoff)
			}
			// The client-side retry quota would fail calls of a busy
			// process with "retry quota exceeded" instead of retrying;
			// the runtime's rate limits pace the calls instead.
			r.RateLimiter = ratelimit.None
		})
	})
	actual, _ := m.clients.LoadOrStore(k, c)
	return actual.(*bedrockruntime.Client), nil
}

// Generate makes one Converse call (ConverseStream with OnDelta).
func (m *bedrockModel) Generate(ctx context.Context, req svc.ModelRequest) (resp svc.ModelResponse, err error) {
	name := cmp.Or(req.Model, m.name)
	defer func() {
		if p := recover(); p != nil {
			resp, err = svc.ModelResponse{}, &model.ProviderError{Provider: Provider, Model: name, Class: model.ClassServer,
				Message: fmt.Sprintf("panic handling the call: %v", p)}
		}
	}()
	s, err := parseSettings(req.Settings)
	if err != nil {
		return svc.ModelResponse{}, err
	}
	in, err := buildInput(name, &req, &s)
	if err != nil {
		return svc.ModelResponse{}, &model.ProviderError{Provider: Provider, Model: name, Class: model.ClassInvalid, Message: err.Error()}
	}
	if err := ctx.Err(); err != nil {
		return svc.ModelResponse{}, fmt.Errorf("bedrock model %s: %w", name, err)
	}
	c, err := m.client(ctx, &s)
	if err != nil {
		return svc.ModelResponse{}, &model.ProviderError{Provider: Provider, Model: name, Class: model.ClassAuth,
			Message: "loading the AWS configuration: " + err.Error(), Err: err}
	}
	callCtx := ctx
	if s.timeout > 0 {
		var cancel context.CancelFunc
		callCtx, cancel = context.WithTimeout(ctx, s.timeout)
		defer cancel()
	}
	if req.OnDelta != nil {
		return m.stream(ctx, callCtx, c, name, in, &s, req.OnDelta)
	}
	out, err := c.Converse(callCtx, in)
	if err != nil {
		return svc.ModelResponse{}, callError(ctx, name, err)
	}
	return readOutput(name, out)
}

// callError turns the SDK's error into ours.
func callError(ctx context.Context, name string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("bedrock model %s: %w", name, ctx.Err())
	}
	pe := &model.ProviderError{Provider: Provider, Model: name, Err: err, Message: err.Error()}
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		pe.Status = re.HTTPStatusCode()
		if re.Response != nil {
			pe.RetryAfter = model.RetryAfterOf(re.Response.Header, time.Now())
		}
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		pe.Message = clip(cmp.Or(ae.ErrorMessage(), ae.ErrorCode()))
	}
	switch {
	case isCredentialsError(err):
		pe.Class = model.ClassAuth
	case pe.Status != 0:
		pe.Class = model.ClassOf(pe.Status)
		code := ""
		if ae != nil {
			code = ae.ErrorCode()
		}
		switch {
		case code == "ValidationException" && contextLength(pe.Message):
			pe.Class = model.ClassContext
		case code == "ModelErrorException" || pe.Status == http.StatusFailedDependency:
			pe.Class = model.ClassServer
		case code == "ThrottlingException":
			pe.Class = model.ClassRateLimit
		}
	case ae != nil && exceptionClass[ae.ErrorCode()] != "":
		// An exception event inside a ConverseStream, which has no
		// status of its own.
		pe.Class = exceptionClass[ae.ErrorCode()]
		if pe.Class == model.ClassInvalid && contextLength(pe.Message) {
			pe.Class = model.ClassContext
		}
	case strings.Contains(err.Error(), "deserialization failed"):
		pe.Class = model.ClassServer
		pe.Message = "malformed response: " + clip(err.Error())
	default:
		pe.Class = transportClass(err)
	}
	if pe.RetryAfter > 0 {
		pe.RateLimit = &svc.RateHint{RetryAfter: pe.RetryAfter}
	}
	return pe
}

// exceptionClass classes the exceptions a ConverseStream may end with.
var exceptionClass = map[string]model.Class{
	"ThrottlingException":         model.ClassRateLimit,
	"ServiceUnavailableException": model.ClassOverloaded,
	"InternalServerException":     model.ClassServer,
	"ModelStreamErrorException":   model.ClassServer,
	"ModelTimeoutException":       model.ClassTimeout,
	"ValidationException":         model.ClassInvalid,
	"AccessDeniedException":       model.ClassAuth,
}

// isCredentialsError reports a call that could not be signed: no
// credentials were found.
func isCredentialsError(err error) bool {
	return strings.Contains(err.Error(), "failed to retrieve credentials") ||
		strings.Contains(err.Error(), "failed to refresh cached credentials")
}

// contextLength reports whether a ValidationException says the prompt is
// too long ("Input is too long for requested model.", "prompt is too
// long", "too many input tokens", "maximum context length").
func contextLength(msg string) bool {
	m := strings.ToLower(msg)
	for _, s := range []string{"too long", "too many input tokens", "context length", "context window"} {
		if strings.Contains(m, s) {
			return true
		}
	}
	return false
}

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
