package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/testutil"
	"github.com/svc-dev/svc/webhook"
)

const webhookKey = "a webhook key of more than sixteen bytes"

func writeKey(t *testing.T, key string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "webhook.key")
	if err := os.WriteFile(p, []byte(key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// hookReceiver is a real HTTP receiver on 127.0.0.1: it answers 500 until
// ok is set, then 200, and keeps each POST.
type hookReceiver struct {
	*httptest.Server
	ok   atomic.Bool
	mu   sync.Mutex
	got  []hookPost
	seen atomic.Int64
}

type hookPost struct {
	header http.Header
	body   []byte
	status int
}

func newHookReceiver(t *testing.T) *hookReceiver {
	r := &hookReceiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		st := http.StatusInternalServerError
		if r.ok.Load() {
			st = http.StatusOK
		}
		r.mu.Lock()
		r.got = append(r.got, hookPost{req.Header.Clone(), body, st})
		r.mu.Unlock()
		r.seen.Add(1)
		w.WriteHeader(st)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *hookReceiver) posts() []hookPost {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]hookPost(nil), r.got...)
}

func postJSON(t *testing.T, url, body string) (int, []byte) {
	t.Helper()
	resp, err := httpClient.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := httpClient.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("GET %s: %v in %s", url, err, b)
	}
}

type callbackLog struct {
	URL           string     `json:"url"`
	State         string     `json:"state"`
	Attempts      int        `json:"attempts"`
	LastStatus    int        `json:"last_status"`
	LastError     string     `json:"last_error"`
	NextAttemptAt *time.Time `json:"next_attempt_at"`
}

