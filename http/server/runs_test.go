package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/http/internal/runstest"
	"github.com/svc-dev/svc/http/server"
)

// newRunRouter serves a router over a fresh runstest.Runs, with a 50 ms
// heartbeat, mounted at prefix ("" for the root).
func newRunRouter(t *testing.T, prefix string) (*httptest.Server, *runstest.Runs) {
	t.Helper()
	f := runstest.New(t, &fakeBackend{})
	rt, err := server.NewRouter(f, server.WithHeartbeat(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if prefix == "" {
		return serve(t, rt), f
	}
	mux := chi.NewRouter()
	mux.Mount(prefix, rt)
	return serve(t, mux), f
}

// submit posts body to /submit under prefix and returns the run id.
func submit(t *testing.T, srv *httptest.Server, prefix, body string, hdr ...string) (string, reply) {
	t.Helper()
	r := do(t, srv, http.MethodPost, prefix+"/submit", body, hdr...)
	if r.status != http.StatusAccepted {
		t.Fatalf("POST /submit %s = %d %s", body, r.status, r.body)
	}
	var out map[string]string
	if err := json.Unmarshal(r.body, &out); err != nil || out["run_id"] == "" || len(out) != 1 {
		t.Fatalf("submit reply %s: want {\"run_id\": ...} (%v)", r.body, err)
	}
	return out["run_id"], r
}

// waitState polls the status route until the run is terminal.
func waitState(t *testing.T, srv *httptest.Server, prefix, id string) svc.RunStatus {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := do(t, srv, http.MethodGet, prefix+"/runs/"+id+"/status", "")
		var st svc.RunStatus
		if r.status != http.StatusOK || json.Unmarshal(r.body, &st) != nil {
			t.Fatalf("status = %d %s", r.status, r.body)
		}
		if st.State.Terminal() {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s still %s", id, st.State)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestRunRoutesAbsent(t *testing.T) {
	srv, _ := newRouter(t)
	for _, rt := range []struct{ method, path string }{
		{http.MethodPost, "/submit"},
		{http.MethodGet, "/runs/x/status"},
		{http.MethodGet, "/runs/x/result"},
		{http.MethodPost, "/runs/x/cancel"},
		{http.MethodGet, "/runs/x/stream"},
	} {
		r := do(t, srv, rt.method, rt.path, `{"target":"echo","task":{"input":1}}`)
		problem(t, r, http.StatusNotFound)
	}
}

func TestSubmit(t *testing.T) {
	for _, prefix := range []string{"", "/svc", "/a/b"} {
		t.Run("prefix "+prefix, func(t *testing.T) {
			srv, _ := newRunRouter(t, prefix)
			id, r := submit(t, srv, prefix, `{"target":"echo","task":{"input":{"x":1}}}`)
			if loc := r.header.Get("Location"); loc != prefix+"/runs/"+id+"/status" {
				t.Errorf("Location = %q, want %q", loc, prefix+"/runs/"+id+"/status")
			}
			if ct := r.header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type = %q", ct)
			}
			// The Location works as given.
			st := do(t, srv, http.MethodGet, r.header.Get("Location"), "")
			if st.status != http.StatusOK || !strings.Contains(string(st.body), id) {
				t.Errorf("GET Location = %d %s", st.status, st.body)
			}
		})
	}
}

func TestSubmitRejections(t *testing.T) {
	srv, _ := newRunRouter(t, "")
	for _, tc := range []struct {
		name, body string
		status     int
		kind       svc.Kind
	}{
		{"unknown field", `{"target":"echo","task":{"input":1},"extra":1}`, 400, svc.KindSpecValidation},
		{"unknown task field", `{"target":"echo","task":{"input":1,"inptu":2}}`, 400, svc.KindSpecValidation},
		{"no target", `{"task":{"input":1}}`, 400, svc.KindSpecValidation},
		{"no task", `{"target":"echo"}`, 400, svc.KindSpecValidation},
		{"no input", `{"target":"echo","task":{}}`, 400, svc.KindSpecValidation},
		{"bad kind", `{"target":"echo","task":{"input":1},"kind":"robot"}`, 400, svc.KindSpecValidation},
		{"not an object", `[1]`, 400, svc.KindSpecValidation},
		{"malformed", `{"target":`, 400, svc.KindSpecValidation},
		{"unknown target", `{"target":"nope","task":{"input":1}}`, 404, svc.KindRegistry},
		{"agent is no group", `{"target":"echo","task":{"input":1},"kind":"group"}`, 404, svc.KindRegistry},
		// "err" is both an agent and a group of the fake.
		{"ambiguous", `{"target":"err","task":{"input":1}}`, 400, svc.KindSpecValidation},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := problem(t, do(t, srv, http.MethodPost, "/submit", tc.body), tc.status)
			if p.Error != string(tc.kind) {
				t.Errorf("error = %q, want %q (%s)", p.Error, tc.kind, p.Detail)
			}
		})
	}
	// With a kind, the name is no longer ambiguous.
	submit(t, srv, "", `{"target":"err","task":{"input":"SpecValidationError"},"kind":"agent"}`)
}

