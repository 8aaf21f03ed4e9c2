package client

import (
	"bufio"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestHandlerTransportStreams checks that the response reaches the caller
// while the handler is still running, as over a socket: what an SSE stream
// needs.
func TestHandlerTransportStreams(t *testing.T) {
	release := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.RequestURI != "/stream?x=1" || r.URL.Host != "" || r.Host != "in-process" || r.RemoteAddr == "" {
			t.Errorf("handler saw URI %q, URL %v, host %q, remote %q", r.RequestURI, r.URL, r.Host, r.RemoteAddr)
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusTeapot)
		io.WriteString(w, "first\n")
		w.(http.Flusher).Flush()
		<-release
		io.WriteString(w, "second\n")
	})
	req, err := http.NewRequestWithContext(t.Context(), "GET", "http://in-process/stream?x=1", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := handlerTransport{h}.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusTeapot || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Errorf("response %d %v", resp.StatusCode, resp.Header)
	}
	rd := bufio.NewReader(resp.Body)
	if line, err := rd.ReadString('\n'); err != nil || line != "first\n" {
		t.Fatalf("first line %q, %v", line, err)
	}
	close(release)
	rest, err := io.ReadAll(rd)
	if err != nil || string(rest) != "second\n" {
		t.Errorf("rest %q, %v", rest, err)
	}
}

// TestHandlerTransportDefaults checks a handler that writes nothing (200,
// empty body) and one that writes without a header (200, sniffed type).
func TestHandlerTransportDefaults(t *testing.T) {
	for _, tc := range []struct {
		name, body, ctype string
	}{
		{"silent", "", ""},
		{"body only", "<html></html>", "text/html; charset=utf-8"},
	} {
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, tc.body) })
		req, _ := http.NewRequestWithContext(t.Context(), "POST", "http://in-process/", strings.NewReader("x"))
		resp, err := handlerTransport{h}.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != tc.body || resp.Header.Get("Content-Type") != tc.ctype {
			t.Errorf("%s: %d %q %q", tc.name, resp.StatusCode, b, resp.Header.Get("Content-Type"))
		}
	}
}
