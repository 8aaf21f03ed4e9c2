package model_test

import (
	"net/http"
	"testing"
	"time"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/model"
)

var hintNow = time.Date(2026, 11, 29, 1, 0, 0, 0, time.UTC)

func header(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h
}

func TestOpenAIRateHint(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    http.Header
		want *svc.RateHint
	}{
		{"nothing", header(), nil},
		{"requests and tokens", header(
			"x-ratelimit-limit-requests", "5000", "x-ratelimit-remaining-requests", "4999", "x-ratelimit-reset-requests", "12ms",
			"x-ratelimit-limit-tokens", "160000", "x-ratelimit-remaining-tokens", "159000", "x-ratelimit-reset-tokens", "6m0s"),
			&svc.RateHint{Requests: svc.RateWindow{Limit: 5000, Remaining: 4999, Reset: 12 * time.Millisecond},
				Tokens: svc.RateWindow{Limit: 160000, Remaining: 159000, Reset: 6 * time.Minute}}},
		{"reset 1s, fractional, plain seconds", header(
			"x-ratelimit-limit-requests", "60", "x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "1s",
			"x-ratelimit-limit-tokens", "1000", "x-ratelimit-remaining-tokens", "10", "x-ratelimit-reset-tokens", "7.5"),
			&svc.RateHint{Requests: svc.RateWindow{Limit: 60, Remaining: 0, Reset: time.Second},
				Tokens: svc.RateWindow{Limit: 1000, Remaining: 10, Reset: 7500 * time.Millisecond}}},
		{"1m30.5s", header("x-ratelimit-limit-requests", "10", "x-ratelimit-reset-requests", "1m30.5s"),
			&svc.RateHint{Requests: svc.RateWindow{Limit: 10, Remaining: 10, Reset: 90*time.Second + 500*time.Millisecond}}},
		{"malformed limit drops the window", header("x-ratelimit-limit-requests", "lots", "x-ratelimit-remaining-requests", "3"), nil},
		{"zero or negative limit", header("x-ratelimit-limit-requests", "0", "x-ratelimit-limit-tokens", "-5"), nil},
		{"malformed remaining and reset are ignored", header(
			"x-ratelimit-limit-requests", "100", "x-ratelimit-remaining-requests", "-1", "x-ratelimit-reset-requests", "soon",
			"x-ratelimit-limit-tokens", "100", "x-ratelimit-remaining-tokens", "1e3", "x-ratelimit-reset-tokens", "-2s"),
			&svc.RateHint{Requests: svc.RateWindow{Limit: 100, Remaining: 100}, Tokens: svc.RateWindow{Limit: 100, Remaining: 100}}},
		{"remaining above the limit is the limit", header("x-ratelimit-limit-requests", "10", "x-ratelimit-remaining-requests", "11"),
			&svc.RateHint{Requests: svc.RateWindow{Limit: 10, Remaining: 10}}},
		{"a Unix time for a reset is ignored", header("x-ratelimit-limit-requests", "10", "x-ratelimit-reset-requests", "1764378000"),
			&svc.RateHint{Requests: svc.RateWindow{Limit: 10, Remaining: 10}}},
		{"NaN reset", header("x-ratelimit-limit-requests", "10", "x-ratelimit-reset-requests", "NaN"),
			&svc.RateHint{Requests: svc.RateWindow{Limit: 10, Remaining: 10}}},
		{"retry-after-ms first", header("retry-after-ms", "250", "Retry-After", "3"), &svc.RateHint{RetryAfter: 250 * time.Millisecond}},
		{"Retry-After seconds", header("Retry-After", "3"), &svc.RateHint{RetryAfter: 3 * time.Second}},
		{"Retry-After date", header("Retry-After", hintNow.Add(2*time.Second).Format(http.TimeFormat)), &svc.RateHint{RetryAfter: 2 * time.Second}},
		{"malformed retry-after-ms falls back", header("retry-after-ms", "x", "Retry-After", "1"), &svc.RateHint{RetryAfter: time.Second}},
		{"malformed Retry-After", header("Retry-After", "later", "retry-after-ms", "-4"), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := model.OpenAIRateHint(tc.h, hintNow)
			if !equalHint(got, tc.want) {
				t.Errorf("got %+v, want %+v", deref(got), deref(tc.want))
			}
		})
	}
}

