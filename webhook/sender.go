package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/svc-dev/svc"
)

// Sources are where a Sender reads what a callback reports: the batch
// manager and the runtime. Start takes them, as they are built after the
// Sender they are given.
type Sources struct {
	Batches interface {
		BatchStatus(ctx context.Context, batchID string) (svc.BatchStatus, error)
	}
	Runs interface {
		RunStatus(ctx context.Context, runID string) (svc.RunStatus, error)
		RunResult(ctx context.Context, runID string) (json.RawMessage, error)
	}
}

// Config configures New. Zero durations take the defaults below.
type Config struct {
	Store svc.WebhookStore
	// Key signs every POST. Without one, CheckCallback refuses every URL:
	// an unsigned callback could be forged by anyone who knows the URL.
	Key []byte
	// AllowPrivate lets callbacks go to loopback and private addresses
	// (svc serve --webhook-allow-private).
	AllowPrivate bool
	Log          *zap.Logger
	// Timeout bounds one attempt, connection to last byte (default 10 s).
	Timeout time.Duration
	// MinBackoff is the wait after the first failed attempt, doubled
	// after each (default 1 s), up to MaxBackoff (default 1 h); each wait
	// is drawn between half and all of that (jitter).
	MinBackoff, MaxBackoff time.Duration
	// MaxAge is how long attempts go on after the batch or run ended
	// (default svc.WebhookMaxAge).
	MaxAge time.Duration
	// Poll is how often the queue is read for due deliveries (default 1 s).
	Poll time.Duration
	// WaitCheck is how often a waiting delivery looks whether its batch or
	// run ended without being told (it ended on another node, or while no
	// process ran): default 30 s.
	WaitCheck time.Duration
	// Concurrency bounds the POSTs in flight (default 8).
	Concurrency int
	// Transport, for tests; default: one that dials through the Guard.
	Transport http.RoundTripper
}

// Defaults of Config.
const (
	DefaultTimeout     = 10 * time.Second
	DefaultMinBackoff  = time.Second
	DefaultMaxBackoff  = time.Hour
	DefaultPoll        = time.Second
	DefaultWaitCheck   = 30 * time.Second
	DefaultConcurrency = 8
	claimBatch         = 64
	// maxErrorBody is how much of a refusal's body last_error quotes.
	maxErrorBody = 200
)

// Sender delivers callbacks; see the package doc.
type Sender struct {
	cfg    Config
	log    *zap.Logger
	guard  Guard
	client *http.Client
	lease  time.Duration

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	wake   chan struct{}
	sem    chan struct{}
	src    Sources

	mu      sync.Mutex
	started bool
	// busy holds the deliveries this process handles now, so that an
	// Ended and a claim do not both send one.
	busy map[string]bool
}

var _ svc.Callbacks = (*Sender)(nil)

// New returns a Sender; Start starts delivering.
func New(cfg Config) (*Sender, error) {
	if cfg.Store == nil {
		return nil, errors.New("webhook: New: a store is required")
	}
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&cfg.Timeout, DefaultTimeout)
	def(&cfg.MinBackoff, DefaultMinBackoff)
	def(&cfg.MaxBackoff, DefaultMaxBackoff)
	def(&cfg.MaxAge, svc.WebhookMaxAge)
	def(&cfg.Poll, DefaultPoll)
	def(&cfg.WaitCheck, DefaultWaitCheck)
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = DefaultConcurrency
	}
	s := &Sender{cfg: cfg, log: cfg.Log, guard: Guard{AllowPrivate: cfg.AllowPrivate},
		wake: make(chan struct{}, 1), sem: make(chan struct{}, cfg.Concurrency), busy: map[string]bool{},
		// A claim outlives the attempt it is for, and the store write
		// after it, so that no other node claims it meanwhile.
		lease: 2*cfg.Timeout + 10*time.Second}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	tr := cfg.Transport
	if tr == nil {
		d := &net.Dialer{Timeout: cfg.Timeout, Control: s.guard.Control}
		tr = &http.Transport{
			// No proxy: the guard checks the address dialled, which a
			// proxy would hide.
			Proxy:                 nil,
			DialContext:           d.DialContext,
			TLSHandshakeTimeout:   cfg.Timeout,
			ResponseHeaderTimeout: cfg.Timeout,
			MaxIdleConnsPerHost:   2,
			IdleConnTimeout:       30 * time.Second,
		}
	}
	s.client = &http.Client{Transport: tr, Timeout: cfg.Timeout,
		// A redirect is not followed: a POST's redirect is ambiguous,
		// and the receiver should give the URL it means.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return s, nil
}