// A batch's callback that the receiver refused with a 500 is still due
// after serve is SIGKILLed: the next serve on the same SQLite store sends
// it again, and the 200 ends it. A submitted run's callback carries its
// status and result. Both are signed with the key of --webhook-key-file.
func TestWebhookSurvivesKill(t *testing.T) {
	rcv := newHookReceiver(t)
	keyFile := writeKey(t, webhookKey)
	dir := t.TempDir()
	args := []string{"--specs", exampleSpecs, "--data-dir", dir, "--webhook-key-file", keyFile, "--webhook-allow-private"}
	s := startServe(t, nil, args...)

	code, body := postJSON(t, s.url+"/batches", `{"target":"echo","tasks":[{"input":"a"},{"input":"b"}],"callback_url":"`+rcv.URL+`/hook?b=1"}`)
	if code != http.StatusAccepted {
		t.Fatalf("POST /batches: %d %s", code, body)
	}
	var acc struct {
		BatchID string `json:"batch_id"`
	}
	_ = json.Unmarshal(body, &acc)
	var st struct {
		State    string       `json:"state"`
		Callback *callbackLog `json:"callback"`
	}
	testutil.Eventually(t, "the first attempt, answered 500", func() bool {
		st.Callback = nil
		getJSON(t, s.url+"/batches/"+acc.BatchID, &st)
		return st.Callback != nil && st.Callback.Attempts >= 1
	})
	if c := st.Callback; st.State != "completed" || c.State != "pending" || c.LastStatus != 500 || c.NextAttemptAt == nil || c.URL != rcv.URL+"/hook?b=1" {
		t.Fatalf("batch %s, callback %+v: want completed, its callback pending after a 500", st.State, *c)
	}
	s.signal(t, syscall.SIGKILL)
	s.wait(t, 10*time.Second)
	before := rcv.seen.Load()
	rcv.ok.Store(true)

	s2 := startServe(t, nil, args...)
	testutil.Eventually(t, "the callback delivered after the restart", func() bool {
		st.Callback = nil // fields absent from the answer must not stay
		getJSON(t, s2.url+"/batches/"+acc.BatchID, &st)
		return st.Callback != nil && st.Callback.State == "delivered"
	})
	if c := st.Callback; c.LastStatus != 200 || c.Attempts < 2 || c.LastError != "" || c.NextAttemptAt != nil {
		t.Errorf("delivered callback %+v, want 200 after at least 2 attempts", *c)
	}
	if rcv.seen.Load() <= before {
		t.Fatalf("the restarted server sent nothing")
	}
	posts := rcv.posts()
	last := posts[len(posts)-1]
	if last.status != 200 {
		t.Fatalf("last POST answered %d", last.status)
	}
	for _, p := range posts {
		if err := webhook.Verify([]byte(webhookKey), p.header.Get("X-Svc-Signature"), p.body, time.Now(), 0); err != nil {
			t.Errorf("signature: %v (header %q)", err, p.header.Get("X-Svc-Signature"))
		}
		if p.header.Get("X-Svc-Delivery") != "batch:"+acc.BatchID {
			t.Errorf("X-Svc-Delivery %q", p.header.Get("X-Svc-Delivery"))
		}
	}
	var got struct {
		Type  string `json:"type"`
		ID    string `json:"id"`
		Batch struct {
			BatchID string          `json:"batch_id"`
			State   string          `json:"state"`
			Counts  map[string]int  `json:"counts"`
			Other   json.RawMessage `json:"callback"`
		} `json:"batch"`
	}
	if err := json.Unmarshal(last.body, &got); err != nil {
		t.Fatal(err)
	}
	if got.Type != "batch" || got.ID != acc.BatchID || got.Batch.BatchID != acc.BatchID || got.Batch.State != "completed" ||
		got.Batch.Counts["total"] != 2 || got.Batch.Counts["succeeded"] != 2 || got.Batch.Other != nil {
		t.Errorf("body %s: want the completed batch's summary", last.body)
	}

	// A submitted run: its status and result, once.
	code, body = postJSON(t, s2.url+"/submit", `{"target":"echo","task":{"input":"hello"},"callback_url":"`+rcv.URL+`/run"}`)
	if code != http.StatusAccepted {
		t.Fatalf("POST /submit: %d %s", code, body)
	}
	var sub struct {
		RunID string `json:"run_id"`
	}
	_ = json.Unmarshal(body, &sub)
	var rs struct {
		State    string       `json:"state"`
		Callback *callbackLog `json:"callback"`
	}
	testutil.Eventually(t, "the run's callback delivered", func() bool {
		rs.Callback = nil
		getJSON(t, s2.url+"/runs/"+sub.RunID+"/status", &rs)
		return rs.Callback != nil && rs.Callback.State == "delivered"
	})
	var runPost *hookPost
	for _, p := range rcv.posts() {
		if p.header.Get("X-Svc-Delivery") == "run:"+sub.RunID {
			if runPost != nil {
				t.Errorf("the run's callback came twice")
			}
			runPost = &p
		}
	}
	if runPost == nil {
		t.Fatal("no POST for the run")
	}
	var rb struct {
		Type   string `json:"type"`
		Status struct {
			RunID string `json:"run_id"`
			State string `json:"state"`
		} `json:"status"`
		Result struct {
			Success bool   `json:"success"`
			Output  string `json:"output"`
		} `json:"result"`
	}
	if err := json.Unmarshal(runPost.body, &rb); err != nil {
		t.Fatal(err)
	}
	if rb.Type != "run" || rb.Status.RunID != sub.RunID || rb.Status.State != "completed" || !rb.Result.Success || rb.Result.Output != "hello" {
		t.Errorf("run callback body %s", runPost.body)
	}
	if err := webhook.Verify([]byte(webhookKey), runPost.header.Get("X-Svc-Signature"), runPost.body, time.Now(), 0); err != nil {
		t.Errorf("run callback signature: %v", err)
	}

	// svc batch submit --callback-url.
	r := svcExec(t, nil, `{"input": 1}`+"\n", "batch", "submit", "-", "--target", "echo", "--callback-url", rcv.URL+"/cli", "--url", s2.url)
	id := strings.TrimSpace(r.stdout)
	if r.code != 0 || id == "" {
		t.Fatalf("svc batch submit --callback-url: exit %d, %s %s", r.code, r.stdout, r.stderr)
	}
	r = svcExec(t, nil, "", "submit", "echo", "--input", `"cli"`, "--callback-url", rcv.URL+"/cli-run", "--url", s2.url)
	if r.code != 0 {
		t.Fatalf("svc submit --callback-url: exit %d, %s %s", r.code, r.stdout, r.stderr)
	}
	runID := strings.TrimSpace(r.stdout)
	testutil.Eventually(t, "the CLI run's callback delivered", func() bool {
		rs.Callback = nil
		getJSON(t, s2.url+"/runs/"+runID+"/status", &rs)
		return rs.Callback != nil && rs.Callback.State == "delivered" && rs.Callback.URL == rcv.URL+"/cli-run"
	})
	testutil.Eventually(t, "the CLI batch's callback delivered", func() bool {
		st.Callback = nil
		getJSON(t, s2.url+"/batches/"+id, &st)
		return st.Callback != nil && st.Callback.State == "delivered" && st.Callback.URL == rcv.URL+"/cli"
	})
}

