// Package settingval reads the values of model_settings, which arrive
// decoded from JSON (float64, json.Number) or YAML (int, uint64, float64) or
// set in Go (any numeric type), so every provider accepts 3, 3.0 and "3"
// the same way.
package settingval

import (
	"encoding/json"
	"errors"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/svc-dev/svc"
)

// Number reads any numeric value as a finite float64.
func Number(v any) (float64, bool) {
	var f float64
	switch n := v.(type) {
	case int:
		f = float64(n)
	case int8:
		f = float64(n)
	case int16:
		f = float64(n)
	case int32:
		f = float64(n)
	case int64:
		f = float64(n)
	case uint:
		f = float64(n)
	case uint8:
		f = float64(n)
	case uint16:
		f = float64(n)
	case uint32:
		f = float64(n)
	case uint64:
		f = float64(n)
	case float32:
		f = float64(n)
	case float64:
		f = n
	case json.Number:
		var err error
		if f, err = n.Float64(); err != nil {
			return 0, false
		}
	default:
		return 0, false
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, false
	}
	return f, true
}

// Integer reads an int64; a float must be integral (JSON decoders give 3
// as 3.0).
func Integer(v any) (int64, bool) {
	switch n := v.(type) {
	case int:
		return int64(n), true
	case int64:
		return n, true
	case uint64:
		return int64(n), n <= math.MaxInt64
	case json.Number:
		if i, err := n.Int64(); err == nil {
			return i, true
		}
	}
	f, ok := Number(v)
	if !ok || f != math.Trunc(f) || f >= math.MaxInt64 || f < math.MinInt64 {
		return 0, false
	}
	return int64(f), true
}

// Count reads a non-negative integer.
func Count(v any) (int64, bool) {
	n, ok := Integer(v)
	return n, ok && n >= 0
}

// Strings reads a string or a list of strings (stop sequences), as
// []string from Go or []any from a decoder.
func Strings(v any) ([]string, bool) {
	switch t := v.(type) {
	case string:
		return []string{t}, true
	case []string:
		return t, true
	case []any:
		out := make([]string, 0, len(t))
		for _, e := range t {
			s, ok := e.(string)
			if !ok {
				return nil, false
			}
			out = append(out, s)
		}
		return out, true
	}
	return nil, false
}

// Seconds reads a positive duration: a Go duration string ("90s") or a
// number of seconds.
func Seconds(v any) (time.Duration, bool) {
	if str, ok := v.(string); ok {
		d, err := time.ParseDuration(strings.TrimSpace(str))
		return d, err == nil && d > 0
	}
	f, ok := Number(v)
	if !ok || f <= 0 || f > float64(math.MaxInt64/int64(time.Second)) {
		return 0, false
	}
	return time.Duration(f * float64(time.Second)), true
}

// CheckEach checks settings one key at a time with parse, so that every bad
// key is reported, not only the first: one SpecValidationError per key,
// its message without parse's "<provider> model: " prefix and with
// " (<provider> model)" after it, for the spec loader to report at the
// key's line.
func CheckEach(settings map[string]any, provider string, parse func(map[string]any) error) error {
	var errs []error
	prefix := provider + " model: "
	for _, k := range slices.Sorted(maps.Keys(settings)) {
		if err := parse(map[string]any{k: settings[k]}); err != nil {
			msg := err.Error()
			if se, ok := errors.AsType[*svc.Error](err); ok {
				msg = se.Message
			}
			errs = append(errs, svc.Errorf(svc.KindSpecValidation, "%s (%s model)", strings.TrimPrefix(msg, prefix), provider))
		}
	}
	return errors.Join(errs...)
}
