package google

import (
	"encoding/json"
	"testing"

	"google.golang.org/genai"
)

// FuzzAssemble feeds arbitrary answers, decoded as the SDK decodes them,
// to the reading of a Gemini answer: it never panics, and gives valid
// JSON output, tool calls with JSON-object arguments and ids that carry
// their thought signature back intact, or an error.
func FuzzAssemble(f *testing.F) {
	f.Add([]byte(`{"candidates":[{"content":{"parts":[{"text":"hi"}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":1}}`), false)
	f.Add([]byte(`{"candidates":[{"content":{"parts":[{"functionCall":{"name":"f","args":{"a":1}},"thoughtSignature":"c2ln"}]}}]}`), false)
	f.Add([]byte(`{"candidates":[{"content":{"parts":[{"functionCall":{"id":"x~y","name":"f"}}]}}]}`), false)
	f.Add([]byte(`{"candidates":[{"content":{"parts":[{"text":"{\"a\": [1, 2]}"}]}}]}`), true)
	f.Add([]byte(`{"promptFeedback":{"blockReason":"SAFETY"}}`), false)
	f.Fuzz(func(t *testing.T, body []byte, structured bool) {
		var r genai.GenerateContentResponse
		if json.Unmarshal(body, &r) != nil {
			return
		}
		var a assembled
		if a.add(&r) != nil {
			return
		}
		resp, err := a.response(structured)
		if err != nil {
			return
		}
		if len(resp.ToolCalls) == 0 && !json.Valid(resp.Output) {
			t.Fatalf("output %q is not JSON", resp.Output)
		}
		for i, c := range resp.ToolCalls {
			var obj map[string]any
			if json.Unmarshal(c.Arguments, &obj) != nil {
				t.Fatalf("tool call arguments %q are not a JSON object", c.Arguments)
			}
			_, sig := splitID(c.ID)
			var want []byte
			for _, p := range r.Candidates[0].Content.Parts {
				if p != nil && p.FunctionCall != nil {
					if i == 0 {
						want = p.ThoughtSignature
						break
					}
					i--
				}
			}
			if string(sig) != string(want) {
				t.Fatalf("call %q carries signature %q, want %q", c.ID, sig, want)
			}
		}
	})
}
