package server

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	svc "github.com/svc-dev/svc"
)

// DefaultReadTimeout is how long svc serve waits for a request's body
// (BodyDeadline).
const DefaultReadTimeout = 30 * time.Second

// BodyDeadline gives a request's body d to arrive: a client that sends it
// slower (a byte every few seconds), or sends less than its Content-Length
// and waits, is answered 408 RequestTimeoutError when d is over and its
// connection closed, instead of holding a descriptor and a goroutine for
// as long as it likes. The deadline ends with the body: once a handler
// has read it all, the run it starts may take minutes, and a request
// without a body (the event streams, a status poll) has none at all. That
// is why this is not http.Server.ReadTimeout, which stays on the
// connection after the body and, when it expires while a handler runs,
// cancels the request's context. The streamed gather, whose body is a
// stream of tasks, renews the deadline before each task (d between two
// tasks, not for the whole stream).
func BodyDeadline(d time.Duration) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
				next.ServeHTTP(w, r)
				return
			}
			rc := http.NewResponseController(w)
			if err := rc.SetReadDeadline(time.Now().Add(d)); err != nil {
				// Not a connection net/http serves (a test recorder, a
				// host's HTTP/2 handler): nothing to bound here.
				next.ServeHTTP(w, r)
				return
			}
			r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc, d: d}
			next.ServeHTTP(w, r)
		})
	}
}

// deadlineBody is a request body read under a deadline that ends when
// the body does.
type deadlineBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	d    time.Duration
	done atomic.Bool // read to its end: the deadline is lifted
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	switch {
	case err == io.EOF:
		if b.done.CompareAndSwap(false, true) {
			_ = b.rc.SetReadDeadline(time.Time{})
		}
	case err != nil && errors.Is(err, os.ErrDeadlineExceeded) && !b.done.Load():
		err = &svc.Error{Kind: svc.KindRequestTimeout, Err: err,
			Message: fmt.Sprintf("the request body did not arrive within %s (svc serve --read-timeout)", b.d)}
	}
	return n, err
}

// renew gives the rest of the body d more from now: the streamed gather
// calls it before each task it reads.
func (b *deadlineBody) renew() {
	if !b.done.Load() {
		_ = b.rc.SetReadDeadline(time.Now().Add(b.d))
	}
}

// renewBodyDeadline renews body's deadline when it has one (BodyDeadline).
func renewBodyDeadline(body io.Reader) {
	if b, ok := body.(*deadlineBody); ok {
		b.renew()
	}
}
