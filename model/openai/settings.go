package openai

import (
	"encoding/json"
	"errors"
	"math"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/openai/openai-go/v3/packages/param"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/internal/settingval"
)

// Keys of model_settings the provider reads itself. The first five
// configure the client and never reach the server (an api_key must not be
// echoed into a request body); the rest map to request fields. Every other
// key goes into the body as is, but for the other providers' settings
// (testKeys, otherProviderKeys, anthropicOnlyKeys).
const (
	keyAPIKey      = "api_key"
	keyAPIKeyEnv   = "api_key_env"
	keyBaseURL     = "base_url"
	keyTimeout     = "timeout"
	keyMaxRetries  = "max_retries"
	keyTemperature = "temperature"
	keyMaxTokens   = "max_tokens"
	keyTopP        = "top_p"
	keySeed        = "seed"
	keyStop        = "stop"
	// keyStopSequences is the Messages API's name for stop.
	keyStopSequences = "stop_sequences"
	// keyStream is read by the runtime (whether a call streams: the
	// provider streams when the request has OnDelta), never sent as is.
	keyStream = "stream"
	// keyStreamIdle bounds the wait for the next chunk of a stream, in
	// milliseconds (DefaultStreamIdleTimeout when absent).
	keyStreamIdle = "stream_idle_timeout_ms"
)

// testKeys are the test provider's settings. An agent's model_settings
// serve its fallback models too, and "openai:x with test:echo as fallback"
// is a common shape; sending fail_times to a real server would turn a
// harmless setting into a 400 that also blocks the fallback.
var testKeys = map[string]bool{
	"latency_ms": true, "tokens": true, "fail_times": true, "fail_on": true, "output": true, "call_tools": true,
	"tool_arguments": true, "stream_interval_ms": true,
}

// otherProviderKeys are the anthropic provider's own settings, never meant
// for a Chat Completions server.
var otherProviderKeys = map[string]bool{"structured_output": true, "prompt_cache": true}

// anthropicOnlyKeys are Messages API parameters that api.openai.com
// rejects ("Unrecognized request argument"). They are dropped for it, so
// that settings written for an Anthropic fallback do not turn into a 400
// that also blocks the fallback; other servers get them (vLLM takes top_k).
var anthropicOnlyKeys = map[string]bool{"top_k": true, "thinking": true}

// reservedKeys would break the call if passed through: the provider sets
// the model and the messages, and whether it streams (with its usage).
var reservedKeys = map[string]bool{"model": true, "messages": true, "stream_options": true}

// settings are the model_settings of one call, checked.
type settings struct {
	apiKey     string
	apiKeyEnv  string
	baseURL    *url.URL // nil unless base_url is set
	timeout    time.Duration
	maxRetries int // -1 unless max_retries is set

	temperature param.Opt[float64]
	topP        param.Opt[float64]
	maxTokens   param.Opt[int64]
	seed        param.Opt[int64]
	stop        []string // stop and stop_sequences, in key order
	stopString  bool     // stop was one string, and sent as one
	streamIdle  time.Duration

	// extra are the passthrough keys, each already JSON.
	extra map[string]any
}

