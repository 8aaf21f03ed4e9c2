package anthropic

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/svc-dev/svc/model/modeltest"
)

// TestSuite runs the model provider contract suite on the provider,
// against a local Messages API server answering every request per the
// suite's script.
func TestSuite(t *testing.T) {
	modeltest.Run(t, modeltest.Provider{
		Name:  Provider,
		Model: scripted,
		Failures: []modeltest.Failure{
			modeltest.RateLimited, modeltest.Overloaded, modeltest.ServerError,
			modeltest.AuthFailed, modeltest.InvalidRequest, modeltest.Malformed,
		},
		SplitUsage: true,
		BadSettings: []map[string]any{
			{"temperature": "hot"},
			{"max_tokens": 1.5},
			{"max_tokens": -1},
			{"top_k": []any{1}},
			{"stop": []any{1, 2}},
			{"structured_output": "magic"},
			{"api_key": 42},
			{"base_url": "not a url"},
		},
	})
}

// scripted starts a Messages API server that answers every request per
// s, and returns a model talking to it.
func scripted(t *testing.T, s modeltest.Script) modeltest.Scripted {
	t.Helper()
	var calls atomic.Int64
	stop := make(chan struct{}) // ends a hanging handler whose client never hung up
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		// Read the body, so that the server sees the client hang up.
		_, _ = io.Copy(io.Discard, r.Body)
		msg := modeltest.ErrorMessage
		switch s.Fail {
		case modeltest.RateLimited:
			apiError(w, http.StatusTooManyRequests, "rate_limit_error", msg, "Retry-After-Ms", "1")
			return
		case modeltest.Overloaded:
			apiError(w, 529, "overloaded_error", msg, "Retry-After-Ms", "1")
			return
		case modeltest.ServerError:
			apiError(w, http.StatusInternalServerError, "api_error", msg, "Retry-After-Ms", "1")
			return
		case modeltest.AuthFailed:
			apiError(w, http.StatusUnauthorized, "authentication_error", msg)
			return
		case modeltest.InvalidRequest:
			apiError(w, http.StatusBadRequest, "invalid_request_error", msg)
			return
		case modeltest.Malformed:
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `this is not json`)
			return
		case "":
		default:
			t.Errorf("no way to script %s", s.Fail)
			return
		}
		if s.Hang {
			select { // until the client gives up
			case <-r.Context().Done():
			case <-stop:
			}
			return
		}
		a := s.Answer
		content := []map[string]any{{"type": "text", "text": a.Text}}
		if len(a.ToolCalls) > 0 {
			content = nil
			for i, c := range a.ToolCalls {
				content = append(content, map[string]any{"type": "tool_use", "id": fmt.Sprintf("toolu_%d", i),
					"name": c.Name, "input": json.RawMessage(c.Arguments)})
			}
		}
		b, _ := json.Marshal(content)
		reply(w, string(b), fmt.Sprintf(`{"input_tokens":%d,"output_tokens":%d}`, a.InputTokens, a.OutputTokens))
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(stop) }) // runs before srv.Close
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	m, err := NewWithConfig(modeltest.ModelName, Config{BaseURL: srv.URL, APIKey: "sk-test", HTTPClient: &http.Client{Transport: tr}})
	if err != nil {
		t.Fatal(err)
	}
	return modeltest.Scripted{Model: m, Calls: func() int { return int(calls.Load()) }}
}
