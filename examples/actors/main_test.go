package main

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestActors runs the example as main does: 1,000 runs fanned out by
// message all reply, each with its own input; the slow run is cancelled
// through its actor, which then stops; the monitor got the events (or
// counted them dropped); svc shuts down inside the host's running system,
// whose coordinator still answers, and nothing is left running (TestMain).
func TestActors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := run(ctx, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if s.Runs != 1000 || s.Succeeded != 1000 || !s.InOrder || s.Tokens <= 0 {
		t.Errorf("replies: %+v", s)
	}
	if !s.SlowCancelled || s.SlowRunID == "" {
		t.Errorf("slow run not cancelled: %+v", s)
	}
	if s.Events == 0 || uint64(s.Events)+s.Dropped > 1000 {
		t.Errorf("monitor: %d events, %d dropped, for 1000 runs", s.Events, s.Dropped)
	}
	t.Log(s)
}
