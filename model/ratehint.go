package model

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	svc "github.com/svc-dev/svc"
)

// OpenAIRateHint reads the rate-limit headers of an OpenAI answer, a
// success or a failure: x-ratelimit-{limit,remaining,reset}-{requests,tokens}
// (reset as a Go-style duration such as "1s", "6m0s" or "20ms"), and
// retry-after-ms or Retry-After. A malformed header is ignored, never an
// error (compatible servers send all sorts); nil when nothing was read.
func OpenAIRateHint(h http.Header, now time.Time) *svc.RateHint {
	if h == nil {
		return nil
	}
	var r svc.RateHint
	for _, w := range []struct {
		win  *svc.RateWindow
		kind string
	}{{&r.Requests, "requests"}, {&r.Tokens, "tokens"}} {
		*w.win = rateWindow(h.Get("x-ratelimit-limit-"+w.kind), h.Get("x-ratelimit-remaining-"+w.kind),
			parseResetDuration(h.Get("x-ratelimit-reset-"+w.kind)))
	}
	return finishHint(&r, h, now)
}

// AnthropicRateHint reads the rate-limit headers of an Anthropic answer:
// anthropic-ratelimit-requests-{limit,remaining,reset} (reset as an RFC
// 3339 time), the same for tokens (the most restrictive token limit in
// effect), or else for input-tokens, or else output-tokens, and
// retry-after-ms or Retry-After. A malformed header is ignored; nil when
// nothing was read.
func AnthropicRateHint(h http.Header, now time.Time) *svc.RateHint {
	if h == nil {
		return nil
	}
	read := func(kind string) svc.RateWindow {
		p := "anthropic-ratelimit-" + kind + "-"
		return rateWindow(h.Get(p+"limit"), h.Get(p+"remaining"), parseResetTime(h.Get(p+"reset"), now))
	}
	var r svc.RateHint
	r.Requests = read("requests")
	for _, kind := range []string{"tokens", "input-tokens", "output-tokens"} {
		if r.Tokens = read(kind); r.Tokens.Limit > 0 {
			break
		}
	}
	return finishHint(&r, h, now)
}

// finishHint adds the wait r's answer asked for, and drops r when it says
// nothing.
func finishHint(r *svc.RateHint, h http.Header, now time.Time) *svc.RateHint {
	r.RetryAfter = RetryAfterOf(h, now)
	if r.Requests.Limit == 0 && r.Tokens.Limit == 0 && r.RetryAfter == 0 {
		return nil
	}
	return r
}

// RetryAfterOf reads the wait an answer asks for, as the providers' SDKs
// do: retry-after-ms (milliseconds) first, then Retry-After (seconds or an
// HTTP date); 0 when neither is there or readable.
func RetryAfterOf(h http.Header, now time.Time) time.Duration {
	if v := strings.TrimSpace(h.Get("Retry-After-Ms")); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms >= 0 && ms < float64(24*time.Hour/time.Millisecond) {
			return time.Duration(ms * float64(time.Millisecond))
		}
	}
	return ParseRetryAfter(strings.TrimSpace(h.Get("Retry-After")), now)
}

// rateWindow is a limit from its headers' values: none when the limit is
// missing or not a positive whole number; the remaining count is the
// limit when missing or malformed, and at most the limit.
func rateWindow(limit, remaining string, reset time.Duration) svc.RateWindow {
	l, err := strconv.ParseInt(strings.TrimSpace(limit), 10, 64)
	if err != nil || l <= 0 {
		return svc.RateWindow{}
	}
	w := svc.RateWindow{Limit: l, Remaining: l, Reset: reset}
	if n, err := strconv.ParseInt(strings.TrimSpace(remaining), 10, 64); err == nil && n >= 0 {
		w.Remaining = min(n, l)
	}
	return w
}

// maxReset bounds a reset read from a header: a per-minute limit resets
// within minutes, and a larger value is more likely a misread (a Unix
// time where seconds were meant) than a day's pause.
const maxReset = 24 * time.Hour

// parseResetDuration reads OpenAI's reset: a Go-style duration ("1s",
// "6m0s", "20ms", "1m30.5s") or, as some compatible servers send, plain
// seconds; 0 when malformed, negative or past maxReset.
func parseResetDuration(s string) time.Duration {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		f, ferr := strconv.ParseFloat(s, 64)
		if ferr != nil || math.IsNaN(f) || f > maxReset.Seconds() {
			return 0
		}
		d = time.Duration(f * float64(time.Second))
	}
	if d < 0 || d > maxReset {
		return 0
	}
	return d
}

// parseResetTime reads Anthropic's reset, an RFC 3339 time, as the wait
// from now; 0 when malformed, past or beyond maxReset.
func parseResetTime(s string, now time.Time) time.Duration {
	t, err := time.Parse(time.RFC3339, strings.TrimSpace(s))
	if err != nil {
		return 0
	}
	d := t.Sub(now)
	if d <= 0 || d > maxReset {
		return 0
	}
	return d
}
