package openai_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/svc-dev/svc/model/modeltest"
	"github.com/svc-dev/svc/model/openai"
)

// TestSuite runs the model provider contract suite on the provider,
// against a local Chat Completions server answering every request per the
// suite's script.
func TestSuite(t *testing.T) {
	modeltest.Run(t, modeltest.Provider{
		Name:  openai.Provider,
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
			{"seed": "x"},
			{"stop": 5},
			{"stop": []any{"a", 1}},
			{"timeout": "soon"},
			{"timeout": 0},
			{"max_retries": -1},
			{"base_url": "localhost:8080"},
			{"api_key": 42},
			{"stream": "yes"},
			{"stream_options": map[string]any{"include_usage": false}},
			{"stream_idle_timeout_ms": 0},
			{"messages": []any{}},
			{"model": "other"},
			{"extra": func() {}},
		},
	})
}

// scripted starts a Chat Completions server that answers every request
// per s, and returns a model talking to it.
func scripted(t *testing.T, s modeltest.Script) modeltest.Scripted {
	t.Helper()
	var calls atomic.Int64
	stop := make(chan struct{}) // ends a hanging handler whose client never hung up
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		// Read the body, so that the server sees the client hang up.
		_, _ = io.Copy(io.Discard, r.Body)
		errBody := fmt.Sprintf(`{"error":{"message":%q,"type":"modeltest"}}`, modeltest.ErrorMessage)
		switch s.Fail {
		case modeltest.RateLimited:
			w.Header().Set("retry-after-ms", "1")
			reply(w, http.StatusTooManyRequests, errBody)
			return
		case modeltest.Overloaded:
			w.Header().Set("retry-after-ms", "1")
			reply(w, http.StatusServiceUnavailable, errBody)
			return
		case modeltest.ServerError:
			w.Header().Set("retry-after-ms", "1")
			reply(w, http.StatusInternalServerError, errBody)
			return
		case modeltest.AuthFailed:
			reply(w, http.StatusUnauthorized, errBody)
			return
		case modeltest.InvalidRequest:
			reply(w, http.StatusBadRequest, errBody)
			return
		case modeltest.Malformed:
			reply(w, http.StatusOK, `this is not json`)
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
		msg := map[string]any{"role": "assistant", "content": a.Text}
		if len(a.ToolCalls) > 0 {
			var tcs []map[string]any
			for i, c := range a.ToolCalls {
				tcs = append(tcs, map[string]any{"id": fmt.Sprintf("call_%d", i), "type": "function",
					"function": map[string]any{"name": c.Name, "arguments": string(c.Arguments)}})
			}
			msg = map[string]any{"role": "assistant", "content": nil, "tool_calls": tcs}
		}
		body, _ := json.Marshal(map[string]any{
			"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": modeltest.ModelName,
			"choices": []any{map[string]any{"index": 0, "finish_reason": "stop", "message": msg}},
			"usage": map[string]any{"prompt_tokens": a.InputTokens, "completion_tokens": a.OutputTokens,
				"total_tokens": a.InputTokens + a.OutputTokens},
		})
		reply(w, http.StatusOK, string(body))
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(stop) }) // runs before srv.Close
	m, err := openai.NewWithConfig(modeltest.ModelName, openai.Config{BaseURL: srv.URL + "/v1", APIKey: "sk-test", HTTPClient: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	return modeltest.Scripted{Model: m, Calls: func() int { return int(calls.Load()) }}
}
