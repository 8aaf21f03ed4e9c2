package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/broker/natsbroker"
	"github.com/svc-dev/svc/fleetwire"
	"github.com/svc-dev/svc/internal/testutil"
)

// TestSignedFleet (issue 12 part 6) runs a publisher and a worker sharing a
// key file, then puts forged tasks on the broker the way anyone with access
// to it could: unsigned, signed with a key the fleet does not have, and
// signed then tampered with. The fleet's own runs work; no forged task
// runs; each is logged without its payload and lands in the dead letter.
func TestSignedFleet(t *testing.T) {
	specs := writeSpecs(t, fleetSpecs)
	keys := filepath.Join(t.TempDir(), "fleet.keys")
	const secret = "0123456789abcdef-fleet-key"
	if err := os.WriteFile(keys, []byte("# svc fleet keys\nk2:"+secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b := fleetBrokers[0].setup(t) // embedded NATS
	serve := startFleetServe(t, "serve", specs, t.TempDir(), b, "--broker-keys", keys)
	worker := startFleetWorker(t, "wk-signed", specs, b, "--broker-keys", keys)
	// The banner may follow the worker_started line startFleetWorker waits
	// for: wait for it too (waitLog fails, with the log, if it never says so).
	worker.waitLog(t, regexp.MustCompile(regexp.QuoteMeta("signing      results with key k2; tasks must be signed with one of k2")))
	c := newFleetClient(t, serve.url)
	run := c.mustSubmit("echo", "genuine", `{"text":"hi"}`)
	c.waitState(run, "completed")

	ctx, cancel := context.WithTimeout(context.Background(), fleetWait)
	defer cancel()
	nb, err := natsbroker.Connect(ctx, b.workerURL, natsbroker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer nb.Close()
	dead := make(chan svc.DeadLetter, 16)
	sub, err := nb.Subscribe(ctx, fleetwire.DeadLetterSubject(fleetwire.TaskSubject("echo")), svc.SubscribeOptions{Prefetch: 8},
		func(ctx context.Context, d *svc.Delivery) {
			var dl svc.DeadLetter
			if err := json.Unmarshal(d.Data, &dl); err != nil {
				t.Errorf("dead letter: %v", err)
			}
			_ = d.Ack(ctx)
			dead <- dl
		})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Stop() }()

	const marker = "FORGED-PAYLOAD-7f3a"
	forge := func(id string) fleetwire.Envelope {
		return fleetwire.Envelope{V: fleetwire.Version, Kind: fleetwire.MsgTask, TaskID: id, TraceID: id, RunID: id, Agent: "echo",
			ReplyTo: fleetwire.ResultSubject("attacker"), Input: json.RawMessage(`{"text":"` + marker + `"}`)}
	}
	unsigned := forge("forged-unsigned")
	otherKey := forge("forged-other-key")
	if err := otherKey.Sign("k2", []byte("0123456789abcdef-not-the-fleets")); err != nil {
		t.Fatal(err)
	}
	tampered := forge("forged-tampered")
	tampered.Input = json.RawMessage(`{"text":"harmless"}`)
	if err := tampered.Sign("k2", []byte(secret)); err != nil {
		t.Fatal(err)
	}
	tampered.Input = json.RawMessage(`{"text":"` + marker + `"}`)
	for _, e := range []fleetwire.Envelope{unsigned, otherKey, tampered} {
		data, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		if err := nb.Publish(ctx, fleetwire.TaskSubject("echo"), data); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]string{}
	for len(got) < 3 {
		select {
		case dl := <-dead:
			var e fleetwire.Envelope
			_ = json.Unmarshal(dl.Data, &e)
			got[e.TaskID] = dl.Reason
		case <-ctx.Done():
			t.Fatalf("dead letters: %v, want the 3 forged tasks", got)
		}
	}
	for id, want := range map[string]string{"forged-unsigned": "not signed", "forged-other-key": "bad signature", "forged-tampered": "bad signature"} {
		if !strings.Contains(got[id], want) {
			t.Errorf("%s: dead-letter reason %q, want %q", id, got[id], want)
		}
	}
	worker.waitLog(t, regexp.MustCompile(`(?s)("msg":"task rejected".*){3}`))
	// A genuine run after the forgeries still works, and is the only
	// other thing the worker ran.
	run = c.mustSubmit("echo", "genuine-2", `{"text":"hi"}`)
	c.waitState(run, "completed")
	testutil.Within(t, fleetWait, "worker logs settle", func() bool { return worker.tasks("agent_completed")["genuine-2"] == 1 })
	for id := range got {
		if n := worker.tasks("agent_started")[id]; n != 0 {
			t.Errorf("forged task %s ran %d times", id, n)
		}
	}
	if strings.Contains(worker.stderr.String(), marker) {
		t.Errorf("the worker logged a forged payload:\n%s", tail(worker.stderr.String(), 4<<10))
	}
}
