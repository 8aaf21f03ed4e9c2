package anthropic

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/model"
)

// callError turns a failed SDK call into the error Generate returns; res
// is the last response, if one came.
func callError(ctx context.Context, name string, err error, res *http.Response) error {
	if cerr := ctx.Err(); cerr != nil {
		if errors.Is(cerr, context.DeadlineExceeded) {
			return &model.ProviderError{Provider: Provider, Model: name, Class: model.ClassTimeout,
				Message: "the call's deadline passed", Err: cerr}
		}
		// Not a ProviderError: the caller gave up, another model won't help.
		return fmt.Errorf("%s:%s: %w", Provider, name, cerr)
	}

	var ae *anthropic.Error
	if errors.As(err, &ae) {
		pe := &model.ProviderError{Provider: Provider, Model: name, Status: ae.StatusCode,
			Class: model.ClassOf(ae.StatusCode), Err: err}
		switch ae.Type() {
		case anthropic.ErrorTypeOverloadedError:
			pe.Class = model.ClassOverloaded
		case anthropic.ErrorTypeRateLimitError:
			pe.Class = model.ClassRateLimit
		}
		pe.Message = apiMessage(ae)
		if ae.StatusCode == http.StatusBadRequest && strings.Contains(pe.Message, "prompt is too long") {
			// "invalid_request_error: prompt is too long: 210000 tokens >
			// 200000 maximum": Anthropic has no error code of its own for it.
			pe.Class = model.ClassContext
		}
		if ae.Response != nil {
			pe.RetryAfter = retryAfter(ae.Response.Header, time.Now())
			pe.RateLimit = model.AnthropicRateHint(ae.Response.Header, time.Now())
		}
		return pe
	}

	pe := &model.ProviderError{Provider: Provider, Model: name, Message: err.Error(), Err: err}
	var ue *url.Error
	var ne net.Error
	switch {
	case res != nil:
		// A response came but could not be read or decoded.
		pe.Status = res.StatusCode
		pe.Class = model.ClassServer
		pe.Message = "malformed response: " + err.Error()
	case errors.As(err, &ue), errors.As(err, &ne), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, context.DeadlineExceeded):
		// No response: the connection failed or dropped, or an attempt
		// timed out.
		pe.Class = model.ClassTimeout
	default:
		// The SDK could not build the request.
		pe.Class = model.ClassInvalid
	}
	return pe
}

// withHint adds to a call's result what its answer's headers said of the
// provider's rate limits (res is the last answer, nil when none came), on
// the response or on the ProviderError, success or failure, so that a
// learned rate limit can pace the key by them.
func withHint(resp svc.ModelResponse, err error, res *http.Response) (svc.ModelResponse, error) {
	if res == nil {
		return resp, err
	}
	if err == nil {
		resp.RateLimit = model.AnthropicRateHint(res.Header, time.Now())
	} else if pe, ok := errors.AsType[*model.ProviderError](err); ok && pe.RateLimit == nil {
		pe.RateLimit = model.AnthropicRateHint(res.Header, time.Now())
	}
	return resp, err
}

// apiMessage is the message of an API error body
// {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}
// as "overloaded_error: Overloaded", or the body itself when it is not one.
func apiMessage(ae *anthropic.Error) string {
	raw := strings.TrimSpace(ae.RawJSON())
	var body struct {
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal([]byte(raw), &body) == nil && (body.Error.Type != "" || body.Error.Message != "") {
		if body.Error.Type == "" {
			return body.Error.Message
		}
		return body.Error.Type + ": " + body.Error.Message
	}
	if raw == "" {
		return http.StatusText(ae.StatusCode)
	}
	const limit = 512
	if len(raw) > limit {
		raw = raw[:limit] + "..."
	}
	return raw
}

// retryAfter reads the wait a response asks for, the way the SDK does:
// retry-after-ms first, then Retry-After in seconds or as an HTTP date.
func retryAfter(h http.Header, now time.Time) time.Duration {
	if v := h.Get("Retry-After-Ms"); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms >= 0 {
			return time.Duration(ms * float64(time.Millisecond))
		}
	}
	return model.ParseRetryAfter(h.Get("Retry-After"), now)
}

// capRetryWait keeps the SDK from waiting out a Retry-After longer than
// limit or past the call's deadline: it would honour any value, however
// long, and a caller with fallback models is better served by failing now.
// It does so by marking such a response x-should-retry: false, which the
// SDK obeys.
func capRetryWait(limit time.Duration) option.Middleware {
	return func(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
		res, err := next(req)
		if err != nil || res == nil || !retryable(res.StatusCode) || res.Header.Get("x-should-retry") != "" {
			return res, err
		}
		now := time.Now()
		wait := retryAfter(res.Header, now)
		if wait <= 0 {
			return res, err
		}
		dl, hasDeadline := req.Context().Deadline()
		if wait > limit || (hasDeadline && now.Add(wait).After(dl)) {
			res.Header.Set("x-should-retry", "false")
		}
		return res, err
	}
}

// retryable are the statuses the SDK retries.
func retryable(status int) bool {
	return status == http.StatusRequestTimeout || status == http.StatusConflict ||
		status == http.StatusTooManyRequests || status >= http.StatusInternalServerError
}
