// Package llmsim is a simulator of hosted model providers: an HTTP server
// speaking the OpenAI chat-completions (also on Azure OpenAI's deployment
// URLs), Anthropic Messages, Google Gemini generateContent and Amazon
// Bedrock Converse wire formats (plain and streamed), with rate limits per key and model,
// injected faults, context-window errors, prompt-cache accounting and
// scripted answers, so agents and provider tests run without an account.
//
// Tokens are counted by a deterministic rule: one token per four bytes of
// text, rounded up (at least one for non-empty text).
package llmsim

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Latency is a distribution of delays: "fixed" (Mean), "normal" (Mean,
// StdDev, clipped at zero) or "lognormal" (Mean and StdDev of the delay
// itself).
type Latency struct {
	Dist   string
	Mean   time.Duration
	StdDev time.Duration
}

// Config configures a Server. The zero value answers at once, without
// limits, faults or keys.
type Config struct {
	// Keys, when non-empty, are the accepted API keys; others get 401.
	Keys []string
	// RPM and TPM are requests and tokens per minute per (key, model),
	// refilled continuously; zero is unlimited.
	RPM, TPM int
	// Window is how much of a minute's allowance may go at once (a
	// minute when zero): hosted providers enforce per-minute limits over
	// shorter windows, so that 6,000 a minute is 100 a second, not 6,000
	// in the first second.
	Window time.Duration
	// ContextWindow is the largest prompt in tokens; zero is unlimited.
	ContextWindow int
	// FirstToken is the latency to the first token; TokensPerSecond paces
	// the rest (zero sends at once).
	FirstToken      Latency
	TokensPerSecond float64
	// FaultRate is the chance (0..1) that a request fails with a random
	// fault from Faults (default 500 and 529).
	FaultRate float64
	Faults    []string
	// Seed makes latencies and faults reproducible.
	Seed     uint64
	Scenario *Scenario
	// BatchDelay is how long a batch (OpenAI's Batch API, Anthropic's
	// Message Batches) takes: its requests are answered at the first
	// look at it once that long has passed since it was made.
	BatchDelay time.Duration
	// Now is the clock for rate limits; time.Now when nil.
	Now func() time.Time
}

// Server is a simulated provider. Use Start/Close, or mount it as an
// http.Handler.
type Server struct {
	cfg  Config
	now  func() time.Time
	done chan struct{}

	mu      sync.Mutex
	rng     *rand.Rand
	buckets map[string]*bucket
	stats   map[string]int
	refused map[string]int // 429s for the rate limit, per "key/model"
	cached  map[[32]byte]bool
	closed  bool
	batch   batchState

	ln  net.Listener
	srv *http.Server
	wg  sync.WaitGroup
}

// New returns a Server for cfg.
func New(cfg Config) *Server {
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	if len(cfg.Faults) == 0 {
		cfg.Faults = []string{"500", "529"}
	}
	return &Server{
		cfg: cfg, now: now, done: make(chan struct{}),
		rng:     rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		buckets: map[string]*bucket{}, stats: map[string]int{}, refused: map[string]int{}, cached: map[[32]byte]bool{},
	}
}

// Start listens on addr (e.g. "127.0.0.1:0") and serves in a goroutine
// owned by the Server until Close.
func (s *Server) Start(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("llmsim: listen: %w", err)
	}
	s.ln = ln
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		_ = s.srv.Serve(ln)
	}()
	return nil
}

// URL is the base URL of a started server, e.g. http://127.0.0.1:PORT.
func (s *Server) URL() string { return "http://" + s.ln.Addr().String() }

// Close stops the server, releasing stalled streams, and waits for its
// goroutines.
func (s *Server) Close() error {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.done)
	}
	s.mu.Unlock()
	var err error
	if s.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err = s.srv.Shutdown(ctx); err != nil {
			err = s.srv.Close()
		}
	}
	s.wg.Wait()
	return err
}

// Stats is the count of calls per "key/model" (key "-" when absent).
func (s *Server) Stats() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.stats))
	for k, v := range s.stats {
		out[k] = v
	}
	return out
}