func TestAnthropicRateHint(t *testing.T) {
	at := func(d time.Duration) string { return hintNow.Add(d).Format(time.RFC3339) }
	for _, tc := range []struct {
		name string
		h    http.Header
		want *svc.RateHint
	}{
		{"nothing", header(), nil},
		{"requests and tokens", header(
			"anthropic-ratelimit-requests-limit", "50", "anthropic-ratelimit-requests-remaining", "49", "anthropic-ratelimit-requests-reset", at(2*time.Second),
			"anthropic-ratelimit-tokens-limit", "40000", "anthropic-ratelimit-tokens-remaining", "0", "anthropic-ratelimit-tokens-reset", at(time.Minute),
			"anthropic-ratelimit-input-tokens-limit", "30000"),
			&svc.RateHint{Requests: svc.RateWindow{Limit: 50, Remaining: 49, Reset: 2 * time.Second},
				Tokens: svc.RateWindow{Limit: 40000, Remaining: 0, Reset: time.Minute}}},
		{"input tokens when no tokens", header(
			"anthropic-ratelimit-input-tokens-limit", "30000", "anthropic-ratelimit-input-tokens-remaining", "100", "anthropic-ratelimit-input-tokens-reset", at(3*time.Second),
			"anthropic-ratelimit-output-tokens-limit", "8000"),
			&svc.RateHint{Tokens: svc.RateWindow{Limit: 30000, Remaining: 100, Reset: 3 * time.Second}}},
		{"output tokens last", header("anthropic-ratelimit-output-tokens-limit", "8000", "anthropic-ratelimit-output-tokens-remaining", "7000"),
			&svc.RateHint{Tokens: svc.RateWindow{Limit: 8000, Remaining: 7000}}},
		{"fractional seconds and offsets", header("anthropic-ratelimit-requests-limit", "5",
			"anthropic-ratelimit-requests-reset", hintNow.Add(1500*time.Millisecond).In(time.FixedZone("x", 3600)).Format(time.RFC3339Nano)),
			&svc.RateHint{Requests: svc.RateWindow{Limit: 5, Remaining: 5, Reset: 1500 * time.Millisecond}}},
		{"past, malformed and far resets are ignored", header(
			"anthropic-ratelimit-requests-limit", "5", "anthropic-ratelimit-requests-reset", at(-time.Second),
			"anthropic-ratelimit-tokens-limit", "9", "anthropic-ratelimit-tokens-reset", "in a bit",
			"retry-after", "x"),
			&svc.RateHint{Requests: svc.RateWindow{Limit: 5, Remaining: 5}, Tokens: svc.RateWindow{Limit: 9, Remaining: 9}}},
		{"a reset a year away", header("anthropic-ratelimit-requests-limit", "5", "anthropic-ratelimit-requests-reset", at(365*24*time.Hour)),
			&svc.RateHint{Requests: svc.RateWindow{Limit: 5, Remaining: 5}}},
		{"malformed limit", header("anthropic-ratelimit-requests-limit", "5.5", "anthropic-ratelimit-requests-remaining", "0"), nil},
		{"429 with retry-after", header("anthropic-ratelimit-requests-limit", "5", "anthropic-ratelimit-requests-remaining", "0", "retry-after", "7"),
			&svc.RateHint{Requests: svc.RateWindow{Limit: 5}, RetryAfter: 7 * time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := model.AnthropicRateHint(tc.h, hintNow)
			if !equalHint(got, tc.want) {
				t.Errorf("got %+v, want %+v", deref(got), deref(tc.want))
			}
		})
	}
}

func equalHint(a, b *svc.RateHint) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

func deref(h *svc.RateHint) any {
	if h == nil {
		return nil
	}
	return *h
}
