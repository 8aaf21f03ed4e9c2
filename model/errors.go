package model

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	svc "github.com/svc-dev/svc"
)

// Class says what kind of provider failure an error is, which decides
// whether an agent's fallback_models are tried.
type Class string

// Classes of provider failures.
const (
	ClassRateLimit  Class = "rate_limit"      // 429
	ClassOverloaded Class = "overloaded"      // 529, 503
	ClassServer     Class = "server"          // other 5xx
	ClassTimeout    Class = "timeout"         // 408, a deadline, a dropped connection
	ClassInvalid    Class = "invalid_request" // other 4xx: the request is wrong; another model won't fix it
	ClassAuth       Class = "auth"            // 401, 403: the key is wrong
	// ClassContext is a 400 whose prompt did not fit the model's context
	// window (OpenAI's context_length_exceeded, Anthropic's "prompt is
	// too long"). The same request fails the same way on this model; only
	// a model with a larger window can take it (ContextWindow).
	ClassContext Class = "context_length"
)

// ProviderError is a failed call to a model provider's API, after the
// provider client's own retries.
type ProviderError struct {
	Provider string // "openai", "anthropic"
	Model    string // the name part of the model id
	Status   int    // the HTTP status, 0 when no response came
	Class    Class
	// RetryAfter is the server's Retry-After, when it sent one.
	RetryAfter time.Duration
	// RateLimit is what the failed answer's headers said of the
	// provider's rate limits (nil: no answer, or nothing said).
	RateLimit *svc.RateHint
	Message   string
	Err       error
}

func (e *ProviderError) Error() string {
	msg := e.Message
	if msg == "" && e.Err != nil {
		msg = e.Err.Error()
	}
	if e.Status != 0 {
		return fmt.Sprintf("%s:%s: %s (HTTP %d): %s", e.Provider, e.Model, e.Class, e.Status, msg)
	}
	return fmt.Sprintf("%s:%s: %s: %s", e.Provider, e.Model, e.Class, msg)
}

func (e *ProviderError) Unwrap() error { return e.Err }

// Fallback reports whether another model may succeed where this one
// failed: rate limits, overload, server errors and timeouts, not invalid
// requests or a bad key.
func (e *ProviderError) Fallback() bool {
	switch e.Class {
	case ClassInvalid, ClassAuth, ClassContext:
		return false
	}
	return true
}

// ClassOf classifies an HTTP status of a failed provider call.
func ClassOf(status int) Class {
	switch {
	case status == http.StatusTooManyRequests:
		return ClassRateLimit
	case status == 529 || status == http.StatusServiceUnavailable:
		return ClassOverloaded
	case status == http.StatusRequestTimeout || status == http.StatusGatewayTimeout:
		return ClassTimeout
	case status >= 500:
		return ClassServer
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return ClassAuth
	case status >= 400:
		return ClassInvalid
	}
	return ClassServer
}

// CanFallback reports whether an agent should try its next model after
// err. A ProviderError decides by its class; a deadline of the call itself
// is a timeout; any other failure (a model that is not an HTTP provider,
// such as the test provider) falls back, as it always has.
func CanFallback(err error) bool {
	var pe *ProviderError
	if errors.As(err, &pe) {
		return pe.Fallback()
	}
	if errors.Is(err, context.Canceled) {
		return false
	}
	return true
}

// IsContextError reports whether err is a provider's context-length error.
func IsContextError(err error) bool {
	var pe *ProviderError
	return errors.As(err, &pe) && pe.Class == ClassContext
}

// ParseRetryAfter reads a Retry-After header: delta seconds or an HTTP
// date. It returns 0 when h is empty or unreadable.
func ParseRetryAfter(h string, now time.Time) time.Duration {
	if h == "" {
		return 0
	}
	var secs float64
	if _, err := fmt.Sscanf(h, "%g", &secs); err == nil && secs >= 0 {
		return time.Duration(secs * float64(time.Second))
	}
	if t, err := http.ParseTime(h); err == nil {
		if d := t.Sub(now); d > 0 {
			return d
		}
	}
	return 0
}
