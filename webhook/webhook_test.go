package webhook_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/stores/memstore"
	"github.com/svc-dev/svc/webhook"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var key = []byte("0123456789abcdef0123456789abcdef")

func TestSignVerify(t *testing.T) {
	body := []byte(`{"type":"batch","id":"b1"}`)
	now := time.Unix(1_800_000_000, 0)
	h := webhook.Sign(key, now, body)
	if !strings.HasPrefix(h, "t=1800000000,v1=") || len(h) != len("t=1800000000,v1=")+64 {
		t.Fatalf("Sign = %q, want t=<unix>,v1=<64 hex digits>", h)
	}
	if err := webhook.Verify(key, h, body, now.Add(time.Minute), 0); err != nil {
		t.Fatalf("Verify of a good signature: %v", err)
	}
	cases := []struct {
		name   string
		key    []byte
		header string
		body   string
		now    time.Time
		want   error
	}{
		{"body changed", key, h, `{"type":"batch","id":"b2"}`, now, webhook.ErrBadSignature},
		{"other key", []byte("another key, just as long as it"), h, string(body), now, webhook.ErrBadSignature},
		{"timestamp changed", key, strings.Replace(h, "t=1800000000", "t=1800000001", 1), string(body), now, webhook.ErrBadSignature},
		{"too old", key, h, string(body), now.Add(6 * time.Minute), webhook.ErrExpired},
		{"from the future", key, h, string(body), now.Add(-6 * time.Minute), webhook.ErrExpired},
	}
	for _, c := range cases {
		if err := webhook.Verify(c.key, c.header, []byte(c.body), c.now, 0); !errors.Is(err, c.want) {
			t.Errorf("%s: Verify = %v, want %v", c.name, err, c.want)
		}
	}
	for _, bad := range []string{"", "v1=abcd", "t=1800000000", "t=x,v1=" + strings.Repeat("0", 64)} {
		if err := webhook.Verify(key, bad, body, now, 0); err == nil {
			t.Errorf("Verify(%q) = nil, want an error", bad)
		}
	}
	// Two v1 values (keys rotating): one match is enough.
	two := h + ",v1=" + strings.Repeat("ab", 32)
	if err := webhook.Verify(key, two, body, now, 0); err != nil {
		t.Errorf("Verify with a second v1: %v", err)
	}
}

func TestBlocked(t *testing.T) {
	for _, s := range []string{"127.0.0.1", "127.1.2.3", "::1", "10.0.0.1", "172.16.5.4", "192.168.1.1", "169.254.169.254",
		"fe80::1", "fc00::1", "0.0.0.0", "::", "100.64.0.1", "224.0.0.1", "::ffff:127.0.0.1", "::ffff:10.0.0.1", "0.1.2.3"} {
		if !webhook.Blocked(netip.MustParseAddr(s)) {
			t.Errorf("Blocked(%s) = false, want true", s)
		}
	}
	for _, s := range []string{"93.184.215.14", "8.8.8.8", "2606:4700::1111", "172.32.0.1", "100.128.0.1"} {
		if webhook.Blocked(netip.MustParseAddr(s)) {
			t.Errorf("Blocked(%s) = true, want false", s)
		}
	}
}

// noDNS fails every lookup at once, as a machine without a resolver does.
var noDNS = &net.Resolver{PreferGo: true, Dial: func(context.Context, string, string) (net.Conn, error) {
	return nil, errors.New("no DNS here")
}}

