package google

import (
	"maps"
	"math"
	"net/url"
	"slices"
	"time"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/internal/settingval"
)

// settings are the model_settings of one call, checked.
type settings struct {
	apiKey, apiKeyEnv string
	baseURL           *url.URL
	timeout           time.Duration
	maxRetries        int // -1 unless set
	streamIdle        time.Duration

	temperature, topP, topK           *float32
	presencePenalty, frequencyPenalty *float32
	maxTokens                         int32
	seed                              *int32
	thinkingBudget                    *int32
	stop                              []string
}

// parseSettings reads model_settings; a bad value of a key the provider
// reads is a SpecValidationError. Other keys are left out (see the
// package doc).
func parseSettings(m map[string]any) (settings, error) {
	s := settings{maxRetries: -1}
	bad := func(key, want string, v any) (settings, error) {
		return settings{}, svc.Errorf(svc.KindSpecValidation, "google model: model_settings.%s: want %s, got %v (%T)", key, want, v, v)
	}
	f32 := func(v any) (*float32, bool) {
		f, ok := settingval.Number(v)
		if !ok || math.Abs(f) > math.MaxFloat32 {
			return nil, false
		}
		x := float32(f)
		return &x, true
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		v := m[k]
		if v == nil {
			continue
		}
		var ok bool
		switch k {
		case "api_key", "api_key_env":
			var str string
			if str, ok = v.(string); !ok {
				return bad(k, "a string", v)
			}
			if k == "api_key" {
				s.apiKey = str
			} else {
				s.apiKeyEnv = str
			}
		case "base_url":
			str, isStr := v.(string)
			if !isStr {
				return bad(k, "an http or https URL", v)
			}
			if str == "" {
				continue
			}
			u, err := parseBaseURL(str)
			if err != nil {
				return bad(k, "an http or https URL", v)
			}
			s.baseURL = u
		case "timeout":
			if s.timeout, ok = settingval.Seconds(v); !ok {
				return bad(k, `a positive number of seconds or a duration such as "90s"`, v)
			}
		case "max_retries":
			n, ok := settingval.Count(v)
			if !ok || n > 100 {
				return bad(k, "an integer from 0 to 100", v)
			}
			s.maxRetries = int(n)
		case "stream":
			if _, ok := v.(bool); !ok {
				return bad(k, "true or false", v)
			}
		case "stream_idle_timeout_ms":
			n, ok := settingval.Count(v)
			if !ok || n == 0 || n > math.MaxInt64/int64(time.Millisecond) {
				return bad(k, "a positive number of milliseconds", v)
			}
			s.streamIdle = time.Duration(n) * time.Millisecond
		case "temperature", "top_p", "top_k", "presence_penalty", "frequency_penalty":
			p, ok := f32(v)
			if !ok {
				return bad(k, "a number", v)
			}
			*map[string]**float32{"temperature": &s.temperature, "top_p": &s.topP, "top_k": &s.topK,
				"presence_penalty": &s.presencePenalty, "frequency_penalty": &s.frequencyPenalty}[k] = p
		case "max_tokens":
			n, ok := settingval.Count(v)
			if !ok || n == 0 || n > math.MaxInt32 {
				return bad(k, "a positive integer", v)
			}
			s.maxTokens = int32(n)
		case "seed", "thinking_budget":
			n, ok := settingval.Integer(v)
			if !ok || n < math.MinInt32 || n > math.MaxInt32 {
				return bad(k, "an integer", v)
			}
			x := int32(n)
			if k == "seed" {
				s.seed = &x
			} else {
				s.thinkingBudget = &x
			}
		case "stop", "stop_sequences":
			stop, ok := settingval.Strings(v)
			if !ok {
				return bad(k, "a string or a list of strings", v)
			}
			s.stop = append(s.stop, stop...)
		}
	}
	return s, nil
}

// CheckSettings reports, before any call, each model_settings key Generate
// would refuse, one error per key, for the spec loader to report at the
// key's line.
func (m *geminiModel) CheckSettings(settings map[string]any, _ []string, _ bool) error {
	return settingval.CheckEach(settings, "google", func(one map[string]any) error {
		_, err := parseSettings(one)
		return err
	})
}
