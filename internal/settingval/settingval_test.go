package settingval_test

import (
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/internal/settingval"
)

func TestNumberIntegerCount(t *testing.T) {
	for _, v := range []any{3, int8(3), uint64(3), float32(3), 3.0, json.Number("3")} {
		if f, ok := settingval.Number(v); !ok || f != 3 {
			t.Errorf("Number(%T %v) = %v, %v", v, v, f, ok)
		}
		if n, ok := settingval.Count(v); !ok || n != 3 {
			t.Errorf("Count(%T %v) = %v, %v", v, v, n, ok)
		}
	}
	for _, v := range []any{"3", nil, true, math.NaN(), math.Inf(1), json.Number("x")} {
		if _, ok := settingval.Number(v); ok {
			t.Errorf("Number(%T %v) accepted", v, v)
		}
	}
	for _, v := range []any{-1, 2.5, uint64(math.MaxUint64), 1e300} {
		if _, ok := settingval.Count(v); ok {
			t.Errorf("Count(%T %v) accepted", v, v)
		}
	}
	if n, ok := settingval.Integer(-4.0); !ok || n != -4 {
		t.Errorf("Integer(-4.0) = %v, %v", n, ok)
	}
}

func TestStrings(t *testing.T) {
	for _, tc := range []struct {
		in   any
		want []string
		ok   bool
	}{
		{"END", []string{"END"}, true},
		{[]string{"a", "b"}, []string{"a", "b"}, true},
		{[]any{"a", "b"}, []string{"a", "b"}, true},
		{[]any{"a", 3}, nil, false},
		{3, nil, false},
	} {
		got, ok := settingval.Strings(tc.in)
		if ok != tc.ok || !slices.Equal(got, tc.want) {
			t.Errorf("Strings(%#v) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestSeconds(t *testing.T) {
	for _, tc := range []struct {
		in   any
		want time.Duration
		ok   bool
	}{
		{"90s", 90 * time.Second, true},
		{" 2m ", 2 * time.Minute, true},
		{1.5, 1500 * time.Millisecond, true},
		{30, 30 * time.Second, true},
		{0, 0, false},
		{"-1s", 0, false},
		{"soon", 0, false},
		{1e300, 0, false},
	} {
		got, ok := settingval.Seconds(tc.in)
		if ok != tc.ok || (ok && got != tc.want) {
			t.Errorf("Seconds(%#v) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

// CheckEach reports every bad key, each once, without the parser's prefix.
func TestCheckEach(t *testing.T) {
	parse := func(one map[string]any) error {
		for k, v := range one {
			if v == "bad" {
				return svc.Errorf(svc.KindSpecValidation, "acme model: model_settings.%s: want good", k)
			}
		}
		return nil
	}
	err := settingval.CheckEach(map[string]any{"b": "bad", "a": "bad", "c": "good"}, "acme", parse)
	want := "model_settings.a: want good (acme model)\nmodel_settings.b: want good (acme model)"
	if err == nil || !strings.Contains(err.Error(), want) || svc.KindOf(err) != svc.KindSpecValidation {
		t.Fatalf("CheckEach = %v; want %q, a SpecValidationError", err, want)
	}
	if err := settingval.CheckEach(map[string]any{"c": "good"}, "acme", parse); err != nil {
		t.Fatalf("CheckEach of good settings = %v", err)
	}
}
