package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/http/server"
	"github.com/svc-dev/svc/supervisor"
)

// halfDuplexPost sends a streamed gather of n tasks the way Python's
// requests does: the whole body first, over a raw connection, and only
// then reads the answer. It returns the answer's status and body.
func halfDuplexPost(t *testing.T, addr string, n int) (int, []byte) {
	t.Helper()
	var body bytes.Buffer
	for i := range n {
		fmt.Fprintf(&body, `{"input": %d}`+"\n", i)
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Minute))
	fmt.Fprintf(c, "POST /agents/echo/gather?max_concurrency=100 HTTP/1.1\r\nHost: %s\r\nContent-Type: application/x-ndjson\r\n"+
		"Accept: application/x-ndjson\r\nContent-Length: %d\r\n\r\n", addr, body.Len())
	if _, err := c.Write(body.Bytes()); err != nil {
		t.Fatalf("sending the body: %v (the server stopped reading without telling)", err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the answer's body after %d bytes: %v", len(b), err)
	}
	return resp.StatusCode, b
}

// A half-duplex client of 300,000 tasks (whose answer does not fit in the
// sockets' buffers) is not cut off with a reset: it sends its whole body,
// then reads the results the server had and a summary whose error says
// why the batch stopped and points to /batches; the server logs it.
func TestHalfDuplexClientGetsAClearError(t *testing.T) {
	rt, err := supervisor.New(supervisor.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = rt.Shutdown(ctx)
	})
	if err := rt.Register(svc.Agent{Name: "echo", Model: "test:echo"}); err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.WarnLevel)
	h, err := server.NewRouter(rt, server.WithLogger(zap.New(core)), server.WithStreamWriteTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, h)
	const n = 300_000
	status, body := halfDuplexPost(t, strings.TrimPrefix(srv.URL, "http://"), n)
	if status != http.StatusOK {
		t.Fatalf("status %d: %.300s", status, body)
	}
	results, sum := streamLines(t, body)
	if sum.Error == nil || sum.Error.Type != string(svc.KindBadRequest) || sum.Error.Reason != server.ReasonHalfDuplex ||
		!strings.Contains(sum.Error.Message, "POST /batches") {
		t.Fatalf("summary %+v; want a half_duplex error pointing to POST /batches", sum)
	}
	if len(results) == 0 || len(results) >= n || sum.TaskCount != len(results) {
		t.Fatalf("%d results, summary counts %d; want the results sent before the stop", len(results), sum.TaskCount)
	}
	for i, r := range results {
		if !r.Success || string(r.Output) != fmt.Sprint(i) {
			b, _ := json.Marshal(r)
			t.Fatalf("result %d: %s", i, b)
		}
	}
	warned := logs.FilterMessageSnippet("half-duplex").All()
	if len(warned) != 1 {
		t.Fatalf("%d half-duplex warnings logged; want 1: %v", len(warned), logs.All())
	}
	t.Logf("%d results before the stop; logged: %s %v", len(results), warned[0].Message, warned[0].ContextMap())
}

// A full-duplex client of a batch past that size gets every result: the check
// above does not fire for a client that reads.
func TestFullDuplexClientUnaffected(t *testing.T) {
	srv, _ := streamRuntime(t, server.WithStreamWriteTimeout(2*time.Second))
	const n = 30_000 // past where the half-duplex client above stalls (about 13,000)
	pr, pw := io.Pipe()
	go func() {
		bw := bufio.NewWriter(pw)
		for i := range n {
			fmt.Fprintf(bw, `{"input": %d}`+"\n", i)
		}
		_ = bw.Flush()
		_ = pw.Close()
	}()
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/agents/echo/gather?max_concurrency=100", pr)
	req.Header.Set("Content-Type", svc.MediaNDJSON)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	lines := 0
	var last string
	for sc.Scan() {
		lines++
		last = sc.Text()
	}
	var l svc.StreamLine
	if err := json.Unmarshal([]byte(last), &l); err != nil || l.Summary == nil || l.Summary.Error != nil || l.Summary.TaskCount != n {
		t.Fatalf("%d lines, last %s", lines, last)
	}
}
