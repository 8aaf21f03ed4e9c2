package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	svc "github.com/svc-dev/svc"
)

// Local is the in-process client. Over a backend (the runtime, typically)
// it calls it directly; over an http.Handler (a router or a standalone
// server's handler) it sends real HTTP requests through the handler's
// ServeHTTP, so the handler's middleware, decoding and error mapping all
// apply, without a listener. It implements svc.Backend.
type Local struct {
	b svc.Backend
	// hc is the HTTP client over the handler; nil over a backend.
	hc *Client
	// events and sub serve the observation calls over a backend.
	events svc.EventReader
	sub    svc.EventSubscriber
}

var _ svc.Backend = (*Local)(nil)

// LocalOption configures NewLocal.
type LocalOption func(*localConfig)

type localConfig struct {
	events     svc.EventReader
	sub        svc.EventSubscriber
	backend    svc.Backend
	handler    http.Handler
	hasBackend bool
	hasHandler bool
}

// OverBackend makes the Local client call b directly.
func OverBackend(b svc.Backend) LocalOption {
	return func(c *localConfig) { c.backend, c.hasBackend = b, true }
}

// OverHandler makes the Local client send its calls through h, in process.
func OverHandler(h http.Handler) LocalOption {
	return func(c *localConfig) { c.handler, c.hasHandler = h, true }
}

// WithEventReader gives a Local client over a backend the event store its
// Usage, RuntimeStats and ToolUsage read (over a handler, the handler's
// routes answer them).
func WithEventReader(r svc.EventReader) LocalOption {
	return func(c *localConfig) { c.events = r }
}

// WithSubscriber gives a Local client over a backend the SSE emitter its
// StreamEvents subscribes to.
func WithSubscriber(s svc.EventSubscriber) LocalOption {
	return func(c *localConfig) { c.sub = s }
}

// NewLocal returns an in-process client over exactly one of OverBackend and
// OverHandler. Over a handler, calls have no timeout of their own: they
// end with the caller's context or the handler.
func NewLocal(opts ...LocalOption) (*Local, error) {
	var c localConfig
	for _, o := range opts {
		o(&c)
	}
	switch {
	case c.hasBackend == c.hasHandler:
		return nil, errors.New("client: give a backend or a handler, not both")
	case c.hasBackend && c.backend == nil:
		return nil, errors.New("client: OverBackend: nil backend")
	case c.hasHandler && c.handler == nil:
		return nil, errors.New("client: OverHandler: nil handler")
	case c.hasBackend:
		return &Local{b: c.backend, events: c.events, sub: c.sub}, nil
	case c.events != nil || c.sub != nil:
		return nil, errors.New("client: WithEventReader and WithSubscriber apply over a backend; over a handler its routes answer")
	}
	hc, err := New("http://in-process", WithTransport(handlerTransport{c.handler}), WithTimeout(0))
	if err != nil {
		return nil, err
	}
	return &Local{b: hc, hc: hc}, nil
}

// Agents implements svc.Backend.
func (l *Local) Agents(ctx context.Context) ([]string, error) { return l.b.Agents(ctx) }

// AgentSchema implements svc.Backend.
func (l *Local) AgentSchema(ctx context.Context, name string) (svc.AgentSchema, error) {
	return l.b.AgentSchema(ctx, name)
}

// Run implements svc.Backend.
func (l *Local) Run(ctx context.Context, agent string, task svc.TaskSpec) (svc.AgentResult, error) {
	return l.b.Run(ctx, agent, task)
}

// Gather implements svc.Backend.
func (l *Local) Gather(ctx context.Context, agent string, tasks []svc.TaskSpec, maxConcurrency int) ([]svc.AgentResult, error) {
	return l.b.Gather(ctx, agent, tasks, maxConcurrency)
}

// Ready implements svc.Backend.
func (l *Local) Ready(ctx context.Context) error { return l.b.Ready(ctx) }

// Close does nothing: the backend or handler belongs to the caller, who
// shuts it down.
func (l *Local) Close() error { return nil }