// Throttled is the count of calls refused with a 429 for the rate limit
// (--rpm, --tpm; not an injected 429 fault), per "key/model".
func (s *Server) Throttled() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.refused))
	for k, v := range s.refused {
		out[k] = v
	}
	return out
}

// ServeHTTP routes the providers' endpoints (batches.go has the batch
// APIs'), /stats, /stats/throttled and /stats/batches.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.routeBatch(w, r) {
		return
	}
	switch {
	case r.Method == http.MethodPost && (r.URL.Path == "/v1/chat/completions" || r.URL.Path == "/chat/completions"):
		s.serve(w, r, openAI, "", false)
	case r.Method == http.MethodPost && r.URL.Path == "/v1/messages":
		s.serve(w, r, anthropic, "", false)
	case r.Method == http.MethodPost && geminiPath(r.URL.Path) != "":
		model, method, _ := strings.Cut(geminiPath(r.URL.Path), ":")
		s.serve(w, r, gemini, model, method == "streamGenerateContent")
	case r.Method == http.MethodPost && bedrockPath(r.URL) != "":
		model, op, _ := strings.Cut(bedrockPath(r.URL), "\x00")
		s.serve(w, r, bedrock, model, op == "converse-stream")
	case r.Method == http.MethodPost && azurePath(r.URL.Path) != "":
		// Azure OpenAI: the deployment in the path is the model, the
		// api-version query parameter is required (Azure answers 404
		// without one), the key comes in the api-key header.
		if r.URL.Query().Get("api-version") == "" {
			fail(w, openAI, http.StatusNotFound, "", "404", "Resource not found")
			return
		}
		s.serve(w, r, openAI, azurePath(r.URL.Path), false)
	case r.Method == http.MethodGet && r.URL.Path == "/stats":
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(s.Stats())
	case r.Method == http.MethodGet && r.URL.Path == "/stats/throttled":
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(s.Throttled())
	default:
		http.NotFound(w, r)
	}
}

type flavor int

const (
	openAI flavor = iota
	anthropic
	gemini  // Google's Gemini API (generateContent)
	bedrock // Amazon Bedrock's Converse API
)

// Tokens counts text by the documented rule: ceil(bytes/4).
func Tokens(text string) int { return (len(text) + 3) / 4 }

// request is what both formats are read into.
type request struct {
	Model        string
	Stream       bool
	IncludeUsage bool
	Last         string   // last user message text
	Prompt       []string // every text of the prompt, in order
	CachePrefix  []string // Anthropic: the texts up to the last cache_control
	Messages     []string // the system prompt and every message's text, tool calls included
	key          string
}

func (q *request) promptTokens() int {
	n := 0
	for _, t := range q.Prompt {
		n += Tokens(t)
	}
	return n
}

// textOf reads a content that is a string or an array of blocks with text.
func textOf(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var blocks []struct {
		Text    string          `json:"text"`
		Content json.RawMessage `json:"content"`
	}
	_ = json.Unmarshal(raw, &blocks)
	var b strings.Builder
	for _, bl := range blocks {
		b.WriteString(bl.Text)
		if len(bl.Content) > 0 {
			b.WriteString(textOf(bl.Content))
		}
	}
	return b.String()
}

func hasCacheControl(raw json.RawMessage) bool {
	return strings.Contains(string(raw), `"cache_control"`)
}

