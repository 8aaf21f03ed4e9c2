package bedrock

import (
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
			d, ok := settingval.Seconds(v)
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
// would refuse, one error per key.
func (m *bedrockModel) CheckSettings(settings map[string]any, _ []string, _ bool) error {
	return settingval.CheckEach(settings, "bedrock", func(one map[string]any) error {
		_, err := parseSettings(one)
		return err
	})
}