func TestCheckURL(t *testing.T) {
	ctx := t.Context()
	g := webhook.Guard{Resolver: noDNS}
	for _, c := range []struct{ url, want string }{
		{"ftp://example.com/x", "only http and https"},
		{"file:///etc/passwd", "only http and https"},
		{"/relative", "only http and https"},
		{"http://", "no host"},
		{"https://user:secret@example.com/", "user info"},
		{"https://93.184.215.14/x#frag", "fragment"},
		{"http://127.0.0.1:8080/hook", "server-side request forgery"},
		{"http://[::1]/hook", "server-side request forgery"},
		{"http://169.254.169.254/latest/meta-data", "server-side request forgery"},
		{"http://10.1.2.3/", "server-side request forgery"},
		{"http://[::ffff:192.168.0.1]/", "server-side request forgery"},
		{"https://no-such-host.invalid/", "does not resolve"},
		{"https://example.com/" + strings.Repeat("a", 3000), "longer than"},
	} {
		_, err := g.CheckURL(ctx, c.url)
		if svc.KindOf(err) != svc.KindSpecValidation || !strings.Contains(err.Error(), c.want) {
			t.Errorf("CheckURL(%.60q) = %v, want a SpecValidationError saying %q", c.url, err, c.want)
		}
	}
	if _, err := g.CheckURL(ctx, "https://93.184.215.14:8443/hook?token=x"); err != nil {
		t.Errorf("a public address: %v", err)
	}
	// A name that resolves to loopback is refused like the address.
	if _, err := (webhook.Guard{}).CheckURL(ctx, "http://localhost:9/hook"); err == nil || !strings.Contains(err.Error(), "request forgery") {
		t.Errorf("localhost: %v, want refused", err)
	}
	allow := webhook.Guard{AllowPrivate: true, Resolver: noDNS}
	for _, u := range []string{"http://127.0.0.1:8080/hook", "http://localhost/x", "http://10.0.0.1/"} {
		if _, err := allow.CheckURL(ctx, u); err != nil {
			t.Errorf("AllowPrivate: CheckURL(%s) = %v", u, err)
		}
	}
	if _, err := allow.CheckURL(ctx, "gopher://127.0.0.1/"); err == nil {
		t.Errorf("AllowPrivate still refuses other schemes: got nil")
	}
}

// receiver is a real HTTP server on 127.0.0.1 that answers each POST with
// the next of its statuses (the last one from then on) and keeps what it
// got.
type receiver struct {
	*httptest.Server
	mu       sync.Mutex
	statuses []int
	got      []request
	block    chan struct{} // when set, a request waits for it
}

type request struct {
	header http.Header
	body   []byte
}

func newReceiver(t *testing.T, statuses ...int) *receiver {
	r := &receiver{statuses: statuses}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.got = append(r.got, request{req.Header.Clone(), body})
		st := r.statuses[min(len(r.got), len(r.statuses))-1]
		block := r.block
		r.mu.Unlock()
		if block != nil {
			select {
			case <-block:
			case <-req.Context().Done():
			}
		}
		if st == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", "0")
		}
		w.WriteHeader(st)
		_, _ = io.WriteString(w, "answer\n"+http.StatusText(st))
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) requests() []request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]request(nil), r.got...)
}

// sources is a batch that ends when the test says.
type sources struct {
	mu    sync.Mutex
	state svc.BatchState
}

func (s *sources) BatchStatus(_ context.Context, id string) (svc.BatchStatus, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if id != "b1" {
		return svc.BatchStatus{}, svc.UnknownBatch(id)
	}
	return svc.BatchStatus{BatchID: id, Target: "echo", State: s.state, Counts: svc.BatchCounts{Total: 3, Succeeded: 3},
		Callback: &svc.CallbackStatus{URL: "must not be in the body"}}, nil
}

func (s *sources) end() {
	s.mu.Lock()
	s.state = svc.BatchCompleted
	s.mu.Unlock()
}

func (s *sources) RunStatus(_ context.Context, id string) (svc.RunStatus, error) {
	return svc.RunStatus{RunID: id, State: svc.RunCancelled, Reason: "cancelled"}, nil
}

func (s *sources) RunResult(_ context.Context, id string) (json.RawMessage, error) {
	return nil, svc.Errorf(svc.KindRunState, "run %s was cancelled", id)
}

func newSender(t *testing.T, st svc.WebhookStore, cfg webhook.Config) (*webhook.Sender, *sources) {
	t.Helper()
	cfg.Store = st
	if cfg.Key == nil {
		cfg.Key = key
	}
	cfg.AllowPrivate = true
	if cfg.MinBackoff == 0 {
		cfg.MinBackoff = 20 * time.Millisecond
	}
	cfg.Poll = 10 * time.Millisecond
	s, err := webhook.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	src := &sources{state: svc.BatchRunning}
	s.Start(webhook.Sources{Batches: src, Runs: src})
	t.Cleanup(func() { _ = s.Close() })
	return s, src
}

