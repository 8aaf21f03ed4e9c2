package llmsim

// Google's Gemini API, generateContent and streamGenerateContent
// (https://ai.google.dev/api/generate-content): the request and answer
// shapes, its errors ({"error": {code, message, status, details}}), and
// the API key in x-goog-api-key or ?key=.

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// geminiPath is "model:method" of a generateContent path
// (/v1beta/models/{model}:generateContent, :streamGenerateContent), or "".
func geminiPath(path string) string {
	for _, v := range []string{"/v1beta/models/", "/v1/models/", "/v1alpha/models/"} {
		rest, ok := strings.CutPrefix(path, v)
		if !ok {
			continue
		}
		model, method, ok := strings.Cut(rest, ":")
		if ok && model != "" && (method == "generateContent" || method == "streamGenerateContent") {
			return rest
		}
	}
	return ""
}

// geminiPart is the part of a content the simulator reads.
type geminiPart struct {
	Text string `json:"text"`
}

func parseGemini(body []byte) (*request, error) {
	var in struct {
		Contents []struct {
			Role  string            `json:"role"`
			Parts []json.RawMessage `json:"parts"`
		} `json:"contents"`
		SystemInstruction *struct {
			Parts []json.RawMessage `json:"parts"`
		} `json:"systemInstruction"`
		Tools []json.RawMessage `json:"tools"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, fmt.Errorf("body is not valid JSON: %v", err)
	}
	if len(in.Contents) == 0 {
		return nil, errors.New("* GenerateContentRequest.contents: contents is not specified")
	}
	q := &request{}
	for _, t := range in.Tools {
		q.Prompt = append(q.Prompt, string(t))
	}
	text := func(parts []json.RawMessage) (string, string) {
		var b, raw strings.Builder
		for _, p := range parts {
			var gp geminiPart
			_ = json.Unmarshal(p, &gp)
			b.WriteString(gp.Text)
			raw.Write(p)
		}
		return b.String(), raw.String()
	}
	if in.SystemInstruction != nil {
		t, _ := text(in.SystemInstruction.Parts)
		q.Prompt = append(q.Prompt, t)
		q.Messages = append(q.Messages, t)
	}
	for _, c := range in.Contents {
		t, raw := text(c.Parts)
		q.Prompt = append(q.Prompt, c.Role+":"+t+raw)
		q.Messages = append(q.Messages, t, raw)
		// A function response comes in a user turn without text; the
		// last user message is the last one that says something.
		if c.Role == "user" && t != "" {
			q.Last = t
		}
	}
	return q, nil
}

// grpcStatus is the status name Google APIs give an HTTP status.
func grpcStatus(status int) string {
	switch status {
	case 400:
		return "INVALID_ARGUMENT"
	case 401:
		return "UNAUTHENTICATED"
	case 403:
		return "PERMISSION_DENIED"
	case 404:
		return "NOT_FOUND"
	case 429:
		return "RESOURCE_EXHAUSTED"
	case 500:
		return "INTERNAL"
	case 503:
		return "UNAVAILABLE"
	case 504:
		return "DEADLINE_EXCEEDED"
	}
	return "UNKNOWN"
}

// failGemini writes a Google API error.
func failGemini(w http.ResponseWriter, status int, msg string, details ...map[string]any) {
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.WriteHeader(status)
	e := map[string]any{"code": status, "message": msg, "status": grpcStatus(status)}
	if len(details) > 0 {
		e["details"] = details
	}
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(map[string]any{"error": e})
}

// retryInfo is the error detail in which Gemini says how long to wait.
func retryInfo(d time.Duration) map[string]any {
	return map[string]any{"@type": "type.googleapis.com/google.rpc.RetryInfo",
		"retryDelay": fmt.Sprintf("%gs", max(d, time.Millisecond).Seconds())}
}

func (s *Server) writeGemini(w http.ResponseWriter, r *http.Request, q *request, a answer) {
	finish := "STOP"
	usage := map[string]any{"promptTokenCount": a.in, "candidatesTokenCount": a.out, "totalTokenCount": a.in + a.out}
	calls := make([]any, 0, len(a.reply.ToolCalls))
	for _, tc := range a.reply.ToolCalls {
		args := json.RawMessage(tc.Arguments)
		if tc.Arguments == "" {
			args = json.RawMessage("{}")
		}
		// The Gemini API sends no call ids; the provider makes them up.
		calls = append(calls, map[string]any{"functionCall": map[string]any{"name": tc.Name, "args": args}})
	}
	response := func(parts []any, fin string, u map[string]any) map[string]any {
		c := map[string]any{"content": map[string]any{"role": "model", "parts": parts}, "index": 0}
		if fin != "" {
			c["finishReason"] = fin
		}
		return map[string]any{"candidates": []any{c}, "usageMetadata": u, "modelVersion": q.Model, "responseId": "llmsim"}
	}
	if !q.Stream {
		if a.malformed {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"candidates": [`)
			return
		}
		var parts []any
		if a.reply.Text != "" {
			parts = append(parts, map[string]any{"text": a.reply.Text})
		}
		parts = append(parts, calls...)
		w.Header().Set("Content-Type", "application/json; charset=UTF-8")
		_ = json.NewEncoder(w).Encode(response(parts, finish, usage))
		return
	}
	sseHeaders(w)
	st := &streamer{s: s, w: w, r: r, a: a}
	partial := map[string]any{"promptTokenCount": a.in, "totalTokenCount": a.in}
	for _, p := range pieces(a.reply.Text) {
		if !st.token() || !st.event("", response([]any{map[string]any{"text": p}}, "", partial)) {
			return
		}
	}
	// Function calls come whole, each in a chunk of its own.
	for _, c := range calls {
		if !st.token() || !st.event("", response([]any{c}, "", partial)) {
			return
		}
	}
	st.event("", response([]any{map[string]any{"text": ""}}, finish, usage))
}
