package modeltest

import (
	"testing"

	"github.com/svc-dev/svc/llmsim"
)

// SimRule is the llmsim scenario rule that follows s on every request, for
// a provider whose suite runs against llmsim. overloaded is the status
// the provider's API answers when overloaded ("503" for OpenAI, "529" for
// Anthropic). Status failures carry ErrorMessage and a retry-after-ms of
// 1, so that the SDKs' retries take milliseconds.
func SimRule(t *testing.T, s Script, overloaded string) llmsim.Rule {
	t.Helper()
	r := llmsim.Rule{Hang: s.Hang, Message: ErrorMessage}
	switch s.Fail {
	case RateLimited:
		r.Fault, r.RetryAfterMs = "429", 1
	case Overloaded:
		r.Fault, r.RetryAfterMs = overloaded, 1
	case ServerError:
		r.Fault, r.RetryAfterMs = "500", 1
	case AuthFailed:
		r.Fault = "401"
	case InvalidRequest:
		r.Fault = "400"
	case Malformed:
		r.Fault = "malformed"
	case "":
	default:
		t.Fatalf("llmsim cannot script %s", s.Fail)
	}
	a := s.Answer
	r.Reply.Text = a.Text
	for _, c := range a.ToolCalls {
		r.Reply.ToolCalls = append(r.Reply.ToolCalls, llmsim.ToolCall{Name: c.Name, Arguments: string(c.Arguments)})
	}
	if a.InputTokens > 0 || a.OutputTokens > 0 {
		r.Usage = &llmsim.Usage{InputTokens: int(a.InputTokens), OutputTokens: int(a.OutputTokens)}
	}
	return r
}
