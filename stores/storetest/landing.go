package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc"
)

// LandingRuns sizes the landing test: that many runs created at once, each
// raced by a duplicate Create, then ended by two racing terminal writes.
const LandingRuns = 300

// testConcurrentLanding: many concurrent Creates and terminal writes all
// land, each with its own answer, as they must when a store commits
// several callers' writes together: of two Creates of one id exactly one
// succeeds and the other is a RunStateError; of a Finish (completed, with
// a result) racing a cancel, exactly one wins, the loser is refused and
// changes nothing, and the record, the result and the last event agree
// with the winner.
func testConcurrentLanding(t *testing.T, s svc.RunStore) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	type outcome struct {
		created  [2]error
		running  error
		finished error
		cancel   error
	}
	out := make([]outcome, LandingRuns)
	id := func(i int) string { return fmt.Sprintf("land%04d", i) }
	var wg sync.WaitGroup
	for i := range LandingRuns {
		for k := range 2 {
			wg.Go(func() {
				out[i].created[k] = s.Create(ctx, svc.RunRecord{RunID: id(i), Target: "echo", Kind: svc.TargetAgent})
			})
		}
	}
	wg.Wait()
	for i := range LandingRuns {
		o := &out[i]
		if (o.created[0] == nil) == (o.created[1] == nil) {
			t.Fatalf("%s: two Creates answered %v and %v, want exactly one success", id(i), o.created[0], o.created[1])
		}
		for _, err := range o.created {
			if err != nil && !errors.Is(err, svc.ErrRunState) {
				t.Fatalf("%s: duplicate Create: %v, want a RunStateError", id(i), err)
			}
		}
	}
	for i := range LandingRuns {
		wg.Go(func() {
			o := &out[i]
			if o.running = s.SetState(ctx, id(i), svc.RunRunning, "", nil); o.running != nil {
				return
			}
			var race sync.WaitGroup
			race.Go(func() {
				o.finished = s.Finish(ctx, id(i), svc.RunCompleted, "", []byte(fmt.Sprintf(`{"n":%d}`, i)),
					&svc.RunEvent{Type: svc.RunGroupCompleted})
			})
			race.Go(func() {
				o.cancel = s.SetState(ctx, id(i), svc.RunCancelled, "cancelled", &svc.RunEvent{Type: svc.RunRunCancelled})
			})
			race.Wait()
		})
	}
	wg.Wait()
	for i := range LandingRuns {
		o := out[i]
		if o.running != nil {
			t.Fatalf("%s: SetState running: %v", id(i), o.running)
		}
		if (o.finished == nil) == (o.cancel == nil) {
			t.Fatalf("%s: Finish answered %v and cancel %v, want exactly one winner", id(i), o.finished, o.cancel)
		}
		for _, err := range []error{o.finished, o.cancel} {
			if err != nil && !errors.Is(err, svc.ErrRunState) {
				t.Fatalf("%s: losing terminal write: %v, want a RunStateError", id(i), err)
			}
		}
		rec := get(t, s, id(i))
		evs := eventsOf(t, s, id(i), 0)
		if len(evs) != 1 {
			t.Fatalf("%s: events %+v, want only the winner's final event", id(i), evs)
		}
		if o.finished == nil {
			if rec.State != svc.RunCompleted || string(rec.Result) != fmt.Sprintf(`{"n":%d}`, i) || evs[0].Type != svc.RunGroupCompleted {
				t.Fatalf("%s: Finish won but the store has state %q result %s event %q", id(i), rec.State, rec.Result, evs[0].Type)
			}
		} else if rec.State != svc.RunCancelled || rec.Reason != "cancelled" || rec.Result != nil || evs[0].Type != svc.RunRunCancelled {
			t.Fatalf("%s: the cancel won but the store has state %q reason %q result %s event %q",
				id(i), rec.State, rec.Reason, rec.Result, evs[0].Type)
		}
	}
}
