package llmsim

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

const maxBody = 32 << 20

func readLimited(r *http.Request) ([]byte, error) {
	return io.ReadAll(http.MaxBytesReader(nil, r.Body, maxBody))
}

// streamer writes SSE events, pacing tokens and applying stall and
// malformed faults.
type streamer struct {
	s      *Server
	w      http.ResponseWriter
	r      *http.Request
	a      answer
	tokens int
}

func (st *streamer) event(name string, v any) bool {
	b, _ := json.Marshal(v)
	if name != "" {
		fmt.Fprintf(st.w, "event: %s\n", name)
	}
	fmt.Fprintf(st.w, "data: %s\n\n", b)
	if f, ok := st.w.(http.Flusher); ok {
		f.Flush()
	}
	return st.r.Context().Err() == nil
}

// token is called before each token-sized piece; false ends the stream.
func (st *streamer) token() bool {
	st.tokens++
	if st.a.stall > 0 && st.tokens > st.a.stall {
		st.s.stall(st.r.Context())
		return false
	}
	if st.a.malformed {
		fmt.Fprint(st.w, "data: {\"choices\": [{\"delta\": {\"content\": \n\n")
		if f, ok := st.w.(http.Flusher); ok {
			f.Flush()
		}
		return false
	}
	if tps := st.s.cfg.TokensPerSecond; tps > 0 && st.tokens > 1 {
		return st.s.sleep(st.r.Context(), secondsDur(1/tps))
	}
	return true
}

func secondsDur(s float64) time.Duration { return time.Duration(s * 1e9) }

func sseHeaders(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
}

func (s *Server) writeOpenAI(w http.ResponseWriter, r *http.Request, q *request, a answer) {
	finish := "stop"
	if len(a.reply.ToolCalls) > 0 {
		finish = "tool_calls"
	}
	usage := map[string]any{
		"prompt_tokens": a.in, "completion_tokens": a.out, "total_tokens": a.in + a.out,
		"prompt_tokens_details": map[string]any{"cached_tokens": a.cacheRead},
	}
	const id = "chatcmpl-llmsim"
	if !q.Stream {
		if a.malformed {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"id": "chatcmpl-llmsim", "choices": [`)
			return
		}
		msg := map[string]any{"role": "assistant", "content": a.reply.Text}
		if len(a.reply.ToolCalls) > 0 {
			var calls []any
			for i, tc := range a.reply.ToolCalls {
				calls = append(calls, map[string]any{"id": fmt.Sprintf("call_%d", i+1), "type": "function",
					"function": map[string]any{"name": tc.Name, "arguments": tc.Arguments}})
			}
			msg["tool_calls"] = calls
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"id": id, "object": "chat.completion", "created": 0, "model": q.Model,
			"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish, "logprobs": nil}},
			"usage":   usage,
		})
		return
	}
	sseHeaders(w)
	st := &streamer{s: s, w: w, r: r, a: a}
	chunk := func(delta map[string]any, fin any) bool {
		return st.event("", map[string]any{"id": id, "object": "chat.completion.chunk", "created": 0, "model": q.Model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": fin}}})
	}
	if !chunk(map[string]any{"role": "assistant", "content": ""}, nil) {
		return
	}
	for _, p := range pieces(a.reply.Text) {
		if !st.token() || !chunk(map[string]any{"content": p}, nil) {
			return
		}
	}
	for i, tc := range a.reply.ToolCalls {
		head := map[string]any{"index": i, "id": fmt.Sprintf("call_%d", i+1), "type": "function",
			"function": map[string]any{"name": tc.Name, "arguments": ""}}
		if !st.token() || !chunk(map[string]any{"tool_calls": []any{head}}, nil) {
			return
		}
		for _, p := range pieces(tc.Arguments) {
			frag := map[string]any{"index": i, "function": map[string]any{"arguments": p}}
			if !st.token() || !chunk(map[string]any{"tool_calls": []any{frag}}, nil) {
				return
			}
		}
	}
	if !chunk(map[string]any{}, finish) {
		return
	}
	if q.IncludeUsage {
		st.event("", map[string]any{"id": id, "object": "chat.completion.chunk", "created": 0, "model": q.Model,
			"choices": []any{}, "usage": usage})
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}

func (s *Server) writeAnthropic(w http.ResponseWriter, r *http.Request, q *request, a answer) {
	stop := "end_turn"
	if len(a.reply.ToolCalls) > 0 {
		stop = "tool_use"
	}
	usage := map[string]any{"input_tokens": a.in, "output_tokens": a.out,
		"cache_creation_input_tokens": a.cacheCreate, "cache_read_input_tokens": a.cacheRead}
	const id = "msg_llmsim"
	inputOf := func(tc ToolCall) json.RawMessage {
		if tc.Arguments == "" {
			return json.RawMessage("{}")
		}
		return json.RawMessage(tc.Arguments)
	}
	if !q.Stream {
		if a.malformed {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"id": "msg_llmsim", "content": [`)
			return
		}
		var content []any
		if a.reply.Text != "" {
			content = append(content, map[string]any{"type": "text", "text": a.reply.Text})
		}
		for i, tc := range a.reply.ToolCalls {
			content = append(content, map[string]any{"type": "tool_use", "id": fmt.Sprintf("toolu_%d", i+1), "name": tc.Name, "input": inputOf(tc)})
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"id": id, "type": "message", "role": "assistant", "model": q.Model, "content": content,
			"stop_reason": stop, "stop_sequence": nil, "usage": usage,
		})
		return
	}
	sseHeaders(w)
	st := &streamer{s: s, w: w, r: r, a: a}
	startUsage := map[string]any{"input_tokens": a.in, "output_tokens": 0,
		"cache_creation_input_tokens": a.cacheCreate, "cache_read_input_tokens": a.cacheRead}
	if !st.event("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": id, "type": "message", "role": "assistant", "model": q.Model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil, "usage": startUsage}}) {
		return
	}
	idx := 0
	if a.reply.Text != "" {
		if !st.event("content_block_start", map[string]any{"type": "content_block_start", "index": idx, "content_block": map[string]any{"type": "text", "text": ""}}) {
			return
		}
		for _, p := range pieces(a.reply.Text) {
			if !st.token() || !st.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": idx, "delta": map[string]any{"type": "text_delta", "text": p}}) {
				return
			}
		}
		if !st.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": idx}) {
			return
		}
		idx++
	}
	for i, tc := range a.reply.ToolCalls {
		if !st.token() || !st.event("content_block_start", map[string]any{"type": "content_block_start", "index": idx,
			"content_block": map[string]any{"type": "tool_use", "id": fmt.Sprintf("toolu_%d", i+1), "name": tc.Name, "input": map[string]any{}}}) {
			return
		}
		for _, p := range pieces(string(inputOf(tc))) {
			if !st.token() || !st.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": idx, "delta": map[string]any{"type": "input_json_delta", "partial_json": p}}) {
				return
			}
		}
		if !st.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": idx}) {
			return
		}
		idx++
	}
	if !st.event("message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": stop, "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": a.out}}) {
		return
	}
	st.event("message_stop", map[string]any{"type": "message_stop"})
}
