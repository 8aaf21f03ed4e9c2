package openai

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/svc-dev/svc/model"
)

// FuzzDecodeResponse feeds arbitrary bodies to the decoder of chat
// completion answers: it never panics, and either answers with a valid
// JSON output or tool calls with valid JSON arguments, or fails with a
// ProviderError of class server.
func FuzzDecodeResponse(f *testing.F) {
	f.Add([]byte(`{"choices":[{"message":{"role":"assistant","content":"hi"}}],"usage":{"prompt_tokens":1,"completion_tokens":2}}`), false, false)
	f.Add([]byte(`{"choices":[{"message":{"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]}}]}`), false, false)
	f.Add([]byte("{\"choices\":[{\"message\":{\"content\":\"```json\\n{\\\"value\\\":3}\\n```\"}}]}"), true, true)
	f.Add([]byte(`{"choices":[]}`), false, false)
	f.Add([]byte(`null`), true, false)
	f.Fuzz(func(t *testing.T, body []byte, structured, wrapped bool) {
		resp, err := decodeResponse("m", 200, body, outputMode{structured: structured, wrapped: wrapped})
		if err != nil {
			var pe *model.ProviderError
			if !errors.As(err, &pe) || pe.Class != model.ClassServer {
				t.Fatalf("error %v (%T), want a ProviderError of class server", err, err)
			}
			return
		}
		if len(resp.ToolCalls) == 0 && !json.Valid(resp.Output) {
			t.Fatalf("output %q is not JSON", resp.Output)
		}
		for _, c := range resp.ToolCalls {
			if !json.Valid(c.Arguments) {
				t.Fatalf("tool call arguments %q are not JSON", c.Arguments)
			}
		}
	})
}