// waitFor polls the delivery log until done says so.
func waitFor(t *testing.T, s *webhook.Sender, kind svc.CallbackKind, id string, done func(*svc.CallbackStatus) bool) *svc.CallbackStatus {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		st := s.Callback(t.Context(), kind, id)
		if st != nil && done(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("delivery log of %s %s: %+v, still not as wanted", kind, id, st)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func terminal(st *svc.CallbackStatus) bool { return st.State.Terminal() }

// A batch's callback waits for the batch, goes out when told it ended,
// is retried after a 500 and delivered on the 200 that follows, signed,
// with its delivery id, the same body each time.
func TestDeliverRetriesUntil2xx(t *testing.T) {
	rcv := newReceiver(t, 500, 200)
	st := memstore.New()
	s, src := newSender(t, st, webhook.Config{})
	ctx := t.Context()
	if err := s.CheckCallback(ctx, rcv.URL+"/hook"); err != nil {
		t.Fatal(err)
	}
	if err := s.ArmCallback(ctx, svc.CallbackBatch, "b1", rcv.URL+"/hook"); err != nil {
		t.Fatal(err)
	}
	if got := s.Callback(ctx, svc.CallbackBatch, "b1"); got == nil || got.State != svc.CallbackWaiting || got.Attempts != 0 {
		t.Fatalf("armed: %+v, want waiting, no attempt", got)
	}
	if got := s.Callback(ctx, svc.CallbackBatch, "other"); got != nil {
		t.Errorf("a batch without a callback has a log: %+v", got)
	}
	s.Ended(svc.CallbackBatch, "b1") // not ended yet: nothing goes out
	time.Sleep(50 * time.Millisecond)
	if n := len(rcv.requests()); n != 0 {
		t.Fatalf("%d POSTs before the batch ended", n)
	}
	src.end()
	s.Ended(svc.CallbackBatch, "b1")
	got := waitFor(t, s, svc.CallbackBatch, "b1", terminal)
	if got.State != svc.CallbackDelivered || got.Attempts != 2 || got.LastStatus != 200 || got.LastError != "" || got.NextAttemptAt != nil {
		t.Fatalf("delivery log %+v, want delivered on attempt 2 with 200", got)
	}
	reqs := rcv.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d POSTs, want 2", len(reqs))
	}
	for i, r := range reqs {
		if err := webhook.Verify(key, r.header.Get(webhook.SignatureHeader), r.body, time.Now(), 0); err != nil {
			t.Errorf("POST %d: signature: %v", i+1, err)
		}
		if r.header.Get(webhook.DeliveryHeader) != "batch:b1" || r.header.Get(webhook.AttemptHeader) != []string{"1", "2"}[i] {
			t.Errorf("POST %d: delivery %q attempt %q", i+1, r.header.Get(webhook.DeliveryHeader), r.header.Get(webhook.AttemptHeader))
		}
		if r.header.Get("Content-Type") != "application/json" {
			t.Errorf("POST %d: Content-Type %q", i+1, r.header.Get("Content-Type"))
		}
	}
	if string(reqs[0].body) != string(reqs[1].body) {
		t.Errorf("the body changed between attempts:\n%s\n%s", reqs[0].body, reqs[1].body)
	}
	var body struct {
		Type  string          `json:"type"`
		ID    string          `json:"id"`
		Batch svc.BatchStatus `json:"batch"`
	}
	if err := json.Unmarshal(reqs[1].body, &body); err != nil {
		t.Fatal(err)
	}
	if body.Type != "batch" || body.ID != "b1" || body.Batch.State != svc.BatchCompleted || body.Batch.Counts.Succeeded != 3 || body.Batch.Callback != nil {
		t.Errorf("body %s: want the batch's final status without its callback log", reqs[1].body)
	}
	// Ended again (a batch resumed elsewhere ending twice): no second send.
	s.Ended(svc.CallbackBatch, "b1")
	time.Sleep(50 * time.Millisecond)
	if n := len(rcv.requests()); n != 2 {
		t.Errorf("%d POSTs after a second Ended, want still 2", n)
	}
}

func TestDeliverOutcomes(t *testing.T) {
	cases := []struct {
		name     string
		statuses []int
		state    svc.CallbackState
		attempts int
		errHas   string
	}{
		{"400 ends it failed", []int{400}, svc.CallbackFailed, 1, "HTTP 400: the receiver refused the callback: answer Bad Request"},
		{"410 ends it failed", []int{410}, svc.CallbackFailed, 1, "HTTP 410"},
		{"302 is not followed", []int{302}, svc.CallbackFailed, 1, "redirects are not followed"},
		{"408 is retried", []int{408, 204}, svc.CallbackDelivered, 2, ""},
		{"429 is retried", []int{429, 429, 200}, svc.CallbackDelivered, 3, ""},
		{"503 is retried", []int{503, 201}, svc.CallbackDelivered, 2, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rcv := newReceiver(t, c.statuses...)
			s, src := newSender(t, memstore.New(), webhook.Config{})
			src.end()
			if err := s.ArmCallback(t.Context(), svc.CallbackBatch, "b1", rcv.URL); err != nil {
				t.Fatal(err)
			}
			s.Ended(svc.CallbackBatch, "b1")
			got := waitFor(t, s, svc.CallbackBatch, "b1", terminal)
			if got.State != c.state || got.Attempts != c.attempts || !strings.Contains(got.LastError, c.errHas) || got.LastStatus != c.statuses[c.attempts-1] {
				t.Errorf("delivery log %+v, want %s after %d attempts, error with %q", got, c.state, c.attempts, c.errHas)
			}
			if n := len(rcv.requests()); n != c.attempts {
				t.Errorf("%d POSTs, want %d", n, c.attempts)
			}
		})
	}
}