// Start reads the batches and runs from src and starts the goroutine that
// delivers what is due, those a stopped process left included.
func (s *Sender) Start(src Sources) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started || s.ctx.Err() != nil {
		return
	}
	s.started, s.src = true, src
	s.wg.Go(s.loop)
}

// Close stops delivering: an attempt in flight is abandoned (its
// connection closed) and stays due, for this or the next process; Close
// waits for the goroutines, which takes at most a store write's time.
func (s *Sender) Close() error {
	s.cancel()
	if t, ok := s.client.Transport.(*http.Transport); ok {
		defer t.CloseIdleConnections()
	}
	s.wg.Wait()
	return nil
}

func (s *Sender) loop() {
	t := time.NewTicker(s.cfg.Poll)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		case <-s.wake:
		}
		for s.claim() {
		}
	}
}

// claim claims the due deliveries and hands them out; it reports whether
// there may be more due now.
func (s *Sender) claim() bool {
	ds, err := s.cfg.Store.ClaimWebhooks(s.ctx, time.Now().UTC(), s.lease, claimBatch)
	if err != nil {
		if s.ctx.Err() == nil {
			s.log.Warn("reading the webhook queue failed; trying again", zap.Error(err))
		}
		return false
	}
	for _, d := range ds {
		if !s.take(d.ID) {
			continue
		}
		select {
		case s.sem <- struct{}{}:
		case <-s.ctx.Done():
			s.drop(d.ID)
			return false
		}
		s.wg.Go(func() {
			defer func() { <-s.sem; s.drop(d.ID) }()
			// Read again now that this process holds it: an Ended may
			// have moved it on between the claim and the take.
			cur, err := s.cfg.Store.GetWebhook(s.ctx, d.ID)
			if err != nil || cur.State.Terminal() || cur.State != d.State || cur.Attempts != d.Attempts {
				return
			}
			s.handle(cur)
		})
	}
	return len(ds) == claimBatch
}

func (s *Sender) take(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.busy[id] {
		return false
	}
	s.busy[id] = true
	return true
}

func (s *Sender) drop(id string) {
	s.mu.Lock()
	delete(s.busy, id)
	s.mu.Unlock()
}

// CheckCallback implements svc.Callbacks.
func (s *Sender) CheckCallback(ctx context.Context, url string) error {
	if len(s.cfg.Key) == 0 {
		return svc.Errorf(svc.KindSpecValidation, "callback_url: this server has no webhook signing key, so it sends no callbacks (start svc serve with --webhook-key-file)")
	}
	_, err := s.guard.CheckURL(ctx, url)
	return err
}

// ArmCallback implements svc.Callbacks.
func (s *Sender) ArmCallback(ctx context.Context, kind svc.CallbackKind, id, url string) error {
	now := time.Now().UTC()
	d := svc.WebhookDelivery{ID: svc.WebhookID(kind, id), URL: url, State: svc.CallbackWaiting,
		NextAt: now.Add(s.cfg.WaitCheck), CreatedAt: now}
	if err := s.cfg.Store.CreateWebhook(ctx, d); err != nil {
		return fmt.Errorf("callback of %s %s: %w", kind, id, err)
	}
	return nil
}

// Ended implements svc.Callbacks: the delivery is handled now, on a
// goroutine of the Sender, unless this process handles it already.
func (s *Sender) Ended(kind svc.CallbackKind, id string) {
	s.mu.Lock()
	started := s.started
	s.mu.Unlock()
	if !started || s.ctx.Err() != nil {
		return
	}
	did := svc.WebhookID(kind, id)
	if !s.take(did) {
		return
	}
	s.wg.Go(func() {
		defer s.drop(did)
		d, err := s.cfg.Store.GetWebhook(s.ctx, did)
		if err != nil || d.State != svc.CallbackWaiting {
			return // no callback, or one under way
		}
		select {
		case s.sem <- struct{}{}:
		case <-s.ctx.Done():
			return
		}
		defer func() { <-s.sem }()
		s.handle(d)
	})
}

// Callback implements svc.Callbacks.
func (s *Sender) Callback(ctx context.Context, kind svc.CallbackKind, id string) *svc.CallbackStatus {
	d, err := s.cfg.Store.GetWebhook(ctx, svc.WebhookID(kind, id))
	if err != nil {
		if svc.KindOf(err) != svc.KindRegistry {
			s.log.Debug("reading a callback's delivery log failed", zap.String("id", id), zap.Error(err))
		}
		return nil
	}
	return d.Status()
}

