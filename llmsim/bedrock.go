package llmsim

// Amazon Bedrock's Converse and ConverseStream APIs
// (POST /model/{modelId}/converse, /converse-stream): the request and
// answer shapes, its errors (the type in X-Amzn-ErrorType, the body
// {"message"}), the stream in AWS's binary event-stream framing, and the
// key as the access key id of the SigV4 Authorization header (the
// signature is not checked).

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
)

// bedrockPath is "modelId\x00converse" or "modelId\x00converse-stream" of
// a Converse path, or "". The model id is escaped in the path (it may
// hold ':' and, for an ARN, '/').
func bedrockPath(u *url.URL) string {
	rest, ok := strings.CutPrefix(u.EscapedPath(), "/model/")
	if !ok {
		return ""
	}
	id, op, ok := strings.Cut(rest, "/")
	if !ok || (op != "converse" && op != "converse-stream") {
		return ""
	}
	model, err := url.PathUnescape(id)
	if err != nil || model == "" {
		return ""
	}
	return model + "\x00" + op
}

// sigV4AccessKey is the access key id of an AWS SigV4 Authorization
// header ("AWS4-HMAC-SHA256 Credential=AKID/date/region/service/...").
func sigV4AccessKey(h string) string {
	_, cred, ok := strings.Cut(h, "Credential=")
	if !ok {
		return ""
	}
	id, _, _ := strings.Cut(cred, "/")
	return id
}

// bedrockErrorType is the exception Bedrock names for an HTTP status.
func bedrockErrorType(status int) string {
	switch status {
	case 400:
		return "ValidationException"
	case 401, 403:
		return "AccessDeniedException"
	case 404:
		return "ResourceNotFoundException"
	case 408:
		return "ModelTimeoutException"
	case 429:
		return "ThrottlingException"
	case 503, 529:
		return "ServiceUnavailableException"
	}
	return "InternalServerException"
}

func parseBedrock(body []byte) (*request, error) {
	var in struct {
		Messages []struct {
			Role    string            `json:"role"`
			Content []json.RawMessage `json:"content"`
		} `json:"messages"`
		System     []json.RawMessage `json:"system"`
		ToolConfig *struct {
			Tools []json.RawMessage `json:"tools"`
		} `json:"toolConfig"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, fmt.Errorf("body is not valid JSON: %v", err)
	}
	if len(in.Messages) == 0 {
		return nil, errors.New("messages: a conversation must start with a user message")
	}
	q := &request{}
	if in.ToolConfig != nil {
		for _, t := range in.ToolConfig.Tools {
			q.Prompt = append(q.Prompt, string(t))
		}
	}
	text := func(blocks []json.RawMessage) (string, string) {
		var b, raw strings.Builder
		for _, bl := range blocks {
			var t struct {
				Text string `json:"text"`
			}
			_ = json.Unmarshal(bl, &t)
			b.WriteString(t.Text)
			raw.Write(bl)
		}
		return b.String(), raw.String()
	}
	if len(in.System) > 0 {
		t, _ := text(in.System)
		q.Prompt = append(q.Prompt, t)
		q.Messages = append(q.Messages, t)
	}
	for _, m := range in.Messages {
		t, raw := text(m.Content)
		q.Prompt = append(q.Prompt, m.Role+":"+t+raw)
		q.Messages = append(q.Messages, t, raw)
		if m.Role == "user" && t != "" {
			q.Last = t
		}
	}
	return q, nil
}

func (s *Server) writeBedrock(w http.ResponseWriter, r *http.Request, q *request, a answer) {
	stop := "end_turn"
	if len(a.reply.ToolCalls) > 0 {
		stop = "tool_use"
	}
	usage := map[string]any{"inputTokens": a.in, "outputTokens": a.out, "totalTokens": a.in + a.out}
	input := func(tc ToolCall) json.RawMessage {
		if tc.Arguments == "" {
			return json.RawMessage("{}")
		}
		return json.RawMessage(tc.Arguments)
	}
	if !q.Stream {
		if a.malformed {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"output": {"message": [`)
			return
		}
		var content []any
		if a.reply.Text != "" {
			content = append(content, map[string]any{"text": a.reply.Text})
		}
		for i, tc := range a.reply.ToolCalls {
			content = append(content, map[string]any{"toolUse": map[string]any{
				"toolUseId": fmt.Sprintf("tooluse_%d", i+1), "name": tc.Name, "input": input(tc)}})
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"output":     map[string]any{"message": map[string]any{"role": "assistant", "content": content}},
			"stopReason": stop, "usage": usage, "metrics": map[string]any{"latencyMs": 1},
		})
		return
	}
	w.Header().Set("Content-Type", "application/vnd.amazon.eventstream")
	w.WriteHeader(http.StatusOK)
	st := &streamer{s: s, w: w, r: r, a: a}
	enc := eventstream.NewEncoder()
	event := func(typ string, v any) bool {
		payload, _ := json.Marshal(v)
		msg := eventstream.Message{Payload: payload}
		msg.Headers.Set(":message-type", eventstream.StringValue("event"))
		msg.Headers.Set(":event-type", eventstream.StringValue(typ))
		msg.Headers.Set(":content-type", eventstream.StringValue("application/json"))
		if enc.Encode(w, msg) != nil {
			return false
		}
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		return r.Context().Err() == nil
	}
	if !event("messageStart", map[string]any{"role": "assistant"}) {
		return
	}
	idx := 0
	if a.reply.Text != "" {
		for _, p := range pieces(a.reply.Text) {
			if !st.token() || !event("contentBlockDelta", map[string]any{"contentBlockIndex": idx, "delta": map[string]any{"text": p}}) {
				return
			}
		}
		if !event("contentBlockStop", map[string]any{"contentBlockIndex": idx}) {
			return
		}
		idx++
	}
	for i, tc := range a.reply.ToolCalls {
		if !st.token() || !event("contentBlockStart", map[string]any{"contentBlockIndex": idx,
			"start": map[string]any{"toolUse": map[string]any{"toolUseId": fmt.Sprintf("tooluse_%d", i+1), "name": tc.Name}}}) {
			return
		}
		for _, p := range pieces(string(input(tc))) {
			if !st.token() || !event("contentBlockDelta", map[string]any{"contentBlockIndex": idx,
				"delta": map[string]any{"toolUse": map[string]any{"input": p}}}) {
				return
			}
		}
		if !event("contentBlockStop", map[string]any{"contentBlockIndex": idx}) {
			return
		}
		idx++
	}
	if !event("messageStop", map[string]any{"stopReason": stop}) {
		return
	}
	event("metadata", map[string]any{"usage": usage, "metrics": map[string]any{"latencyMs": 1}})
}
