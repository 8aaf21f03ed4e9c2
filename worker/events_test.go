package worker_test

import (
	"sync"
	"testing"

	"github.com/svc-dev/svc/fleetwire"
	"github.com/svc-dev/svc/worker"
)

// binder records the worker's binds and whether each is still bound.
type binder struct {
	mu    sync.Mutex
	binds []string // span → subject, in order
	open  int
}

func (b *binder) Bind(span, subject string) func() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.binds = append(b.binds, span+" → "+subject)
	b.open++
	var once sync.Once
	return func() {
		once.Do(func() {
			b.mu.Lock()
			b.open--
			b.mu.Unlock()
		})
	}
}

// TestBindsTheTasksOfPublishersThatAsk: a task with publish_events binds its
// span to its publisher's svc.events.{runtime_id} (from reply_to) while it
// runs and unbinds after; a task without it binds nothing.
func TestBindsTheTasksOfPublishersThatAsk(t *testing.T) {
	b := newBroker(t)
	bd := &binder{}
	startWorker(t, worker.Config{Broker: b, Runner: newRuntime(t), Heartbeat: -1, Events: bd})
	in := newInbox(t, b, "pub-1")

	publishTask(t, b, fleetwire.Envelope{TaskID: "quiet", Agent: "echo", SpanID: "span-quiet", ReplyTo: in.subject})
	if env := in.next(t); env.TaskID != "quiet" || !env.Result.Success {
		t.Fatalf("result %+v", env)
	}
	publishTask(t, b, fleetwire.Envelope{TaskID: "loud", Agent: "echo", SpanID: "span-loud", ReplyTo: in.subject, PublishEvents: true})
	if env := in.next(t); env.TaskID != "loud" || !env.Result.Success {
		t.Fatalf("result %+v", env)
	}
	bd.mu.Lock()
	defer bd.mu.Unlock()
	if len(bd.binds) != 1 || bd.binds[0] != "span-loud → svc.events.pub-1" {
		t.Errorf("binds = %q, want the loud task's span to svc.events.pub-1 only", bd.binds)
	}
	if bd.open != 0 {
		t.Errorf("%d binds still open after the task's result", bd.open)
	}
}