// Attempts stop MaxAge after the end, failed, saying so.
func TestDeliverGivesUp(t *testing.T) {
	rcv := newReceiver(t, 500)
	s, src := newSender(t, memstore.New(), webhook.Config{MaxAge: 200 * time.Millisecond, MaxBackoff: 40 * time.Millisecond})
	src.end()
	if err := s.ArmCallback(t.Context(), svc.CallbackBatch, "b1", rcv.URL); err != nil {
		t.Fatal(err)
	}
	s.Ended(svc.CallbackBatch, "b1")
	got := waitFor(t, s, svc.CallbackBatch, "b1", terminal)
	if got.State != svc.CallbackFailed || got.Attempts < 2 || got.LastStatus != 500 || !strings.Contains(got.LastError, "gave up after") {
		t.Errorf("delivery log %+v, want failed after several 500s, saying it gave up", got)
	}
}

// A cancelled run's callback carries its status and a null result.
func TestRunBody(t *testing.T) {
	rcv := newReceiver(t, 200)
	s, _ := newSender(t, memstore.New(), webhook.Config{})
	if err := s.ArmCallback(t.Context(), svc.CallbackRun, "r1", rcv.URL); err != nil {
		t.Fatal(err)
	}
	s.Ended(svc.CallbackRun, "r1")
	waitFor(t, s, svc.CallbackRun, "r1", terminal)
	reqs := rcv.requests()
	if len(reqs) != 1 {
		t.Fatalf("%d POSTs", len(reqs))
	}
	want := `{"type":"run","id":"r1","status":{"run_id":"r1","state":"cancelled","progress":null,"reason":"cancelled"},"result":null}`
	if string(reqs[0].body) != want {
		t.Errorf("body\n got %s\nwant %s", reqs[0].body, want)
	}
}

// A waiting callback that nobody tells about the end finds it at its next
// look (WaitCheck): the batch ended on another node, or while no process
// ran.
func TestWaitingLooksAgain(t *testing.T) {
	rcv := newReceiver(t, 200)
	s, src := newSender(t, memstore.New(), webhook.Config{WaitCheck: 30 * time.Millisecond})
	if err := s.ArmCallback(t.Context(), svc.CallbackBatch, "b1", rcv.URL); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	src.end()
	got := waitFor(t, s, svc.CallbackBatch, "b1", terminal)
	if got.State != svc.CallbackDelivered {
		t.Errorf("%+v, want delivered", got)
	}
	// An armed callback whose batch never came to be (its upload failed)
	// ends failed rather than waiting for ever.
	if err := s.ArmCallback(t.Context(), svc.CallbackBatch, "gone", rcv.URL); err != nil {
		t.Fatal(err)
	}
	got = waitFor(t, s, svc.CallbackBatch, "gone", terminal)
	if got.State != svc.CallbackFailed || !strings.Contains(got.LastError, "unknown batch") || got.Attempts != 0 {
		t.Errorf("%+v, want failed without an attempt: unknown batch", got)
	}
}

