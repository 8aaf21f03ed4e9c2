package sse

import (
	"time"

	svc "github.com/svc-dev/svc"
)

// EncodedReader (for the tests of both packages) reads a SubscribeEncoded
// subscription as the HTTP server's event stream does: Next until nil,
// then wait for Notify's call.
type EncodedReader struct {
	S     svc.EncodedEventSubscription
	ready chan struct{}
}

// NewEncodedReader sets s's Notify to wake the reader.
func NewEncodedReader(s svc.EncodedEventSubscription) *EncodedReader {
	r := &EncodedReader{S: s, ready: make(chan struct{}, 1)}
	s.Notify(func() {
		select {
		case r.ready <- struct{}{}:
		default:
		}
	})
	return r
}

// Next is the next event, waiting up to d; false when the subscription
// has ended or nothing came.
func (r *EncodedReader) Next(d time.Duration) (*svc.EncodedEvent, bool) {
	timeout := time.After(d)
	for {
		ev, ended := r.S.Next()
		if ev != nil {
			return ev, true
		}
		if ended {
			return nil, false
		}
		select {
		case <-r.ready:
		case <-timeout:
			return nil, false
		}
	}
}