// What is refused, at start and at submit, with the reason.
func TestWebhookRefusals(t *testing.T) {
	rcv := newHookReceiver(t)
	problem := func(t *testing.T, code int, body []byte, want string) {
		t.Helper()
		if code != http.StatusBadRequest || !strings.Contains(string(body), want) {
			t.Errorf("answer %d %s, want 400 saying %q", code, body, want)
		}
	}
	t.Run("no key", func(t *testing.T) {
		s := startServe(t, nil, "--specs", exampleSpecs)
		code, body := postJSON(t, s.url+"/batches", `{"target":"echo","tasks":[{"input":"a"}],"callback_url":"https://example.com/hook"}`)
		problem(t, code, body, "--webhook-key-file")
		code, body = postJSON(t, s.url+"/submit", `{"target":"echo","task":{"input":"a"},"callback_url":"https://example.com/hook"}`)
		problem(t, code, body, "--webhook-key-file")
		var page struct {
			Batches []json.RawMessage `json:"batches"`
		}
		getJSON(t, s.url+"/batches", &page)
		if len(page.Batches) != 0 {
			t.Errorf("a refused batch was stored: %d batches", len(page.Batches))
		}
	})
	t.Run("private address", func(t *testing.T) {
		s := startServe(t, nil, "--specs", exampleSpecs, "--webhook-key-file", writeKey(t, webhookKey))
		code, body := postJSON(t, s.url+"/batches", `{"target":"echo","tasks":[{"input":"a"}],"callback_url":"`+rcv.URL+`"}`)
		problem(t, code, body, "server-side request forgery")
		req, _ := http.NewRequest(http.MethodPost, s.url+"/batches?target=echo&callback_url=http://169.254.169.254/latest", strings.NewReader(`{"input":"a"}`+"\n"))
		req.Header.Set("Content-Type", "application/x-ndjson")
		resp, err := httpClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		problem(t, resp.StatusCode, b, "server-side request forgery")
		code, body = postJSON(t, s.url+"/submit", `{"target":"echo","task":{"input":"a"},"callback_url":"http://localhost:1/x"}`)
		problem(t, code, body, "server-side request forgery")
		code, body = postJSON(t, s.url+"/submit", `{"target":"echo","task":{"input":"a"},"callback_url":"ftp://example.com/x"}`)
		problem(t, code, body, "only http and https")
		code, body = postJSON(t, s.url+"/submit", `{"target":"echo","task":{"input":"a"},"callback_url":""}`)
		problem(t, code, body, "callback_url is empty")
		if n := rcv.seen.Load(); n != 0 {
			t.Errorf("the receiver got %d POSTs", n)
		}
	})
	t.Run("key file", func(t *testing.T) {
		missing := filepath.Join(t.TempDir(), "nope.key")
		r := svcExec(t, nil, "", "serve", "--specs", exampleSpecs, "--port", "0", "--data-dir", t.TempDir(), "--webhook-key-file", missing)
		if r.code != 2 || !strings.Contains(r.stderr, missing) {
			t.Errorf("a missing key file: exit %d, stderr %s; want 2 naming the file", r.code, tail(r.stderr, 2000))
		}
		short := writeKey(t, "short")
		r = svcExec(t, nil, "", "serve", "--specs", exampleSpecs, "--port", "0", "--data-dir", t.TempDir(), "--webhook-key-file", short)
		if r.code != 2 || !strings.Contains(r.stderr, short) || !strings.Contains(r.stderr, "at least 16") {
			t.Errorf("a short key: exit %d, stderr %s; want 2 naming the file and the minimum", r.code, tail(r.stderr, 2000))
		}
	})
	t.Run("help", func(t *testing.T) {
		r := svcExec(t, nil, "", "serve", "--help")
		for _, f := range []string{"--webhook-key-file", "--webhook-allow-private"} {
			if !strings.Contains(r.stdout, f) {
				t.Errorf("serve --help does not list %s", f)
			}
		}
	})
}
