package dispatch_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/broker/membroker"
	"github.com/svc-dev/svc/dispatch"
	"github.com/svc-dev/svc/fleetwire"
	"github.com/svc-dev/svc/supervisor"
	"github.com/svc-dev/svc/worker"
)

// keyring builds a keyring from "id:secret,..." (the first signs).
func keyring(t *testing.T, spec string) *fleetwire.Keyring {
	t.Helper()
	k, err := fleetwire.ParseKeyring(spec)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

const (
	oldKey = "old:0123456789abcdef-old"
	newKey = "new:0123456789abcdef-new"
)

// signedWorker starts a worker of echo that signs and verifies with k.
func signedWorker(t *testing.T, b svc.Broker, k *fleetwire.Keyring) *worker.Worker {
	t.Helper()
	rt, err := supervisor.New(supervisor.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Register(svc.Agent{Name: "echo", Model: "test:echo"}); err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(context.Background(), worker.Config{Broker: b, Runner: rt, Heartbeat: -1,
		Keys: k.Keys, SignKeyID: k.SignID, SignKey: k.Keys[k.SignID]})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Shutdown(ctx)
		_ = rt.Shutdown(ctx)
	})
	return w
}

func signedPublisher(t *testing.T, b svc.Broker, k *fleetwire.Keyring) *dispatch.Publisher {
	t.Helper()
	p, err := dispatch.New(context.Background(), dispatch.Config{Broker: b,
		Keys: k.Keys, SignKeyID: k.SignID, SignKey: k.Keys[k.SignID]})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func dispatchEcho(p *dispatch.Publisher, id string, wait time.Duration) (svc.AgentResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	return p.Dispatch(ctx, dispatch.Request{Agent: "echo", TrustLevel: svc.TrustHigh, TaskID: id, TraceID: id,
		RunID: id, Input: json.RawMessage(`{"a":1}`)})
}

// TestKeyRotation walks a fleet through a key rotation (docs/distributed.md,
// "Signing and key rotation"): every process first accepts both keys, the
// signers then move to the new key one by one, and at every step tasks
// and results pass; a process that does not know the key a message was
// signed with refuses it.
func TestKeyRotation(t *testing.T) {
	for _, step := range []struct {
		name        string
		pub, worker string
	}{
		{"before: both on old", oldKey, oldKey},
		{"worker signs new, publisher still old", oldKey + "," + newKey, newKey + "," + oldKey},
		{"publisher signs new, worker still old", newKey + "," + oldKey, oldKey + "," + newKey},
		{"after: both on new", newKey, newKey},
	} {
		t.Run(step.name, func(t *testing.T) {
			b := membroker.New()
			defer b.Close()
			w := signedWorker(t, b, keyring(t, step.worker))
			p := signedPublisher(t, b, keyring(t, step.pub))
			res, err := dispatchEcho(p, "t1", 20*time.Second)
			if err != nil || !res.Success {
				t.Fatalf("dispatch: %+v %v", res, err)
			}
			if n := w.Rejected(); n != 0 {
				t.Errorf("worker rejected %d tasks", n)
			}
		})
	}

	// A worker that was given only the new key refuses tasks signed with
	// the retired one: the task is not run and the publisher times out.
	b := membroker.New()
	defer b.Close()
	w := signedWorker(t, b, keyring(t, newKey))
	p := signedPublisher(t, b, keyring(t, oldKey+","+newKey))
	if res, err := dispatchEcho(p, "retired", time.Second); err == nil {
		t.Fatalf("a task signed with a key the worker does not know ran: %+v", res)
	}
	if n := w.Rejected(); n != 1 {
		t.Errorf("worker rejected %d tasks, want 1", n)
	}

	// Hence the order of a rotation: a signer that moves to the new key
	// before every reader accepts it is refused. Here the publisher knows
	// only the old key and drops the worker's result, signed with the new.
	b2 := membroker.New()
	defer b2.Close()
	w = signedWorker(t, b2, keyring(t, newKey+","+oldKey))
	p = signedPublisher(t, b2, keyring(t, oldKey))
	if res, err := dispatchEcho(p, "early", time.Second); err == nil {
		t.Fatalf("a result signed with a key the publisher does not know was taken: %+v", res)
	}
	if n := w.Rejected(); n != 0 {
		t.Errorf("worker rejected %d tasks, want none (it accepts the old key)", n)
	}
}