// Without a key nothing is accepted.
func TestNoKeyRefuses(t *testing.T) {
	s, err := webhook.New(webhook.Config{Store: memstore.New()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	err = s.CheckCallback(t.Context(), "https://93.184.215.14/")
	if svc.KindOf(err) != svc.KindSpecValidation || !strings.Contains(err.Error(), "--webhook-key-file") {
		t.Errorf("CheckCallback without a key = %v, want a 400 naming --webhook-key-file", err)
	}
}

// The connect-time check: a delivery to a private address that got into
// the queue (a name that resolved to a public address at submit and to
// 127.0.0.1 now: DNS rebinding) is never connected to.
func TestDialGuard(t *testing.T) {
	rcv := newReceiver(t, 200)
	st := memstore.New()
	s, err := webhook.New(webhook.Config{Store: st, Key: key, Poll: 10 * time.Millisecond, MinBackoff: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	src := &sources{state: svc.BatchCompleted}
	s.Start(webhook.Sources{Batches: src})
	if err := s.CheckCallback(t.Context(), rcv.URL); err == nil {
		t.Fatalf("CheckCallback(%s) = nil without AllowPrivate", rcv.URL)
	}
	if err := s.ArmCallback(t.Context(), svc.CallbackBatch, "b1", rcv.URL); err != nil {
		t.Fatal(err)
	}
	s.Ended(svc.CallbackBatch, "b1")
	got := waitFor(t, s, svc.CallbackBatch, "b1", func(c *svc.CallbackStatus) bool { return c.Attempts > 0 })
	if got.State != svc.CallbackPending || got.LastStatus != 0 || !strings.Contains(got.LastError, "request forgery guard") {
		t.Errorf("%+v, want a failed attempt refused by the guard", got)
	}
	if n := len(rcv.requests()); n != 0 {
		t.Errorf("the receiver on 127.0.0.1 got %d requests", n)
	}
}

// A receiver that never answers costs one Timeout an attempt, and Close
// does not wait for it: the attempt is dropped and stays due, uncounted.
func TestStuckReceiver(t *testing.T) {
	rcv := newReceiver(t, 200)
	release := make(chan struct{})
	rcv.block = release
	defer close(release)
	st := memstore.New()
	s, src := newSender(t, st, webhook.Config{Timeout: 150 * time.Millisecond, MinBackoff: time.Hour})
	src.end()
	if err := s.ArmCallback(t.Context(), svc.CallbackBatch, "b1", rcv.URL); err != nil {
		t.Fatal(err)
	}
	s.Ended(svc.CallbackBatch, "b1")
	got := waitFor(t, s, svc.CallbackBatch, "b1", func(c *svc.CallbackStatus) bool { return c.Attempts > 0 })
	if got.State != svc.CallbackPending || !strings.Contains(got.LastError, "no answer within the timeout") {
		t.Errorf("%+v, want pending after a timed-out attempt", got)
	}

	// Now a long timeout, closed while the POST hangs.
	st2 := memstore.New()
	s2, err := webhook.New(webhook.Config{Store: st2, Key: key, AllowPrivate: true, Poll: 10 * time.Millisecond, Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	s2.Start(webhook.Sources{Batches: src})
	if err := s2.ArmCallback(t.Context(), svc.CallbackBatch, "b1", rcv.URL); err != nil {
		t.Fatal(err)
	}
	s2.Ended(svc.CallbackBatch, "b1")
	for len(rcv.requests()) < 2 {
		time.Sleep(5 * time.Millisecond)
	}
	closed := make(chan struct{})
	go func() { _ = s2.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("Close waits for a receiver that never answers")
	}
	d, err := st2.GetWebhook(t.Context(), "batch:b1")
	if err != nil {
		t.Fatal(err)
	}
	if d.State != svc.CallbackPending || d.Attempts != 0 || d.NextAt.After(time.Now()) {
		t.Errorf("after Close mid-attempt: %+v, want pending, uncounted, due now", d)
	}
}

// Many callbacks at once are all delivered, each once.
func TestManyDeliveries(t *testing.T) {
	var n atomic.Int64
	seen := sync.Map{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, dup := seen.LoadOrStore(r.Header.Get(webhook.DeliveryHeader), true); dup {
			t.Errorf("%s sent twice", r.Header.Get(webhook.DeliveryHeader))
		}
		n.Add(1)
	}))
	defer srv.Close()
	st := memstore.New()
	s, err := webhook.New(webhook.Config{Store: st, Key: key, AllowPrivate: true, Poll: 10 * time.Millisecond, WaitCheck: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	runs := &sources{}
	s.Start(webhook.Sources{Runs: runs})
	const total = 200
	for i := range total {
		id := "r" + strings.Repeat("x", i%3) + string(rune('a'+i%26)) + time.Duration(i).String()
		if err := s.ArmCallback(t.Context(), svc.CallbackRun, id, srv.URL); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			s.Ended(svc.CallbackRun, id)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for n.Load() < total && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n.Load() != total {
		t.Errorf("%d delivered, want %d", n.Load(), total)
	}
}
