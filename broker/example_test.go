package broker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/broker"
	"github.com/svc-dev/svc/fleetwire"
)

// A publisher and a worker on one broker: the worker takes signed tasks,
// keeps them alive while it works, publishes the result and only then acks;
// the publisher reads its inbox.
func Example() {
	ctx := context.Background()
	b, err := broker.Open(ctx, "memory://", broker.Options{})
	if err != nil {
		panic(err)
	}
	defer b.Close()
	keys, _ := fleetwire.ParseKeyring("k1:an-example-secret-of-32-bytes!")

	// The worker.
	work, err := b.Subscribe(ctx, fleetwire.TaskSubject("echo"), svc.SubscribeOptions{
		Prefetch: 4, AckWait: 30 * time.Second, MaxDeliver: 5,
		OnDeadLetter: func(ctx context.Context, dl svc.DeadLetter) { /* fail the task: dl.Reason */ },
	}, func(ctx context.Context, d *svc.Delivery) {
		task, err := fleetwire.Decode(d.Data)
		if err == nil {
			err = keys.Verify(task)
		}
		if err != nil {
			_ = d.Ack(ctx) // a message that can never succeed: drop it
			return
		}
		stop := fleetwire.KeepAlive(ctx, d, 0)
		res := svc.AgentResult{AgentName: task.Agent, TaskID: task.TaskID, Success: true, Output: task.Input}
		stop()
		reply := &fleetwire.Envelope{Kind: fleetwire.MsgResult, TaskID: task.TaskID, Result: &res, RuntimeID: "worker-1"}
		_ = keys.Sign(reply)
		data, _ := reply.Encode()
		if err := b.Publish(ctx, task.ReplyTo, data); err != nil {
			_ = d.Nack(ctx, time.Second)
			return
		}
		_ = d.Ack(ctx)
	})
	if err != nil {
		panic(err)
	}
	defer work.Drain(ctx)

	// The publisher.
	results := make(chan *fleetwire.Envelope, 1)
	inbox, err := b.Subscribe(ctx, fleetwire.ResultSubject("publisher-1"), svc.SubscribeOptions{Prefetch: 64},
		func(ctx context.Context, d *svc.Delivery) {
			if e, err := fleetwire.Decode(d.Data); err == nil && keys.Verify(e) == nil {
				results <- e
			}
			_ = d.Ack(ctx)
		})
	if err != nil {
		panic(err)
	}
	defer inbox.Stop()

	task := &fleetwire.Envelope{
		Kind: fleetwire.MsgTask, TaskID: "t-1", RunID: "r-1", Agent: "echo",
		Input: json.RawMessage(`{"text":"hi"}`), ReplyTo: fleetwire.ResultSubject("publisher-1"),
	}
	task.SetDeadline(time.Now().Add(time.Minute))
	_ = keys.Sign(task)
	data, _ := task.Encode()
	if err := b.Publish(ctx, fleetwire.TaskSubject("echo"), data); err != nil {
		panic(err)
	}
	r := <-results
	fmt.Println(r.TaskID, r.Result.Success, string(r.Result.Output), r.RuntimeID)
	// Output: t-1 true {"text":"hi"} worker-1
}
