package client

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	svc "github.com/svc-dev/svc"
)

var _ svc.EventSubscriber = (*Client)(nil)

// remoteHeartbeat is what a Client reports as its HeartbeatInterval: the
// remote server's own interval is not on the wire, and 15 s is svc's
// default.
const remoteHeartbeat = 15 * time.Second

// Subscribe follows the remote server's GET /events/stream with f's
// filters: the Client is an svc.EventSubscriber, so code written against
// the SSE emitter (a router serving /events/stream, a dashboard) works
// against a remote server unchanged. The subscription's channel closes when
// the stream ends (the server went away) or Close is called; there is no
// reconnect (svc status shows how). Dropped reports what the server said it
// dropped for this stream (its ": dropped N" comments).
func (c *Client) Subscribe(ctx context.Context, f svc.EventFilter) (svc.EventSubscription, error) {
	ctx, cancel := context.WithCancel(ctx)
	resp, err := c.openStream(ctx, EventStreamPath(f), 0)
	if err != nil {
		cancel()
		return nil, err
	}
	s := &remoteSub{out: make(chan svc.RuntimeEvent, 64), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		defer close(s.out)
		defer resp.Body.Close()
		_ = readSSEComments(resp.Body, func(comment string) {
			if n, ok := strings.CutPrefix(comment, " dropped "); ok {
				if d, err := strconv.ParseUint(strings.TrimSpace(n), 10, 64); err == nil {
					s.dropped.Store(d)
				}
			}
		}, func(data []byte, _ int64) bool {
			var ev svc.RuntimeEvent
			if json.Unmarshal(data, &ev) != nil || ev.EventType == "" {
				return true
			}
			select {
			case s.out <- ev:
				return true
			case <-ctx.Done():
				return false
			}
		})
	}()
	return s, nil
}

// HeartbeatInterval is svc's default heartbeat: see Subscribe.
func (c *Client) HeartbeatInterval() time.Duration { return remoteHeartbeat }

// remoteSub is a Client's subscription.
type remoteSub struct {
	out     chan svc.RuntimeEvent
	dropped atomic.Uint64
	cancel  context.CancelFunc
	done    chan struct{}
	once    sync.Once
}

func (s *remoteSub) Events() <-chan svc.RuntimeEvent { return s.out }
func (s *remoteSub) Dropped() uint64                 { return s.dropped.Load() }

// Close ends the stream and returns once its reader has stopped.
func (s *remoteSub) Close() error {
	s.once.Do(s.cancel)
	<-s.done
	return nil
}