// TestSubmitTraceID: task.request_id, then the body's request_id, then
// X-Request-Id, then a new id; echoed in the response header and carried
// into the run (the echo result's trace id).
func TestSubmitTraceID(t *testing.T) {
	srv, _ := newRunRouter(t, "")
	for _, tc := range []struct {
		name, body, header, want string
	}{
		{"task", `{"target":"echo","task":{"input":1,"request_id":"from-task"},"request_id":"from-body"}`, "from-header", "from-task"},
		{"body", `{"target":"echo","task":{"input":1},"request_id":"from-body"}`, "from-header", "from-body"},
		{"header", `{"target":"echo","task":{"input":1}}`, "from-header", "from-header"},
		{"new", `{"target":"echo","task":{"input":1}}`, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var hdr []string
			if tc.header != "" {
				hdr = []string{server.RequestIDHeader, tc.header}
			}
			id, r := submit(t, srv, "", tc.body, hdr...)
			got := r.header.Get(server.RequestIDHeader)
			if tc.want != "" && got != tc.want || tc.want == "" && !server.ValidRequestID(got) {
				t.Errorf("X-Request-Id = %q, want %q", got, tc.want)
			}
			waitState(t, srv, "", id)
			res := do(t, srv, http.MethodGet, "/runs/"+id+"/result", "")
			var ar svc.AgentResult
			if err := json.Unmarshal(res.body, &ar); err != nil || ar.Metadata.TraceID != got {
				t.Errorf("result trace_id = %q (%v), want %q", ar.Metadata.TraceID, err, got)
			}
		})
	}
}

