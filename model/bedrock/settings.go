package bedrock

import (
	"errors"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/internal/settingval"
)

// settings are the model_settings of one call, checked.
type settings struct {
	region, baseURL string
	timeout         time.Duration
	maxRetries      int // -1 unless set
	streamIdle      time.Duration

	temperature, topP *float32
	maxTokens         *int32
	stop              []string
}

// parseSettings reads model_settings; a bad value of a key the provider
// reads is a SpecValidationError, and other keys are left out.
func parseSettings(m map[string]any) (settings, error) {
	s := settings{maxRetries: -1}
	bad := func(key, want string, v any) (settings, error) {
		return settings{}, svc.Errorf(svc.KindSpecValidation, "bedrock model: model_settings.%s: want %s, got %v (%T)", key, want, v, v)
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		v := m[k]
		if v == nil {
			continue
		}
		switch k {
		case "region":
			str, ok := v.(string)
			if !ok || strings.TrimSpace(str) == "" {
				return bad(k, "an AWS region such as us-east-1", v)
			}
			s.region = str
		case "base_url":
			str, ok := v.(string)
			if !ok {
				return bad(k, "an http or https URL", v)
			}
			if str == "" {
				continue
			}
			if _, err := parseBaseURL(str); err != nil {
				return bad(k, "an http or https URL", v)
			}
			s.baseURL = str
		case "timeout":
			d, ok := duration(v)
			if !ok {
				return bad(k, `a positive number of seconds or a duration such as "90s"`, v)
			}
			s.timeout = d
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
		case "temperature", "top_p":
			f, ok := settingval.Number(v)
			if !ok || math.Abs(f) > math.MaxFloat32 {
				return bad(k, "a number", v)
			}
			x := float32(f)
			if k == "temperature" {
				s.temperature = &x
			} else {
				s.topP = &x
			}
		case "max_tokens":
			n, ok := settingval.Count(v)
			if !ok || n == 0 || n > math.MaxInt32 {
				return bad(k, "a positive integer", v)
			}
			x := int32(n)
			s.maxTokens = &x
		case "stop", "stop_sequences":
			switch t := v.(type) {
			case string:
				s.stop = append(s.stop, t)
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
		}
	}
	return s, nil
}

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
// would refuse, one error per key.
func (m *bedrockModel) CheckSettings(settings map[string]any, _ []string, _ bool) error {
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(settings)) {
		if _, err := parseSettings(map[string]any{k: settings[k]}); err != nil {
			msg := err.Error()
			if se, ok := errors.AsType[*svc.Error](err); ok {
				msg = se.Message
			}
			errs = append(errs, svc.Errorf(svc.KindSpecValidation, "%s (bedrock model)", strings.TrimPrefix(msg, "bedrock model: ")))
		}
	}
	return errors.Join(errs...)
}
