// Package settingval reads the values of model_settings, which arrive
// decoded from JSON (float64, json.Number) or YAML (int, uint64, float64) or
// set in Go (any numeric type), so every provider accepts 3, 3.0 and "3"
// the same way.
package settingval

import (
	"encoding/json"
	"math"
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