func TestRunStatusAndResult(t *testing.T) {
	srv, f := newRunRouter(t, "")
	f.Hold = make(chan struct{})
	id, _ := submit(t, srv, "", `{"target":"echo","task":{"input":{"k":"v"}}}`)

	r := do(t, srv, http.MethodGet, "/runs/"+id+"/status", "")
	var pending struct {
		TraceID string `json:"trace_id"`
	}
	_ = json.Unmarshal(r.body, &pending)
	if r.status != http.StatusOK || pending.TraceID == "" ||
		string(r.body) != `{"run_id":"`+id+`","state":"pending","progress":null,"trace_id":"`+pending.TraceID+`"}`+"\n" {
		t.Errorf("status of a pending run = %d %s; want progress null and the trace id", r.status, r.body)
	}
	p := problem(t, do(t, srv, http.MethodGet, "/runs/"+id+"/result", ""), http.StatusConflict)
	if p.Error != string(svc.KindRunState) {
		t.Errorf("result of a pending run: error %q, want RunStateError", p.Error)
	}
	f.SetProgress(t, id, svc.RunProgress{Total: 3, Completed: 1, Running: 2})
	r = do(t, srv, http.MethodGet, "/runs/"+id+"/status", "")
	if !strings.Contains(string(r.body), `"progress":{"total":3,"completed":1,"failed":0,"running":2}`) {
		t.Errorf("status with progress = %s", r.body)
	}

	close(f.Hold)
	if st := waitState(t, srv, "", id); st.State != svc.RunCompleted {
		t.Fatalf("state = %s", st.State)
	}
	rec, err := f.Store.Get(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	r = do(t, srv, http.MethodGet, "/runs/"+id+"/result", "")
	if r.status != http.StatusOK || r.header.Get("Content-Type") != "application/json" {
		t.Errorf("result = %d %q", r.status, r.header.Get("Content-Type"))
	}
	if string(r.body) != string(rec.Result) {
		t.Errorf("result body %s is not the stored %s verbatim", r.body, rec.Result)
	}

	problem(t, do(t, srv, http.MethodGet, "/runs/nope/status", ""), http.StatusNotFound)
	problem(t, do(t, srv, http.MethodGet, "/runs/nope/result", ""), http.StatusNotFound)
}

func TestCancelRoute(t *testing.T) {
	srv, f := newRunRouter(t, "")
	f.Hold = make(chan struct{})
	id, _ := submit(t, srv, "", `{"target":"slow","task":{"input":1}}`)
	for range 2 { // idempotent
		r := do(t, srv, http.MethodPost, "/runs/"+id+"/cancel", "")
		if r.status != http.StatusNoContent || len(r.body) != 0 {
			t.Errorf("cancel = %d %q, want 204 without a body", r.status, r.body)
		}
	}
	if st := waitState(t, srv, "", id); st.State != svc.RunCancelled {
		t.Errorf("state after cancel = %s", st.State)
	}
	p := problem(t, do(t, srv, http.MethodGet, "/runs/"+id+"/result", ""), http.StatusConflict)
	if p.Error != string(svc.KindRunState) {
		t.Errorf("result of a cancelled run: %q", p.Error)
	}
	problem(t, do(t, srv, http.MethodPost, "/runs/nope/cancel", ""), http.StatusNotFound)
	// The cancel route takes POST only.
	problem(t, do(t, srv, http.MethodGet, "/runs/"+id+"/cancel", ""), http.StatusMethodNotAllowed)
}

// sseFrame is one frame as read off the wire.
type sseFrame struct {
	id, event, data string
	comment         bool
}

// openStream GETs a run stream and returns the response; the caller reads
// frames with nextFrame.
func openStream(t *testing.T, ctx context.Context, srv *httptest.Server, path string, hdr ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// nextFrame reads one frame (lines up to a blank line); ok is false at the
// end of the stream.
func nextFrame(t *testing.T, br *bufio.Reader) (sseFrame, bool) {
	t.Helper()
	var f sseFrame
	lines := 0
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			if line != "" || lines != 0 {
				t.Fatalf("stream ended inside a frame: %q", line)
			}
			return f, false
		}
		line = strings.TrimSuffix(line, "\n")
		if line == "" {
			return f, true
		}
		lines++
		switch {
		case line == ": ping":
			f.comment = true
		case strings.HasPrefix(line, "id: "):
			f.id = line[4:]
		case strings.HasPrefix(line, "event: "):
			f.event = line[7:]
		case strings.HasPrefix(line, "data: "):
			f.data = line[6:]
		default:
			t.Fatalf("unexpected line %q", line)
		}
	}
}

// readAll reads a stream to its end, skipping heartbeats.
func readAll(t *testing.T, resp *http.Response) []sseFrame {
	t.Helper()
	br := bufio.NewReader(resp.Body)
	var out []sseFrame
	for {
		f, ok := nextFrame(t, br)
		if !ok {
			return out
		}
		if !f.comment {
			out = append(out, f)
		}
	}
}