// handle moves a claimed delivery on: a waiting one to pending once its
// batch or run ended, a pending one by one attempt.
func (s *Sender) handle(d svc.WebhookDelivery) {
	log := s.log.With(zap.String("delivery", d.ID))
	if d.State == svc.CallbackWaiting {
		body, ended, err := s.body(d.ID)
		now := time.Now().UTC()
		switch {
		case s.ctx.Err() != nil:
			return // the claim's lease brings it back
		case err != nil && svc.KindOf(err) == svc.KindRegistry:
			d.State, d.LastError = svc.CallbackFailed, "nothing to report: "+err.Error()
		case err != nil:
			log.Warn("reading what a callback reports failed; trying again", zap.Error(err))
			d.NextAt = now.Add(s.cfg.WaitCheck)
		case !ended:
			d.NextAt = now.Add(s.cfg.WaitCheck)
		default:
			d.State, d.Body, d.EndedAt, d.NextAt = svc.CallbackPending, body, now, now
		}
		if d.State != svc.CallbackPending {
			s.save(log, d)
			return
		}
	}
	s.attempt(log, d)
}

// save writes d, even while the Sender closes (what it says happened).
func (s *Sender) save(log *zap.Logger, d svc.WebhookDelivery) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.ctx), 5*time.Second)
	defer cancel()
	if err := s.cfg.Store.UpdateWebhook(ctx, d); err != nil && svc.KindOf(err) != svc.KindRunState {
		log.Warn("recording a callback's delivery failed; it is tried again once its claim ends", zap.Error(err))
	}
}

// batchBody and runBody are what a callback POSTs.
type batchBody struct {
	Type  svc.CallbackKind `json:"type"`
	ID    string           `json:"id"`
	Batch svc.BatchStatus  `json:"batch"`
}

type runBody struct {
	Type   svc.CallbackKind `json:"type"`
	ID     string           `json:"id"`
	Status svc.RunStatus    `json:"status"`
	// Result is the AgentResult or GroupResult, null for a cancelled run.
	Result json.RawMessage `json:"result"`
}

// body returns what the callback of delivery id sends, once its batch or
// run ended.
func (s *Sender) body(id string) (json.RawMessage, bool, error) {
	kind, sub, ok := svc.SplitWebhookID(id)
	if !ok {
		return nil, false, svc.Errorf(svc.KindRegistry, "malformed delivery id %q", id)
	}
	ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
	defer cancel()
	switch kind {
	case svc.CallbackBatch:
		if s.src.Batches == nil {
			return nil, false, svc.Errorf(svc.KindRuntime, "this process serves no batches")
		}
		st, err := s.src.Batches.BatchStatus(ctx, sub)
		if err != nil || !st.State.Terminal() {
			return nil, false, err
		}
		st.Callback = nil
		b, err := json.Marshal(batchBody{Type: kind, ID: sub, Batch: st})
		return b, err == nil, err
	default:
		if s.src.Runs == nil {
			return nil, false, svc.Errorf(svc.KindRuntime, "this process serves no runs")
		}
		st, err := s.src.Runs.RunStatus(ctx, sub)
		if err != nil || !st.State.Terminal() {
			return nil, false, err
		}
		st.Callback = nil
		res, err := s.src.Runs.RunResult(ctx, sub)
		if err != nil {
			if svc.KindOf(err) != svc.KindRunState {
				return nil, false, err
			}
			res = json.RawMessage("null") // cancelled: no result
		}
		b, err := json.Marshal(runBody{Type: kind, ID: sub, Status: st, Result: res})
		return b, err == nil, err
	}
}

