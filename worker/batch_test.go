package worker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/fleetwire"
	"github.com/svc-dev/svc/worker"
)

// TestSignedBatch: a signed batch's tasks each run and come back as
// results, many to a message, signed; a batch with one byte changed is
// refused whole (counted in Rejected) and answers nothing, its reply
// subject not trusted.
func TestSignedBatch(t *testing.T) {
	b := newBroker(t)
	key := []byte("0123456789abcdef")
	keys := map[string][]byte{"k1": key}
	w := startWorker(t, worker.Config{Broker: b, Runner: newRuntime(t), Heartbeat: -1, Concurrency: 4, Keys: keys, SignKeyID: "k1", SignKey: key})
	// The publisher's inbox, raw: results come as batches.
	inbox := fleetwire.ResultSubject("pub")
	got := make(chan []byte, 16)
	sub, err := b.Subscribe(context.Background(), inbox, svc.SubscribeOptions{Prefetch: 16}, func(ctx context.Context, d *svc.Delivery) {
		_ = d.Ack(ctx)
		got <- d.Data
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Stop() })
	batch := func(prefix string, n int) []byte {
		bw := fleetwire.NewBatchWriter(fleetwire.MsgTasks, "echo", inbox, "")
		for i := range n {
			item, err := fleetwire.EncodeItem(fleetwire.MsgTasks, &fleetwire.Envelope{TaskID: fmt.Sprint(prefix, i), SpanID: fmt.Sprint("s-", prefix, i),
				Attempt: 1, Agent: "echo", ReplyTo: inbox, Input: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))})
			if err != nil {
				t.Fatal(err)
			}
			bw.Add(item)
		}
		data, err := bw.Seal("k1", key)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	tampered := bytes.Replace(batch("bad-", 3), []byte(`{"n":2}`), []byte(`{"n":3}`), 1) // still JSON, not what was signed
	for _, data := range [][]byte{tampered, batch("t", 10)} {
		if err := b.Publish(context.Background(), fleetwire.TaskSubject("echo"), data); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]bool{}
	deadline := time.After(wait)
	for len(seen) < 10 {
		select {
		case data := <-got:
			rb, err := fleetwire.DecodeBatch(data)
			if err != nil {
				t.Fatalf("a result message that is not a batch: %s (%v)", data, err)
			}
			if err := rb.Verify(keys); err != nil {
				t.Fatalf("results signature: %v", err)
			}
			envs, err := rb.Envelopes()
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range envs {
				var i int
				if _, err := fmt.Sscanf(e.TaskID, "t%d", &i); err != nil || !e.Result.Success || string(e.Result.Output) != fmt.Sprintf(`{"n":%d}`, i) ||
					e.SpanID != "s-"+e.TaskID || e.Attempt != 1 || e.RuntimeID != w.RuntimeID() || e.Delivery != 1 {
					t.Fatalf("result %+v (%+v)", e, e.Result)
				}
				if seen[e.TaskID] {
					t.Fatalf("two results for %s", e.TaskID)
				}
				seen[e.TaskID] = true
			}
		case <-deadline:
			t.Fatalf("%d results of 10", len(seen))
		}
	}
	if n := w.Rejected(); n != 1 {
		t.Errorf("Rejected = %d, want 1 (the tampered batch)", n)
	}
	select {
	case data := <-got:
		t.Fatalf("a result of the tampered batch: %s", data)
	case <-time.After(200 * time.Millisecond):
	}
}