func TestStream(t *testing.T) {
	srv, _ := newRunRouter(t, "/svc")
	id, _ := submit(t, srv, "/svc", `{"target":"echo","task":{"id":"t1","input":1}}`)
	waitState(t, srv, "/svc", id)

	resp := openStream(t, t.Context(), srv, "/svc/runs/"+id+"/stream")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream = %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	frames := readAll(t, resp)
	if len(frames) != 2 {
		t.Fatalf("frames = %+v, want agent_started and agent_completed", frames)
	}
	for i, f := range frames {
		var ev svc.RunEvent
		if err := json.Unmarshal([]byte(f.data), &ev); err != nil {
			t.Fatalf("frame %d data %q: %v", i, f.data, err)
		}
		if f.id != strconv.FormatInt(ev.Seq, 10) || ev.Seq != int64(i+1) || f.event != string(ev.Type) || ev.RunID != id || ev.TaskID != "t1" {
			t.Errorf("frame %d = %+v; want id = seq = %d, event = type", i, f, i+1)
		}
		// Empty agent fields are null on the wire, not "".
		if !strings.Contains(f.data, `"error":null`) {
			t.Errorf("frame %d data %s: want error null", i, f.data)
		}
	}
	if frames[0].event != "agent_started" || frames[1].event != "agent_completed" {
		t.Errorf("events = %s, %s", frames[0].event, frames[1].event)
	}

	for _, resume := range [][]string{{"Last-Event-ID", "1"}, {"X-Ignored", ""}} {
		path := "/svc/runs/" + id + "/stream"
		if resume[0] == "X-Ignored" {
			path += "?after=1"
		}
		rest := readAll(t, openStream(t, t.Context(), srv, path, resume...))
		if len(rest) != 1 || rest[0].id != "2" {
			t.Errorf("resumed after 1 (%v) = %+v, want frame 2 only", resume, rest)
		}
	}
	// The header wins over the query.
	rest := readAll(t, openStream(t, t.Context(), srv, "/svc/runs/"+id+"/stream?after=0", "Last-Event-ID", "2"))
	if len(rest) != 0 {
		t.Errorf("after Last-Event-ID 2 = %+v, want nothing", rest)
	}
}

func TestStreamRejections(t *testing.T) {
	srv, _ := newRunRouter(t, "")
	id, _ := submit(t, srv, "", `{"target":"echo","task":{"input":1}}`)
	for _, tc := range []struct {
		name, path string
		hdr        []string
		status     int
	}{
		{"unknown run", "/runs/nope/stream", nil, 404},
		{"bad Last-Event-ID", "/runs/" + id + "/stream", []string{"Last-Event-ID", "x"}, 400},
		{"negative after", "/runs/" + id + "/stream?after=-1", nil, 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := do(t, srv, http.MethodGet, tc.path, "", tc.hdr...)
			problem(t, r, tc.status)
		})
	}
}

// TestStreamLive follows a held run: heartbeats while idle, then the
// frames as they happen, then the end of the stream.
func TestStreamLive(t *testing.T) {
	srv, f := newRunRouter(t, "")
	f.Hold = make(chan struct{})
	id, _ := submit(t, srv, "", `{"target":"slow","task":{"input":1}}`)
	resp := openStream(t, t.Context(), srv, "/runs/"+id+"/stream")
	br := bufio.NewReader(resp.Body)
	for range 2 {
		fr, ok := nextFrame(t, br)
		if !ok || !fr.comment || fr.data != "" {
			t.Fatalf("frame on an idle stream = %+v, %v; want the heartbeat", fr, ok)
		}
	}
	close(f.Hold)
	var events []string
	for {
		fr, ok := nextFrame(t, br)
		if !ok {
			break
		}
		if fr.comment {
			continue
		}
		events = append(events, fr.event)
		if fr.event == "agent_started" {
			// slow blocks until cancelled.
			if r := do(t, srv, http.MethodPost, "/runs/"+id+"/cancel", ""); r.status != http.StatusNoContent {
				t.Fatalf("cancel = %d", r.status)
			}
		}
	}
	if strings.Join(events, ",") != "agent_started,run_cancelled" {
		t.Errorf("live events = %v, want agent_started then run_cancelled, then the end", events)
	}
}

// TestStreamClientGone: a client that goes away ends the handler (the
// server's Close would otherwise wait for it, and goleak would see it).
func TestStreamClientGone(t *testing.T) {
	srv, f := newRunRouter(t, "")
	f.Hold = make(chan struct{})
	id, _ := submit(t, srv, "", `{"target":"slow","task":{"input":1}}`)
	ctx, cancel := context.WithCancel(t.Context())
	resp := openStream(t, ctx, srv, "/runs/"+id+"/stream")
	if _, ok := nextFrame(t, bufio.NewReader(resp.Body)); !ok {
		t.Fatal("no heartbeat")
	}
	cancel()
	done := make(chan struct{})
	go func() { srv.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the stream handler outlived its client")
	}
}

func TestWithHeartbeat(t *testing.T) {
	for _, d := range []time.Duration{0, -time.Second} {
		if _, err := server.NewRouter(&fakeBackend{}, server.WithHeartbeat(d)); err == nil {
			t.Errorf("WithHeartbeat(%v) accepted", d)
		}
	}
}
