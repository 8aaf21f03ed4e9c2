package llmsim_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	aoption "github.com/anthropics/anthropic-sdk-go/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"go.uber.org/goleak"

	"github.com/svc-dev/svc/llmsim"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func start(t *testing.T, cfg llmsim.Config) *llmsim.Server {
	t.Helper()
	s := llmsim.New(cfg)
	if err := s.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func oai(s *llmsim.Server, key string) *openai.Client {
	c := openai.NewClient(option.WithBaseURL(s.URL()+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0))
	return &c
}

func ant(s *llmsim.Server, key string) *anthropic.Client {
	c := anthropic.NewClient(aoption.WithBaseURL(s.URL()), aoption.WithAPIKey(key), aoption.WithMaxRetries(0))
	return &c
}

func oaiParams(text string) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{Model: "gpt-sim", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(text)}}
}

func antParams(text string) anthropic.MessageNewParams {
	return anthropic.MessageNewParams{Model: "claude-sim", MaxTokens: 100,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(text))}}
}

var weather = &llmsim.Scenario{Rules: []llmsim.Rule{{
	Match: llmsim.Match{Contains: "weather"},
	Reply: llmsim.Reply{Text: "Let me look.", ToolCalls: []llmsim.ToolCall{{Name: "get_weather", Arguments: `{"city":"Paris","unit":"celsius"}`}}},
}}}

func TestOpenAIPlainEchoAndUsage(t *testing.T) {
	s := start(t, llmsim.Config{})
	c := oai(s, "k1")
	got, err := c.Chat.Completions.New(context.Background(), oaiParams("hello there"))
	if err != nil {
		t.Fatal(err)
	}
	if got.Choices[0].Message.Content != "hello there" {
		t.Fatalf("content %q, want the echo", got.Choices[0].Message.Content)
	}
	if got.Usage.CompletionTokens != int64(llmsim.Tokens("hello there")) || got.Usage.PromptTokens == 0 {
		t.Fatalf("usage %+v", got.Usage)
	}
	if s.Stats()["k1/gpt-sim"] != 1 {
		t.Fatalf("stats %v", s.Stats())
	}
}

