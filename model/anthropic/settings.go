package anthropic

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"time"

	svc "github.com/svc-dev/svc"
)

// DroppedSettings are model_settings keys that other providers understand
// and the Messages API rejects ("Extra inputs are not permitted"). They are
// dropped rather than passed through so that an agent's model_settings
// still work when it falls back from, say, an OpenAI model to a Claude one.
var DroppedSettings = []string{
	"seed",
	"frequency_penalty",
	"presence_penalty",
	"logit_bias",
	"logprobs",
	"top_logprobs",
	"n",
	"parallel_tool_calls",
	"response_format",
	"reasoning_effort",
	"max_completion_tokens",
	"user",
	"store",
	// The test provider's (an agent's fallback may be test:echo).
	"latency_ms", "tokens", "fail_times", "fail_on", "output", "call_tools", "tool_arguments", "stream_interval_ms",
}

// Structured output modes (model_settings structured_output).
const (
	StructuredTool   = "tool"
	StructuredNative = "native"
)

// settings are the model_settings this package reads.
type settings struct {
	maxTokens   int64
	temperature *float64
	topP        *float64
	topK        *int64
	stop        []string
	structured  string
	// promptCache marks the system prompt and the tool definitions
	// cacheable (cache_control); streamIdle bounds the wait for a
	// stream's next event (DefaultStreamIdleTimeout when 0).
	promptCache bool
	streamIdle  time.Duration

	apiKey, apiKeyEnv, baseURL string

	// extra are the keys passed through into the request body.
	extra map[string]any
}

// parseSettings reads model_settings as decoded from JSON or YAML: numbers
// may be float64, any int type or json.Number.
func parseSettings(m map[string]any) (settings, error) {
	s := settings{maxTokens: DefaultMaxTokens, structured: StructuredTool}
	for k, v := range m {
		var err error
		switch k {
		case "max_tokens":
			var n int64
			if n, err = toInt(v); err == nil && n < 0 {
				err = fmt.Errorf("want a number >= 0, got %d", n)
			}
			s.maxTokens = n
		case "temperature":
			s.temperature, err = optFloat(v)
		case "top_p":
			s.topP, err = optFloat(v)
		case "top_k":
			var n int64
			if n, err = toInt(v); err == nil {
				s.topK = &n
			}
		case "stop", "stop_sequences":
			var stop []string
			stop, err = toStrings(v)
			s.stop = append(s.stop, stop...)
		case "structured_output":
			s.structured, err = toString(v)
			if err == nil && s.structured != StructuredTool && s.structured != StructuredNative {
				err = fmt.Errorf("want %q or %q, got %q", StructuredTool, StructuredNative, s.structured)
			}
		case "stream":
			// The runtime's: whether calls stream (they do when the
			// request has OnDelta); never sent as is.
			if _, ok := v.(bool); !ok {
				err = fmt.Errorf("want true or false, got %v (%T)", v, v)
			}
		case "prompt_cache":
			b, ok := v.(bool)
			if !ok {
				err = fmt.Errorf("want true or false, got %v (%T)", v, v)
			}
			s.promptCache = b
		case "stream_idle_timeout_ms":
			var n int64
			if n, err = toInt(v); err == nil && (n <= 0 || n > math.MaxInt64/int64(time.Millisecond)) {
				err = fmt.Errorf("want a positive number of milliseconds, got %d", n)
			}
			s.streamIdle = time.Duration(n) * time.Millisecond
		case "api_key":
			s.apiKey, err = toString(v)
		case "api_key_env":
			s.apiKeyEnv, err = toString(v)
		case "base_url":
			if s.baseURL, err = toString(v); err == nil && s.baseURL != "" {
				err = checkBaseURL(s.baseURL)
			}
		default:
			if slices.Contains(DroppedSettings, k) {
				continue
			}
			if s.extra == nil {
				s.extra = make(map[string]any)
			}
			s.extra[k] = v
		}
		if err != nil {
			return s, fmt.Errorf("%s: %w", k, err)
		}
	}
	return s, nil
}

func optFloat(v any) (*float64, error) {
	f, err := toFloat(v)
	if err != nil {
		return nil, err
	}
	return &f, nil
}

func toFloat(v any) (float64, error) {
	switch n := v.(type) {
	case float64:
		return n, nil
	case float32:
		return float64(n), nil
	case int:
		return float64(n), nil
	case int64:
		return float64(n), nil
	case int32:
		return float64(n), nil
	case uint:
		return float64(n), nil
	case uint64:
		return float64(n), nil
	case uint32:
		return float64(n), nil
	case json.Number:
		return n.Float64()
	case string:
		// A YAML or env-templated value may arrive quoted.
		if f, err := strconv.ParseFloat(n, 64); err == nil {
			return f, nil
		}
	}
	return 0, fmt.Errorf("want a number, got %T %v", v, v)
}

func toInt(v any) (int64, error) {
	switch n := v.(type) {
	case int:
		return int64(n), nil
	case int64:
		return n, nil
	case int32:
		return int64(n), nil
	case uint:
		return int64(n), nil
	case uint32:
		return int64(n), nil
	case uint64:
		if n <= math.MaxInt64 {
			return int64(n), nil
		}
	case json.Number:
		return n.Int64()
	}
	f, err := toFloat(v)
	if err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return 0, fmt.Errorf("want an integer, got %T %v", v, v)
	}
	return int64(f), nil
}

func toString(v any) (string, error) {
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("want a string, got %T", v)
	}
	return s, nil
}

func toStrings(v any) ([]string, error) {
	switch x := v.(type) {
	case nil:
		return nil, nil
	case string:
		return []string{x}, nil
	case []string:
		return x, nil
	case []any:
		out := make([]string, len(x))
		for i, e := range x {
			s, ok := e.(string)
			if !ok {
				return nil, fmt.Errorf("want strings, got %T at %d", e, i)
			}
			out[i] = s
		}
		return out, nil
	}
	return nil, fmt.Errorf("want a string or a list of strings, got %T", v)
}

// CheckSettings reports, before any call, each model_settings key Generate
// would refuse, one error per key ("model_settings.max_tokens: want ..."),
// for the spec loader to report at the key's line (supervisor.CheckAgent
// asks every model of an agent's chain). Keys of the other providers pass,
// as they do in a call.
func (m *anthropicModel) CheckSettings(settings map[string]any, _ []string, _ bool) error {
	return checkSettings(settings)
}

func checkSettings(settings map[string]any) error {
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(settings)) {
		// One key at a time, so that every bad key is reported, not only
		// the first.
		if _, err := parseSettings(map[string]any{k: settings[k]}); err != nil {
			errs = append(errs, svc.Errorf(svc.KindSpecValidation, "model_settings.%v (anthropic model)", err))
		}
	}
	return errors.Join(errs...)
}