// parseSettings reads model_settings as JSON or YAML decoding leaves them:
// numbers may be any Go integer or float type or json.Number. A null value
// is the same as a missing key. A bad value is a SpecValidationError.
func parseSettings(m map[string]any) (settings, error) {
	s := settings{maxRetries: -1}
	bad := func(key, want string, v any) (settings, error) {
		return settings{}, svc.Errorf(svc.KindSpecValidation, "openai model: model_settings.%s: want %s, got %v (%T)", key, want, v, v)
	}
	// Sorted, so that of several bad keys the same one is always reported.
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := m[k]
		if v == nil || testKeys[k] || otherProviderKeys[k] {
			continue
		}
		switch k {
		case keyAPIKey, keyAPIKeyEnv:
			str, ok := v.(string)
			if !ok {
				return bad(k, "a string", v)
			}
			if k == keyAPIKey {
				s.apiKey = str
			} else {
				s.apiKeyEnv = str
			}
		case keyBaseURL:
			str, ok := v.(string)
			if !ok {
				return bad(k, "a string", v)
			}
			if str == "" {
				continue
			}
			u, err := parseBaseURL(str)
			if err != nil {
				return bad(k, "an http or https URL", v)
			}
			s.baseURL = u
		case keyTimeout:
			d, ok := duration(v)
			if !ok {
				return bad(k, `a positive number of seconds or a duration such as "90s"`, v)
			}
			s.timeout = d
		case keyMaxRetries:
			n, ok := settingval.Count(v)
			if !ok || n > 100 {
				return bad(k, "an integer from 0 to 100", v)
			}
			s.maxRetries = int(n)
		case keyTemperature, keyTopP:
			f, ok := settingval.Number(v)
			if !ok {
				return bad(k, "a number", v)
			}
			if k == keyTemperature {
				s.temperature = param.NewOpt(f)
			} else {
				s.topP = param.NewOpt(f)
			}
		case keyMaxTokens:
			n, ok := settingval.Count(v)
			if !ok || n == 0 {
				return bad(k, "a positive integer", v)
			}
			s.maxTokens = param.NewOpt(n)
		case keySeed:
			n, ok := settingval.Integer(v)
			if !ok {
				return bad(k, "an integer", v)
			}
			s.seed = param.NewOpt(n)
		case keyStream:
			if _, ok := v.(bool); !ok {
				return bad(k, "true or false", v)
			}
		case keyStreamIdle:
			n, ok := settingval.Count(v)
			if !ok || n == 0 || n > math.MaxInt64/int64(time.Millisecond) {
				return bad(k, "a positive number of milliseconds", v)
			}
			s.streamIdle = time.Duration(n) * time.Millisecond
		case keyStop, keyStopSequences:
			// stop_sequences is the Messages API's name; both may be set
			// for an agent with fallbacks on both providers.
			switch t := v.(type) {
			case string:
				s.stop = append(s.stop, t)
				s.stopString = k == keyStop
			case []string:
				s.stop = append(s.stop, t...)
			case []any:
				for _, e := range t {
					str, ok := e.(string)
					if !ok {
						return bad(k, "a string or a list of strings", v)
					}
					s.stop = append(s.stop, str)
				}
			default:
				return bad(k, "a string or a list of strings", v)
			}
		default:
			if reservedKeys[k] {
				return settings{}, svc.Errorf(svc.KindSpecValidation, "openai model: model_settings.%s: set by the provider, not a setting", k)
			}
			raw, err := toJSON(v)
			if err != nil {
				return bad(k, "a JSON value", v)
			}
			if s.extra == nil {
				s.extra = make(map[string]any)
			}
			s.extra[k] = raw
		}
	}
	return s, nil
}

// parseBaseURL accepts an absolute http(s) URL.
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

// toJSON marshals a passthrough value; a json.RawMessage (from a Go caller)
// is taken as is. The SDK's sjson merge marshals a json.RawMessage to itself.
func toJSON(v any) (json.RawMessage, error) {
	if t, ok := v.(json.RawMessage); ok {
		if !json.Valid(t) {
			return nil, errors.New("invalid JSON")
		}
		return t, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return b, nil
}

// duration reads a timeout: seconds as a number, or a Go duration string.
func duration(v any) (time.Duration, bool) {
	if str, ok := v.(string); ok {
		d, err := time.ParseDuration(strings.TrimSpace(str))
		return d, err == nil && d > 0
	}
	f, ok := settingval.Number(v)
	if !ok || f <= 0 || f > float64(math.MaxInt64/int64(time.Second)) {
		return 0, false
	}
	return time.Duration(f * float64(time.Second)), true
}

// CheckSettings reports, before any call, each model_settings key Generate
// would refuse, one error per key ("model_settings.max_tokens: want ..."),
// for the spec loader to report at the key's line (supervisor.CheckAgent
// asks every model of an agent's chain). Keys of the other providers pass,
// as they do in a call.
func (m *chatModel) CheckSettings(settings map[string]any, _ []string, _ bool) error {
	return checkSettings(settings)
}

func checkSettings(settings map[string]any) error {
	return settingval.CheckEach(settings, "openai", func(one map[string]any) error {
		_, err := parseSettings(one)
		return err
	})
}