// attempt sends d once and records the outcome.
func (s *Sender) attempt(log *zap.Logger, d svc.WebhookDelivery) {
	status, retryAfter, detail, err := s.post(d)
	if s.ctx.Err() != nil {
		// Closing: the attempt did not happen as far as the log goes; due
		// again at once, for this or the next process.
		d.NextAt = time.Now().UTC()
		s.save(log, d)
		return
	}
	d.Attempts++
	d.LastStatus = status
	now := time.Now().UTC()
	switch {
	case err != nil:
		d.LastError = err.Error()
	case status >= 200 && status < 300:
		d.State, d.LastError = svc.CallbackDelivered, ""
		log.Info("callback delivered", zap.String("url", redact(d.URL)), zap.Int("attempts", d.Attempts), zap.Int("status", status))
		s.save(log, d)
		return
	case status >= 300 && status < 400:
		d.State, d.LastError = svc.CallbackFailed, fmt.Sprintf("HTTP %d: redirects are not followed; give the URL the receiver answers at", status)
	case status >= 400 && status < 500 && status != http.StatusRequestTimeout && status != http.StatusTooManyRequests:
		d.State, d.LastError = svc.CallbackFailed, fmt.Sprintf("HTTP %d: the receiver refused the callback", status)
	default:
		d.LastError = fmt.Sprintf("HTTP %d", status)
	}
	if detail != "" {
		d.LastError += ": " + detail
	}
	if d.State == svc.CallbackPending {
		wait := s.backoff(d.Attempts)
		if retryAfter > wait {
			wait = min(retryAfter, s.cfg.MaxBackoff)
		}
		d.NextAt = now.Add(wait)
		if d.NextAt.After(d.EndedAt.Add(s.cfg.MaxAge)) {
			d.State = svc.CallbackFailed
			d.LastError += fmt.Sprintf("; gave up after %d attempts over %s", d.Attempts, s.cfg.MaxAge)
		}
	}
	if d.State == svc.CallbackFailed {
		log.Warn("callback failed", zap.String("url", redact(d.URL)), zap.Int("attempts", d.Attempts), zap.String("error", d.LastError))
	} else {
		log.Info("callback attempt failed; retrying", zap.String("url", redact(d.URL)), zap.Int("attempts", d.Attempts),
			zap.String("error", d.LastError), zap.Time("next_attempt_at", d.NextAt))
	}
	s.save(log, d)
}

// backoff is the wait after attempt n (from 1): MinBackoff doubled n-1
// times, capped at MaxBackoff, drawn between half and all of it.
func (s *Sender) backoff(n int) time.Duration {
	d := s.cfg.MaxBackoff
	if n-1 < 40 {
		d = min(s.cfg.MinBackoff<<(n-1), s.cfg.MaxBackoff)
	}
	if d <= 0 { // overflow
		d = s.cfg.MaxBackoff
	}
	return d/2 + rand.N(d/2+1)
}

// post sends one attempt: the status, a Retry-After in seconds, the
// start of the body of an answer other than 2xx, or the error when no
// answer came.
func (s *Sender) post(d svc.WebhookDelivery) (status int, retryAfter time.Duration, detail string, err error) {
	req, err := http.NewRequestWithContext(s.ctx, http.MethodPost, d.URL, nil)
	if err != nil {
		return 0, 0, "", fmt.Errorf("building the request: %w", err)
	}
	body := []byte(d.Body)
	req.Body = io.NopCloser(bytesReader(body))
	req.ContentLength = int64(len(body))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytesReader(body)), nil }
	h := req.Header
	h.Set("Content-Type", "application/json")
	h.Set("User-Agent", "svc-webhook/"+svc.Version)
	h.Set(DeliveryHeader, d.ID)
	h.Set(AttemptHeader, strconv.Itoa(d.Attempts+1))
	h.Set(SignatureHeader, Sign(s.cfg.Key, time.Now(), body))
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, 0, "", fmt.Errorf("POST %s: %w", redact(d.URL), unwrapURLError(err))
	}
	defer resp.Body.Close()
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	// The rest is drained, within reason, so the connection is reused.
	_, _ = io.CopyN(io.Discard, resp.Body, 64<<10)
	if v, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && v > 0 {
		retryAfter = time.Duration(v) * time.Second
	}
	if resp.StatusCode >= 300 {
		detail = printable(snippet)
	}
	return resp.StatusCode, retryAfter, detail, nil
}

// printable keeps the text of b on one line, for last_error.
func printable(b []byte) string {
	out := make([]rune, 0, len(b))
	for _, r := range strings.ToValidUTF8(string(b), "?") {
		if r < ' ' || r == 0x7f {
			r = ' '
		}
		out = append(out, r)
	}
	return strings.TrimSpace(string(out))
}

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

// redact hides a URL's query (it may hold a token) in logs.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	if u.RawQuery != "" {
		u.RawQuery = "…"
	}
	return u.Redacted()
}

// unwrapURLError drops *url.Error's repetition of the method and URL.
func unwrapURLError(err error) error {
	if ue, ok := errors.AsType[*url.Error](err); ok {
		if ue.Timeout() {
			return fmt.Errorf("no answer within the timeout: %w", ue.Err)
		}
		return ue.Err
	}
	return err
}