func parse(body []byte, f flavor) (*request, error) {
	var in struct {
		Model         string `json:"model"`
		Stream        bool   `json:"stream"`
		StreamOptions *struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
		System   json.RawMessage   `json:"system"`
		Tools    []json.RawMessage `json:"tools"`
		Messages []struct {
			Role      string          `json:"role"`
			Content   json.RawMessage `json:"content"`
			ToolCalls json.RawMessage `json:"tool_calls"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, fmt.Errorf("body is not valid JSON: %v", err)
	}
	if in.Model == "" {
		return nil, errors.New("model: required")
	}
	if len(in.Messages) == 0 {
		return nil, errors.New("messages: at least one message is required")
	}
	q := &request{Model: in.Model, Stream: in.Stream}
	if in.StreamOptions != nil {
		q.IncludeUsage = in.StreamOptions.IncludeUsage
	}
	cacheEnd := -1
	add := func(text string, cc bool) {
		q.Prompt = append(q.Prompt, text)
		if cc {
			cacheEnd = len(q.Prompt)
		}
	}
	for _, t := range in.Tools {
		add(string(t), hasCacheControl(t))
	}
	if len(in.System) > 0 {
		add(textOf(in.System), hasCacheControl(in.System))
		q.Messages = append(q.Messages, textOf(in.System))
	}
	for _, m := range in.Messages {
		t := textOf(m.Content)
		add(m.Role+":"+t, false)
		// The raw content too: an Anthropic tool_use block's input is not
		// text, and OpenAI's tool calls sit beside the content.
		q.Messages = append(q.Messages, t, string(m.Content), string(m.ToolCalls))
		if m.Role == "user" {
			q.Last = t
		}
	}
	if f == anthropic && cacheEnd > 0 {
		q.CachePrefix = q.Prompt[:cacheEnd]
	}
	return q, nil
}

// bucket is a token bucket refilled continuously at rate per minute.
// bucket holds up to max (the window's share of the per-minute allowance)
// and refills at perMin a minute.
type bucket struct {
	level, max, perMin float64
	at                 time.Time
}

func (b *bucket) refill(now time.Time) {
	b.level = math.Min(b.max, b.level+now.Sub(b.at).Minutes()*b.perMin)
	b.at = now
}

// until is how long until the bucket holds n again.
func (b *bucket) until(n float64) time.Duration {
	if b.level >= n {
		return 0
	}
	return time.Duration((n - b.level) / b.perMin * float64(time.Minute))
}

type limitState struct {
	reqLimit, reqLeft, tokLimit, tokLeft int
	reqReset, tokReset                   time.Duration
}

// take charges one request and tokens to the (key, model) buckets; it
// returns false and how long to wait when either is short.
func (s *Server) take(key, model string, tokens int) (limitState, bool, time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	get := func(kind string, perMin int) *bucket {
		id := kind + "\x00" + key + "\x00" + model
		b := s.buckets[id]
		if b == nil {
			capacity := float64(perMin)
			if w := s.cfg.Window; w > 0 && w < time.Minute {
				capacity = math.Max(1, capacity*w.Minutes())
			}
			b = &bucket{level: capacity, max: capacity, perMin: float64(perMin), at: now}
			s.buckets[id] = b
		}
		b.refill(now)
		return b
	}
	var st limitState
	var rb, tb *bucket
	if s.cfg.RPM > 0 {
		rb = get("r", s.cfg.RPM)
	}
	if s.cfg.TPM > 0 {
		tb = get("t", s.cfg.TPM)
	}
	var wait time.Duration
	if rb != nil && rb.level < 1 {
		wait = rb.until(1)
	}
	if tb != nil && tb.level < float64(tokens) {
		wait = max(wait, tb.until(math.Min(float64(tokens), tb.max)))
	}
	ok := wait == 0
	if ok {
		if rb != nil {
			rb.level--
		}
		if tb != nil {
			tb.level -= float64(tokens)
		}
	}
	if rb != nil {
		st.reqLimit, st.reqLeft, st.reqReset = s.cfg.RPM, int(rb.level), rb.until(rb.max)
	}
	if tb != nil {
		st.tokLimit, st.tokLeft, st.tokReset = s.cfg.TPM, int(max(tb.level, 0)), tb.until(tb.max)
	}
	return st, ok, wait
}

func (st limitState) write(h http.Header, f flavor, now time.Time) {
	if f == gemini || f == bedrock {
		return // neither API states its limits in headers
	}
	if f == openAI {
		if st.reqLimit > 0 {
			h.Set("x-ratelimit-limit-requests", strconv.Itoa(st.reqLimit))
			h.Set("x-ratelimit-remaining-requests", strconv.Itoa(st.reqLeft))
			h.Set("x-ratelimit-reset-requests", st.reqReset.Round(time.Millisecond).String())
		}
		if st.tokLimit > 0 {
			h.Set("x-ratelimit-limit-tokens", strconv.Itoa(st.tokLimit))
			h.Set("x-ratelimit-remaining-tokens", strconv.Itoa(st.tokLeft))
			h.Set("x-ratelimit-reset-tokens", st.tokReset.Round(time.Millisecond).String())
		}
		return
	}
	if st.reqLimit > 0 {
		h.Set("anthropic-ratelimit-requests-limit", strconv.Itoa(st.reqLimit))
		h.Set("anthropic-ratelimit-requests-remaining", strconv.Itoa(st.reqLeft))
		h.Set("anthropic-ratelimit-requests-reset", now.Add(st.reqReset).UTC().Format(time.RFC3339))
	}
	if st.tokLimit > 0 {
		// The token limit counts prompt tokens: it is Anthropic's input
		// tokens limit too, which the API states besides the most
		// restrictive one.
		for _, kind := range []string{"tokens", "input-tokens"} {
			h.Set("anthropic-ratelimit-"+kind+"-limit", strconv.Itoa(st.tokLimit))
			h.Set("anthropic-ratelimit-"+kind+"-remaining", strconv.Itoa(st.tokLeft))
			h.Set("anthropic-ratelimit-"+kind+"-reset", now.Add(st.tokReset).UTC().Format(time.RFC3339))
		}
	}
}

// fail writes an error in the provider's own JSON shape.
func fail(w http.ResponseWriter, f flavor, status int, typ, code, msg string) {
	if f == gemini {
		failGemini(w, status, msg)
		return
	}
	if f == bedrock {
		// The error's type travels in a header; the body is {"message"}.
		if typ == "" || strings.HasSuffix(typ, "_error") {
			typ = bedrockErrorType(status)
		}
		w.Header().Set("X-Amzn-ErrorType", typ+":http://internal.amazon.com/coral/com.amazon.bedrock/")
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	if f == bedrock {
		_ = enc.Encode(map[string]any{"message": msg})
		return
	}
	if f == openAI {
		var c any
		if code != "" {
			c = code
		}
		_ = enc.Encode(map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": c}})
		return
	}
	_ = enc.Encode(map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": msg}})
}

// azurePath is the deployment of an Azure OpenAI chat completions path,
// /openai/deployments/{deployment}/chat/completions, or "".
func azurePath(path string) string {
	rest, ok := strings.CutPrefix(path, "/openai/deployments/")
	if !ok {
		return ""
	}
	d, ok := strings.CutSuffix(rest, "/chat/completions")
	if !ok || d == "" || strings.Contains(d, "/") {
		return ""
	}
	return d
}

func apiKey(r *http.Request, f flavor) string {
	switch f {
	case anthropic:
		return r.Header.Get("x-api-key")
	case gemini:
		if k := r.Header.Get("x-goog-api-key"); k != "" {
			return k
		}
		return r.URL.Query().Get("key")
	case bedrock:
		return sigV4AccessKey(r.Header.Get("Authorization"))
	}
	if k := r.Header.Get("api-key"); k != "" {
		return k // Azure OpenAI
	}
	return strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
}

// serve answers a request in flavor f's wire format; deployment, when
// set, is the model (Azure OpenAI, Gemini and Bedrock name it in the
// path), and stream says the path asked for a stream (Gemini, Bedrock).
func (s *Server) serve(w http.ResponseWriter, r *http.Request, f flavor, deployment string, stream bool) {
	key := apiKey(r, f)
	if len(s.cfg.Keys) > 0 && !contains(s.cfg.Keys, key) {
		switch f {
		case openAI:
			fail(w, f, 401, "invalid_request_error", "invalid_api_key", "Incorrect API key provided.")
		case gemini:
			// Gemini refuses a bad key with a 400 whose details say why.
			failGemini(w, 400, "API key not valid. Please pass a valid API key.", map[string]any{
				"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID", "domain": "googleapis.com"})
		case bedrock:
			fail(w, f, 403, "UnrecognizedClientException", "", "The security token included in the request is invalid.")
		default:
			fail(w, f, 401, "authentication_error", "", "invalid x-api-key")
		}
		return
	}
	var body []byte
	body, err := readAll(r)
	if err != nil {
		fail(w, f, 400, "invalid_request_error", "", err.Error())
		return
	}
	var q *request
	switch f {
	case gemini:
		q, err = parseGemini(body)
	case bedrock:
		q, err = parseBedrock(body)
	default:
		q, err = parse(body, f)
	}
	if err != nil {
		fail(w, f, 400, "invalid_request_error", "", err.Error())
		return
	}
	q.key = key
	if deployment != "" {
		q.Model = deployment
	}
	if stream {
		q.Stream = true
	}
	statKey := key
	if statKey == "" {
		statKey = "-"
	}
	s.mu.Lock()
	s.stats[statKey+"/"+q.Model]++
	s.mu.Unlock()

	in := q.promptTokens()
	if s.cfg.ContextWindow > 0 && in > s.cfg.ContextWindow {
		switch f {
		case openAI:
			fail(w, f, 400, "invalid_request_error", "context_length_exceeded",
				fmt.Sprintf("This model's maximum context length is %d tokens. However, your messages resulted in %d tokens.", s.cfg.ContextWindow, in))
		case gemini:
			fail(w, f, 400, "", "", fmt.Sprintf("The input token count (%d) exceeds the maximum number of tokens allowed (%d).", in, s.cfg.ContextWindow))
		case bedrock:
			fail(w, f, 400, "ValidationException", "", "Input is too long for requested model.")
		default:
			fail(w, f, 400, "invalid_request_error", "", fmt.Sprintf("prompt is too long: %d tokens > %d maximum", in, s.cfg.ContextWindow))
		}
		return
	}
	st, ok, wait := s.take(key, q.Model, in)
	st.write(w.Header(), f, s.now())
	if !ok {
		s.mu.Lock()
		s.refused[statKey+"/"+q.Model]++
		s.mu.Unlock()
		secs := int(math.Ceil(wait.Seconds()))
		w.Header().Set("Retry-After", strconv.Itoa(max(secs, 1)))
		switch f {
		case openAI:
			fail(w, f, 429, "requests", "rate_limit_exceeded", fmt.Sprintf("Rate limit reached for %s. Please try again in %s.", q.Model, wait.Round(time.Millisecond)))
		case gemini:
			failGemini(w, 429, "You exceeded your current quota, please check your plan and billing details.", retryInfo(wait))
		case bedrock:
			fail(w, f, 429, "ThrottlingException", "", "Too many requests, please wait before trying again.")
		default:
			fail(w, f, 429, "rate_limit_error", "", "Number of requests or tokens has exceeded your rate limit.")
		}
		return
	}

	rule := s.rule(q)
	fault := rule.Fault
	if fault == "" && s.cfg.FaultRate > 0 {
		s.mu.Lock()
		if s.rng.Float64() < s.cfg.FaultRate {
			fault = s.cfg.Faults[s.rng.IntN(len(s.cfg.Faults))]
		}
		s.mu.Unlock()
	}
	if rule.Hang {
		s.stall(r.Context())
		return
	}
	if sf, ok := statusFaults[fault]; ok {
		if rule.RetryAfterMs > 0 {
			w.Header().Set("retry-after-ms", strconv.Itoa(rule.RetryAfterMs))
		}
		msg := sf.message
		if rule.Message != "" {
			msg = rule.Message
		}
		switch f {
		case openAI:
			fail(w, f, sf.status, sf.openAIType, sf.openAICode, msg)
		case gemini:
			var details []map[string]any
			if rule.RetryAfterMs > 0 {
				details = append(details, retryInfo(time.Duration(rule.RetryAfterMs)*time.Millisecond))
			}
			failGemini(w, sf.status, msg, details...)
		case bedrock:
			fail(w, f, sf.status, bedrockErrorType(sf.status), "", msg)
		default:
			fail(w, f, sf.status, sf.anthType, "", msg)
		}
		return
	}
	switch fault {
	case "reset":
		reset(w)
		return
	}
	ans := answer{reply: rule.Reply, in: in, malformed: fault == "malformed", stall: rule.StallAfterTokens}
	if ans.reply.Text == "" && len(ans.reply.ToolCalls) == 0 {
		ans.reply.Text = q.Last
	}
	ans.out = Tokens(ans.reply.Text)
	for _, tc := range ans.reply.ToolCalls {
		ans.out += Tokens(tc.Name) + Tokens(tc.Arguments)
	}
	if rule.Usage != nil {
		if rule.Usage.InputTokens > 0 {
			ans.in = rule.Usage.InputTokens
		}
		if rule.Usage.OutputTokens > 0 {
			ans.out = rule.Usage.OutputTokens
		}
	}
	ans.cacheCreate, ans.cacheRead = s.cache(q, f)
	d := time.Duration(rule.DelayMs) * time.Millisecond
	if rule.DelayMs == 0 {
		d = s.delay()
	}
	if !s.sleep(r.Context(), d) {
		return
	}
	switch f {
	case openAI:
		s.writeOpenAI(w, r, q, ans)
	case gemini:
		s.writeGemini(w, r, q, ans)
	case bedrock:
		s.writeBedrock(w, r, q, ans)
	default:
		s.writeAnthropic(w, r, q, ans)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func readAll(r *http.Request) ([]byte, error) {
	b, err := readLimited(r)
	if err != nil {
		return nil, fmt.Errorf("reading body: %v", err)
	}
	return b, nil
}

// reset closes the client's connection without an answer.
func reset(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic(http.ErrAbortHandler)
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		return
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

func (s *Server) rule(q *request) Rule {
	if s.cfg.Scenario != nil {
		for _, r := range s.cfg.Scenario.Rules {
			if r.Match.matches(q) {
				return r
			}
		}
	}
	return Rule{}
}

// cache applies the prompt-cache rule. Anthropic: the texts up to the
// last block carrying cache_control are the prefix; its first sight
// reports cache_creation_input_tokens, later sights cache_read. OpenAI:
// the prompt but its last message is the prefix; when it is at least 1024
// tokens and was seen before, cached_tokens is its size rounded down to a
// multiple of 128 (OpenAI caches in 128-token steps from 1024).
func (s *Server) cache(q *request, f flavor) (create, read int) {
	prefix := q.CachePrefix
	if f == openAI && len(q.Prompt) > 1 {
		prefix = q.Prompt[:len(q.Prompt)-1]
	}
	n := 0
	for _, t := range prefix {
		n += Tokens(t)
	}
	if n == 0 || (f == openAI && n < 1024) {
		return 0, 0
	}
	h := sha256.New()
	for _, t := range prefix {
		h.Write([]byte(t))
		h.Write([]byte{0})
	}
	var id [32]byte
	copy(id[:], h.Sum(nil))
	s.mu.Lock()
	seen := s.cached[id]
	s.cached[id] = true
	s.mu.Unlock()
	if f == openAI {
		if seen {
			return 0, n / 128 * 128
		}
		return 0, 0
	}
	if seen {
		return 0, n
	}
	return n, 0
}

// delay draws the latency to the first token.
func (s *Server) delay() time.Duration {
	l := s.cfg.FirstToken
	s.mu.Lock()
	defer s.mu.Unlock()
	return Draw(l, s.rng)
}

// Draw takes one delay from l using rng; exported so the shape of each
// distribution can be checked without timing anything.
func Draw(l Latency, rng *rand.Rand) time.Duration {
	switch l.Dist {
	case "normal":
		return max(0, time.Duration(float64(l.Mean)+rng.NormFloat64()*float64(l.StdDev)))
	case "lognormal":
		if l.Mean <= 0 {
			return 0
		}
		m, sd := float64(l.Mean), float64(l.StdDev)
		sigma2 := math.Log(1 + sd*sd/(m*m))
		mu := math.Log(m) - sigma2/2
		return time.Duration(math.Exp(mu + rng.NormFloat64()*math.Sqrt(sigma2)))
	default:
		return l.Mean
	}
}

// sleep waits d unless the request or the server ends first.
func (s *Server) sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-s.done:
		return false
	}
}

// stall holds a stream open until the client or the server gives up.
func (s *Server) stall(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-s.done:
	}
}

type answer struct {
	reply                  Reply
	in, out                int
	cacheCreate, cacheRead int
	malformed              bool
	stall                  int
}

// pieces splits text into chunks of about one token (4 bytes).
func pieces(text string) []string {
	var out []string
	for len(text) > 4 {
		out = append(out, text[:4])
		text = text[4:]
	}
	if text != "" {
		out = append(out, text)
	}
	return out
}
