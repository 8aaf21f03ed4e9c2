package server

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	svc "github.com/svc-dev/svc"
)

// FuzzDecodeSubmitBody checks that any body either decodes to a request
// with a target, an input and a known kind that survives a round trip, or
// is refused with a 400 SpecValidationError; never a panic.
func FuzzDecodeSubmitBody(f *testing.F) {
	for _, s := range []string{
		`{"target":"echo","task":{"input":1}}`,
		`{"target":"split","task":{"input":{"a":1},"request_id":"r"},"kind":"group","request_id":"b"}`,
		`{"target":"echo","task":{"input":1},"kind":"robot"}`,
		`{"target":"","task":{"input":1}}`,
		`{"target":"echo"}`,
		`{"target":"echo","task":null}`,
		`{"target":"echo","task":{"input":null}}`,
		`{"target":"echo","task":{"input":1},"extra":true}`,
		`{"target":7,"task":{"input":1}}`,
		`[]`, ``, `{"target":"echo","task":{"input":1}} {}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		req, envID, err := decodeSubmitBody(data)
		if err != nil {
			if !errors.Is(err, svc.ErrSpecValidation) || StatusOf(err) != http.StatusBadRequest {
				t.Fatalf("error %v (%T) is not a 400 SpecValidationError", err, err)
			}
			return
		}
		if req.Target == "" || len(req.Task.Input) == 0 || string(req.Task.Input) == "null" || !json.Valid(req.Task.Input) {
			t.Fatalf("accepted %+v", req)
		}
		if req.Kind != "" && req.Kind != svc.KindAgent && req.Kind != svc.KindGroup {
			t.Fatalf("accepted kind %q", req.Kind)
		}
		enc, err := json.Marshal(submitEnvelope{Target: req.Target, Task: &wireTask{TaskSpec: req.Task, RequestID: given(req.Task.RequestID)},
			Kind: req.Kind, RequestID: given(envID)})
		if err != nil {
			t.Fatal(err)
		}
		again, envID2, err := decodeSubmitBody(enc)
		if err != nil || again.Target != req.Target || again.Kind != req.Kind || envID2 != envID ||
			again.Task.ID != req.Task.ID || again.Task.RequestID != req.Task.RequestID {
			t.Fatalf("round trip of %s: %+v %q %v; want %+v %q", enc, again, envID2, err, req, envID)
		}
	})
}

// given is id as a request_id a body gives: none when id is "".
func given(id string) *string {
	if id == "" {
		return nil
	}
	return &id
}

// FuzzStreamAfter checks that a resume point is a non-negative number or a
// 400, whatever the header or query holds.
func FuzzStreamAfter(f *testing.F) {
	for _, s := range []string{"", "0", "7", "-1", "x", " 3 ", "99999999999999999999", "1e3"} {
		f.Add(s, true)
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, v string, header bool) {
		r := httptest.NewRequest(http.MethodGet, "/runs/x/stream", nil)
		if header {
			r.Header.Set(LastEventIDHeader, v)
		} else {
			q := r.URL.Query()
			q.Set("after", v)
			r.URL.RawQuery = q.Encode()
		}
		n, err := streamAfter(r)
		if err != nil {
			if StatusOf(err) != http.StatusBadRequest {
				t.Fatalf("streamAfter(%q): %v, not a 400", v, err)
			}
			return
		}
		if n < 0 {
			t.Fatalf("streamAfter(%q) = %d", v, n)
		}
	})
}

// FuzzCheckOrigin checks that any Origin header is either served (absent,
// the server's own, or an allowed one, which alone gets CORS headers) or
// refused with a 403, never a panic.
func FuzzCheckOrigin(f *testing.F) {
	for _, s := range []string{"", "null", "http://127.0.0.1:8420", "HTTP://127.0.0.1:8420", "http://127.0.0.1",
		"https://app.example", "https://app.example:443", "https://app.example/", "https://app.example.evil",
		"http://[::1]:8420", "http://user@app.example", "*", "https://app.example/x?y", "http://%zz"} {
		f.Add(s)
	}
	mw, err := CheckOrigin([]string{"https://app.example"})
	if err != nil {
		f.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	f.Fuzz(func(t *testing.T, origin string) {
		r := httptest.NewRequest(http.MethodPost, "http://127.0.0.1:8420/agents/echo/run", nil)
		r.Header.Set("Origin", origin)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		acao := w.Header().Get("Access-Control-Allow-Origin")
		n, ok := normalOrigin(origin)
		switch {
		case origin == "" || (ok && n == "http://127.0.0.1:8420"):
			if w.Code != http.StatusOK || acao != "" {
				t.Fatalf("origin %q: %d %q, want served without CORS", origin, w.Code, acao)
			}
		case ok && n == "https://app.example:443":
			if w.Code != http.StatusOK || acao != origin {
				t.Fatalf("origin %q: %d %q, want served with CORS", origin, w.Code, acao)
			}
		default:
			if w.Code != http.StatusForbidden || acao != "" {
				t.Fatalf("origin %q: %d %q, want 403", origin, w.Code, acao)
			}
		}
	})
}