func TestOpenAIStreamToolCallsAndIncludeUsage(t *testing.T) {
	s := start(t, llmsim.Config{Scenario: weather})
	c := oai(s, "k")
	p := oaiParams("what is the weather in Paris?")
	p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	stream := c.Chat.Completions.NewStreaming(context.Background(), p)
	acc := openai.ChatCompletionAccumulator{}
	chunks := 0
	for stream.Next() {
		acc.AddChunk(stream.Current())
		chunks++
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	msg := acc.Choices[0].Message
	if msg.Content != "Let me look." || len(msg.ToolCalls) != 1 {
		t.Fatalf("message %+v", msg)
	}
	if tc := msg.ToolCalls[0]; tc.Function.Name != "get_weather" || tc.Function.Arguments != `{"city":"Paris","unit":"celsius"}` {
		t.Fatalf("tool call %+v", tc)
	}
	if chunks < 8 {
		t.Fatalf("%d chunks: the arguments should arrive in fragments", chunks)
	}
	if acc.Choices[0].FinishReason != "tool_calls" || acc.Usage.TotalTokens == 0 {
		t.Fatalf("finish %q usage %+v", acc.Choices[0].FinishReason, acc.Usage)
	}
}

func TestAnthropicPlainAndStreamedToolUse(t *testing.T) {
	s := start(t, llmsim.Config{Scenario: weather})
	c := ant(s, "ka")
	plain, err := c.Messages.New(context.Background(), antParams("hi"))
	if err != nil {
		t.Fatal(err)
	}
	if plain.Content[0].Text != "hi" || plain.StopReason != "end_turn" || plain.Usage.OutputTokens != 1 {
		t.Fatalf("plain %+v", plain)
	}
	stream := c.Messages.NewStreaming(context.Background(), antParams("weather in Paris?"))
	msg := anthropic.Message{}
	for stream.Next() {
		if err := msg.Accumulate(stream.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if len(msg.Content) != 2 || msg.Content[0].Text != "Let me look." || msg.Content[1].Name != "get_weather" {
		t.Fatalf("streamed %+v", msg.Content)
	}
	var args map[string]string
	if err := json.Unmarshal(msg.Content[1].Input, &args); err != nil || args["city"] != "Paris" {
		t.Fatalf("input %s: %v", msg.Content[1].Input, err)
	}
	if msg.StopReason != "tool_use" || msg.Usage.OutputTokens == 0 || msg.Usage.InputTokens == 0 {
		t.Fatalf("stop %q usage %+v", msg.StopReason, msg.Usage)
	}
	if got := s.Stats()["ka/claude-sim"]; got != 2 {
		t.Fatalf("stats %v", s.Stats())
	}
}

func TestRateLimitHeaders429AndRefill(t *testing.T) {
	now := time.Unix(1000, 0)
	clock := func() time.Time { return now }
	s := start(t, llmsim.Config{RPM: 2, Now: clock})
	c := oai(s, "k")
	var resp *http.Response
	for i := 0; i < 2; i++ {
		if _, err := c.Chat.Completions.New(context.Background(), oaiParams("x"), option.WithResponseInto(&resp)); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if resp.Header.Get("x-ratelimit-limit-requests") != "2" || resp.Header.Get("x-ratelimit-remaining-requests") != "0" {
		t.Fatalf("headers %v", resp.Header)
	}
	_, err := c.Chat.Completions.New(context.Background(), oaiParams("x"))
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 429 || apiErr.Code != "rate_limit_exceeded" {
		t.Fatalf("third call: %v", err)
	}
	if apiErr.Response.Header.Get("Retry-After") != "30" {
		t.Fatalf("Retry-After %q, want 30 (half a minute refills one of two per minute)", apiErr.Response.Header.Get("Retry-After"))
	}
	if got := s.Throttled(); got["k/gpt-sim"] != 1 || len(got) != 1 {
		t.Fatalf("throttled %v, want the one 429 of k/gpt-sim", got)
	}
	if r, err := http.Get(s.URL() + "/stats/throttled"); err != nil {
		t.Fatal(err)
	} else {
		var over map[string]int
		err := json.NewDecoder(r.Body).Decode(&over)
		r.Body.Close()
		if err != nil || over["k/gpt-sim"] != 1 {
			t.Fatalf("GET /stats/throttled: %v %v", over, err)
		}
	}
	// Another key has its own bucket.
	if _, err := oai(s, "other").Chat.Completions.New(context.Background(), oaiParams("x")); err != nil {
		t.Fatal(err)
	}
	now = now.Add(30 * time.Second)
	if _, err := c.Chat.Completions.New(context.Background(), oaiParams("x")); err != nil {
		t.Fatalf("after refill: %v", err)
	}
}

func TestAnthropicTokenLimitHeaders(t *testing.T) {
	now := time.Unix(1000, 0)
	s := start(t, llmsim.Config{TPM: 20, RPM: 100, Now: func() time.Time { return now }})
	c := ant(s, "k")
	big := strings.Repeat("abcd", 15) // 15 tokens + role prefix
	var resp *http.Response
	if _, err := c.Messages.New(context.Background(), antParams(big), aoption.WithResponseInto(&resp)); err != nil {
		t.Fatal(err)
	}
	if resp.Header.Get("anthropic-ratelimit-tokens-limit") != "20" || resp.Header.Get("anthropic-ratelimit-requests-remaining") != "99" ||
		resp.Header.Get("anthropic-ratelimit-input-tokens-limit") != "20" ||
		resp.Header.Get("anthropic-ratelimit-input-tokens-remaining") != resp.Header.Get("anthropic-ratelimit-tokens-remaining") ||
		resp.Header.Get("anthropic-ratelimit-input-tokens-reset") == "" {
		t.Fatalf("headers %v", resp.Header)
	}
	_, err := c.Messages.New(context.Background(), antParams(big))
	var apiErr *anthropic.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 429 || !strings.Contains(apiErr.RawJSON(), "rate_limit_error") {
		t.Fatalf("second call: %v", err)
	}
}

func TestFaults(t *testing.T) {
	sc := &llmsim.Scenario{Rules: []llmsim.Rule{
		{Match: llmsim.Match{Contains: "f500"}, Fault: "500"},
		{Match: llmsim.Match{Contains: "f529"}, Fault: "529"},
		{Match: llmsim.Match{Contains: "reset"}, Fault: "reset"},
		{Match: llmsim.Match{Contains: "bad"}, Fault: "malformed"},
		{Match: llmsim.Match{Contains: "stall"}, Reply: llmsim.Reply{Text: strings.Repeat("word ", 40)}, StallAfterTokens: 5},
	}}
	s := start(t, llmsim.Config{Scenario: sc})
	a := ant(s, "k")
	o := oai(s, "k")
	ctx := context.Background()

	_, err := a.Messages.New(ctx, antParams("f529"))
	var ae *anthropic.Error
	if !errors.As(err, &ae) || ae.StatusCode != 529 || !strings.Contains(ae.RawJSON(), `"overloaded_error"`) {
		t.Fatalf("529: %v", err)
	}
	_, err = o.Chat.Completions.New(ctx, oaiParams("f500"))
	var oe *openai.Error
	if !errors.As(err, &oe) || oe.StatusCode != 500 {
		t.Fatalf("500: %v", err)
	}
	if _, err = o.Chat.Completions.New(ctx, oaiParams("reset")); err == nil || errors.As(err, &oe) {
		t.Fatalf("reset: %v, want a transport error", err)
	}
	if _, err = o.Chat.Completions.New(ctx, oaiParams("bad")); err == nil {
		t.Fatal("malformed body decoded without error")
	}
	stream := o.Chat.Completions.NewStreaming(ctx, oaiParams("bad"))
	for stream.Next() {
	}
	if stream.Err() == nil {
		t.Fatal("malformed chunk streamed without error")
	}

	sctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	st := o.Chat.Completions.NewStreaming(sctx, oaiParams("stall"))
	acc := openai.ChatCompletionAccumulator{}
	for st.Next() {
		acc.AddChunk(st.Current())
	}
	if st.Err() == nil || acc.Choices[0].Message.Content != "word word word word " {
		t.Fatalf("stall: err %v, content %q (want the 5 tokens before the stall)", st.Err(), acc.Choices[0].Message.Content)
	}
}

func TestContextWindowErrors(t *testing.T) {
	s := start(t, llmsim.Config{ContextWindow: 10})
	long := strings.Repeat("abcd", 20)
	_, err := oai(s, "k").Chat.Completions.New(context.Background(), oaiParams(long))
	var oe *openai.Error
	if !errors.As(err, &oe) || oe.StatusCode != 400 || oe.Code != "context_length_exceeded" || oe.Type != "invalid_request_error" {
		t.Fatalf("openai: %v", err)
	}
	_, err = ant(s, "k").Messages.New(context.Background(), antParams(long))
	var ae *anthropic.Error
	if !errors.As(err, &ae) || ae.StatusCode != 400 || !strings.Contains(ae.RawJSON(), "prompt is too long: 22 tokens > 10 maximum") {
		t.Fatalf("anthropic: %v", err)
	}
}

func TestAuthFailure(t *testing.T) {
	s := start(t, llmsim.Config{Keys: []string{"good"}})
	_, err := oai(s, "bad").Chat.Completions.New(context.Background(), oaiParams("x"))
	var oe *openai.Error
	if !errors.As(err, &oe) || oe.StatusCode != 401 {
		t.Fatalf("openai: %v", err)
	}
	_, err = ant(s, "bad").Messages.New(context.Background(), antParams("x"))
	var ae *anthropic.Error
	if !errors.As(err, &ae) || ae.StatusCode != 401 || !strings.Contains(ae.RawJSON(), "authentication_error") {
		t.Fatalf("anthropic: %v", err)
	}
	if _, err := ant(s, "good").Messages.New(context.Background(), antParams("x")); err != nil {
		t.Fatal(err)
	}
}

func TestPromptCaching(t *testing.T) {
	s := start(t, llmsim.Config{})
	c := ant(s, "k")
	p := antParams("q")
	p.System = []anthropic.TextBlockParam{{Text: strings.Repeat("sys ", 100), CacheControl: anthropic.NewCacheControlEphemeralParam()}}
	first, err := c.Messages.New(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	second, err := c.Messages.New(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if first.Usage.CacheCreationInputTokens != 100 || first.Usage.CacheReadInputTokens != 0 ||
		second.Usage.CacheReadInputTokens != 100 || second.Usage.CacheCreationInputTokens != 0 {
		t.Fatalf("first %+v second %+v", first.Usage, second.Usage)
	}

	o := oai(s, "k")
	sys := strings.Repeat("abcd", 1100)
	op := func(last string) openai.ChatCompletionNewParams {
		return openai.ChatCompletionNewParams{Model: "gpt-sim", Messages: []openai.ChatCompletionMessageParamUnion{
			openai.SystemMessage(sys), openai.UserMessage(last)}}
	}
	r1, err := o.Chat.Completions.New(context.Background(), op("a"))
	if err != nil {
		t.Fatal(err)
	}
	r2, err := o.Chat.Completions.New(context.Background(), op("b"))
	if err != nil {
		t.Fatal(err)
	}
	if r1.Usage.PromptTokensDetails.CachedTokens != 0 || r2.Usage.PromptTokensDetails.CachedTokens != 1024 {
		t.Fatalf("cached %d then %d, want 0 then 1024", r1.Usage.PromptTokensDetails.CachedTokens, r2.Usage.PromptTokensDetails.CachedTokens)
	}
}

func TestScenarioErrorsNameLineAndField(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "s.yaml")
	if err := os.WriteFile(p, []byte("rules:\n  - match: {contains: x}\n    replly: {text: y}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := llmsim.LoadScenario(p)
	if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "line 3") || !strings.Contains(err.Error(), "replly") {
		t.Fatalf("err %v", err)
	}
	if err := os.WriteFile(p, []byte("rules:\n  - match: {contains: x}\n    reply: {text: ok}\n    fault: 418\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := llmsim.LoadScenario(p); err == nil || !strings.Contains(err.Error(), "rules[0].fault") {
		t.Fatalf("err %v", err)
	}
	if err := os.WriteFile(p, []byte("rules:\n  - match: {contains: x}\n    reply: {text: ok}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sc, err := llmsim.LoadScenario(p)
	if err != nil || sc.Rules[0].Reply.Text != "ok" {
		t.Fatalf("%v %+v", err, sc)
	}
}

func TestStatsEndpoint(t *testing.T) {
	s := start(t, llmsim.Config{})
	if _, err := oai(s, "k9").Chat.Completions.New(context.Background(), oaiParams("x")); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(s.URL() + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got map[string]int
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || got["k9/gpt-sim"] != 1 {
		t.Fatalf("%v %v", got, err)
	}
}

func TestLatencyDistributionShapes(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, l := range []llmsim.Latency{
		{Dist: "fixed", Mean: 100 * time.Millisecond},
		{Dist: "normal", Mean: 100 * time.Millisecond, StdDev: 20 * time.Millisecond},
		{Dist: "lognormal", Mean: 100 * time.Millisecond, StdDev: 50 * time.Millisecond},
	} {
		const n = 20000
		var sum, sq float64
		for i := 0; i < n; i++ {
			d := float64(llmsim.Draw(l, rng))
			sum += d
			sq += d * d
		}
		mean := sum / n
		sd := math.Sqrt(sq/n - mean*mean)
		if math.Abs(mean-float64(l.Mean)) > 0.05*float64(l.Mean) || math.Abs(sd-float64(l.StdDev)) > 0.1*float64(l.Mean) {
			t.Errorf("%s: mean %v sd %v", l.Dist, time.Duration(mean), time.Duration(sd))
		}
	}
}

// Status faults in each API's words, with the rule's message and
// retry-after-ms; a hanging rule sends nothing until the client gives up;
// a scenario file may ask for all of them.
func TestStatusFaultsMessageRetryAfterAndHang(t *testing.T) {
	sc := &llmsim.Scenario{Rules: []llmsim.Rule{
		{Match: llmsim.Match{Contains: "hang"}, Hang: true},
		{Match: llmsim.Match{Contains: "f503"}, Fault: "503", Message: "busy, try later", RetryAfterMs: 7},
		{Match: llmsim.Match{Contains: "f429"}, Fault: "429"},
		{Match: llmsim.Match{Contains: "f401"}, Fault: "401"},
		{Match: llmsim.Match{Contains: "f400"}, Fault: "400", Message: "bad thing"},
	}}
	s := start(t, llmsim.Config{Scenario: sc})
	o, a := oai(s, "k"), ant(s, "k")
	ctx := context.Background()

	_, err := o.Chat.Completions.New(ctx, oaiParams("f503"))
	var oe *openai.Error
	if !errors.As(err, &oe) || oe.StatusCode != 503 || oe.Message != "busy, try later" || oe.Response.Header.Get("retry-after-ms") != "7" {
		t.Fatalf("503: %v", err)
	}
	for _, c := range []struct {
		text, typ string
		status    int
	}{{"f429", "rate_limit_error", 429}, {"f401", "authentication_error", 401}, {"f400", "invalid_request_error", 400}} {
		_, err := a.Messages.New(ctx, antParams(c.text))
		var ae *anthropic.Error
		if !errors.As(err, &ae) || ae.StatusCode != c.status || !strings.Contains(ae.RawJSON(), `"`+c.typ+`"`) {
			t.Errorf("%s: %v", c.text, err)
		}
		if ae != nil && ae.Response.Header.Get("retry-after-ms") != "" {
			t.Errorf("%s: retry-after-ms without retry_after_ms", c.text)
		}
	}
	_, err = o.Chat.Completions.New(ctx, oaiParams("f400"))
	if !errors.As(err, &oe) || oe.StatusCode != 400 || oe.Message != "bad thing" {
		t.Errorf("400: %v", err)
	}
	if got := s.Throttled(); len(got) != 0 {
		t.Errorf("throttled %v after an injected 429: only the rate limit's refusals count", got)
	}

	hctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := o.Chat.Completions.New(hctx, oaiParams("hang")); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("hang: %v, want the client's deadline", err)
	}
	if time.Since(start) < 300*time.Millisecond {
		t.Error("a hanging rule answered before the client gave up")
	}

	dir := t.TempDir()
	p := filepath.Join(dir, "s.yaml")
	if err := os.WriteFile(p, []byte("rules:\n  - fault: \"503\"\n    message: m\n    retry_after_ms: 5\n  - hang: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	loaded, err := llmsim.LoadScenario(p)
	if err != nil || loaded.Rules[0].RetryAfterMs != 5 || loaded.Rules[0].Message != "m" || !loaded.Rules[1].Hang {
		t.Fatalf("%v %+v", err, loaded)
	}
}

// post sends a raw request body to path and returns the answer's body;
// the context ends the request early.
func post(ctx context.Context, s *llmsim.Server, path, body string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL()+path, strings.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return string(b), fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	return string(b), err
}

// A rule's delay_ms holds that rule's answers (one slow model among fast
// ones) until the delay has passed or the client gives up, whatever
// --latency says.
func TestRuleDelay(t *testing.T) {
	sc := &llmsim.Scenario{Rules: []llmsim.Rule{
		{Match: llmsim.Match{Model: "slow"}, DelayMs: 60_000},
		{Match: llmsim.Match{Model: "mid"}, DelayMs: 200},
	}}
	s := start(t, llmsim.Config{Scenario: sc})
	ctx, cancel := context.WithCancel(context.Background())
	slow := make(chan error, 1)
	go func() {
		_, err := post(ctx, s, "/v1/chat/completions", `{"model":"slow","messages":[{"role":"user","content":"x"}]}`)
		slow <- err
	}()
	for s.Stats()["-/slow"] == 0 { // the slow call has arrived
		time.Sleep(5 * time.Millisecond)
	}
	begin := time.Now()
	if out, err := post(context.Background(), s, "/v1/chat/completions", `{"model":"mid","messages":[{"role":"user","content":"y"}]}`); err != nil || !strings.Contains(out, `"content":"y"`) {
		t.Fatalf("mid: %v %s", err, out)
	}
	if d := time.Since(begin); d < 200*time.Millisecond {
		t.Errorf("a rule of delay_ms 200 answered after %v", d)
	}
	if _, err := oai(s, "").Chat.Completions.New(context.Background(), oaiParams("z")); err != nil {
		t.Fatalf("a model without a delay: %v", err)
	}
	select {
	case err := <-slow:
		t.Fatalf("the model of delay_ms 60000 answered (%v) before the others", err)
	default:
	}
	cancel()
	if err := <-slow; !errors.Is(err, context.Canceled) {
		t.Errorf("slow: %v, want the client's cancellation", err)
	}
}

// A rule's match.prompt finds text anywhere in the conversation, tool
// results included, so a scenario answers the turn after a tool call
// differently from the turn that asked for it, in both wire formats.
func TestRuleMatchesPrompt(t *testing.T) {
	sc := &llmsim.Scenario{Rules: []llmsim.Rule{
		{Match: llmsim.Match{Prompt: "RESULT-7"}, Reply: llmsim.Reply{Text: "after the tool"}},
		{Match: llmsim.Match{Prompt: "be brief"}, Reply: llmsim.Reply{Text: "brief"}},
	}}
	s := start(t, llmsim.Config{Scenario: sc})
	ctx := context.Background()
	for _, c := range []struct{ name, path, body, want string }{
		{"openai tool result", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"time?"},` +
			`{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"now","arguments":"{}"}}]},` +
			`{"role":"tool","tool_call_id":"c1","content":"RESULT-7"}]}`, `"content":"after the tool"`},
		{"anthropic tool result", "/v1/messages", `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"time?"},` +
			`{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"now","input":{}}]},` +
			`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"RESULT-7"}]}]}]}`, `"text":"after the tool"`},
		{"openai system prompt", "/v1/chat/completions", `{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}]}`, `"content":"brief"`},
		{"anthropic system prompt", "/v1/messages", `{"model":"m","max_tokens":10,"system":"be brief","messages":[{"role":"user","content":"hi"}]}`, `"text":"brief"`},
		{"no match echoes", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"RESULT-8"}]}`, `"content":"RESULT-8"`},
	} {
		out, err := post(ctx, s, c.path, c.body)
		if err != nil || !strings.Contains(out, c.want) {
			t.Errorf("%s: %v %s, want %s", c.name, err, out, c.want)
		}
	}
}

// delay_ms and match.prompt load from a scenario file; a negative delay
// is refused naming the rule.
func TestScenarioDelayAndPrompt(t *testing.T) {
	p := filepath.Join(t.TempDir(), "s.yaml")
	if err := os.WriteFile(p, []byte("rules:\n  - match: {model: m1, prompt: done}\n    delay_ms: 2000\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sc, err := llmsim.LoadScenario(p)
	if err != nil || sc.Rules[0].DelayMs != 2000 || sc.Rules[0].Match.Prompt != "done" || sc.Rules[0].Match.Model != "m1" {
		t.Fatalf("%v %+v", err, sc)
	}
	if err := os.WriteFile(p, []byte("rules:\n  - match: {model: m1}\n  - delay_ms: -5\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := llmsim.LoadScenario(p); err == nil || !strings.Contains(err.Error(), "rules[1].delay_ms") {
		t.Fatalf("a negative delay: %v", err)
	}
}