// handlerTransport is an http.RoundTripper that serves each request with a
// handler in a goroutine of this process. The response is streamed through
// a pipe, so it arrives as soon as the handler writes its header, and a
// response the handler keeps open (an SSE stream) works as over a socket.
type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	sreq := req.Clone(ctx)
	// What net/http's server would have given the handler.
	sreq.URL = &url.URL{Path: req.URL.Path, RawPath: req.URL.RawPath, RawQuery: req.URL.RawQuery}
	sreq.RequestURI = req.URL.RequestURI()
	sreq.Proto, sreq.ProtoMajor, sreq.ProtoMinor = "HTTP/1.1", 1, 1
	sreq.RemoteAddr = "in-process:0"
	if sreq.Host == "" {
		sreq.Host = req.URL.Host
	}
	if sreq.Body == nil {
		sreq.Body = http.NoBody
	}

	pr, pw := io.Pipe()
	// As over a socket, the end of ctx also ends a body still being read.
	stop := context.AfterFunc(ctx, func() { pr.CloseWithError(ctx.Err()) })
	body := &pipeBody{PipeReader: pr, stop: stop}
	w := &pipeWriter{header: http.Header{}, pw: pw, body: body, req: req, respc: make(chan *http.Response, 1)}
	errc := make(chan error, 1)
	go func() {
		defer func() {
			if req.Body != nil {
				req.Body.Close()
			}
			if v := recover(); v != nil {
				err := fmt.Errorf("client: in-process handler panicked: %v", v)
				if v == http.ErrAbortHandler {
					err = errors.New("client: in-process handler aborted the response")
				}
				if !w.wroteHeader {
					errc <- err
				}
				pw.CloseWithError(err)
				return
			}
			w.commit(http.StatusOK)
			pw.Close()
		}()
		t.h.ServeHTTP(w, sreq)
	}()
	select {
	case resp := <-w.respc:
		return resp, nil
	case err := <-errc:
		body.Close()
		return nil, err
	case <-ctx.Done():
		// The AfterFunc has closed the pipe, which fails the handler's
		// writes; the handler ends with ctx.
		return nil, ctx.Err()
	}
}

// pipeBody is the response body: the pipe's read end, which also
// unregisters the context watch when closed.
type pipeBody struct {
	*io.PipeReader
	stop func() bool
}

func (b *pipeBody) Close() error {
	b.stop()
	return b.PipeReader.Close()
}

// pipeWriter is the handler's side of handlerTransport: the header goes out
// as an *http.Response on respc, the body through the pipe.
type pipeWriter struct {
	header      http.Header
	pw          *io.PipeWriter
	body        io.ReadCloser
	req         *http.Request
	respc       chan *http.Response
	wroteHeader bool
}

func (w *pipeWriter) Header() http.Header { return w.header }

func (w *pipeWriter) WriteHeader(code int) {
	if code >= 100 && code <= 199 {
		// Informational responses are not what the client waits for.
		return
	}
	w.commit(code)
}

// commit sends the response header, once.
func (w *pipeWriter) commit(code int) {
	if w.wroteHeader {
		return
	}
	w.wroteHeader = true
	h := w.header.Clone()
	n := int64(-1)
	if cl, err := strconv.ParseInt(h.Get("Content-Length"), 10, 64); err == nil && cl >= 0 {
		n = cl
	}
	w.respc <- &http.Response{
		Status:        strconv.Itoa(code) + " " + http.StatusText(code),
		StatusCode:    code,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        h,
		Body:          w.body,
		ContentLength: n,
		Request:       w.req,
	}
}

func (w *pipeWriter) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		if w.header.Get("Content-Type") == "" && len(p) > 0 {
			w.header.Set("Content-Type", http.DetectContentType(p))
		}
		w.commit(http.StatusOK)
	}
	return w.pw.Write(p)
}

// Flush sends the header if it has not gone yet; the body needs no
// flushing, since every Write reaches the reader directly.
func (w *pipeWriter) Flush() { w.commit(http.StatusOK) }

var _ svc.RunDeltaStreamer = (*Local)(nil)

// RunEventsWithDeltas implements svc.RunDeltaStreamer: the backend's when
// it follows deltas (the runtime, a Client over a handler), else its
// RunEvents, which has none to give.
func (l *Local) RunEventsWithDeltas(ctx context.Context, runID string, after int64) (<-chan svc.RunEvent, error) {
	rb, err := l.runBackend()
	if err != nil {
		return nil, err
	}
	if ds, ok := rb.(svc.RunDeltaStreamer); ok {
		return ds.RunEventsWithDeltas(ctx, runID, after)
	}
	return rb.RunEvents(ctx, runID, after)
}
