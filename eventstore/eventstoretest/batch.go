package eventstoretest

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/eventstore"
)

// testBatchSizes writes batches of every size around the SQLite store's
// multi-row statements' chunk boundaries (powers of two up to 64, and
// past them: 127 takes every statement shape once, 128 and 129 two full
// chunks and a remainder; larger sizes only repeat these) in one Write, and the same events one Write each, and
// compares both with the memory store: the same events in the same order
// (ties in timestamp too), and the same rollups, whose totals a batch of
// many new keys (a trace per event) upserts in chunks as well.
func testBatchSizes(t *testing.T, open Open) {
	now := time.Now()
	for _, n := range []int{1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 66, 127, 128, 129} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			t.Parallel() // its own stores: SQLite's commits overlap
			rng := rand.New(rand.NewPCG(uint64(n), 15))
			evs := randomEvents(rng, n, now, time.Hour)
			traces := []string{"t0", "t1"}
			for i := range evs {
				if i%2 == 1 {
					evs[i].TraceID = fmt.Sprintf("u%d", i) // a new key of the trace totals
					traces = append(traces, evs[i].TraceID)
				}
				if i%5 == 4 {
					evs[i].Timestamp = evs[i-1].Timestamp // a tie, broken by write order
				}
			}
			mem, batch, single := reference(t, eventstore.Retention{}), open(t, eventstore.Retention{}),
				open(t, eventstore.Retention{})
			write(t, mem, evs...)
			write(t, batch, evs...)
			for _, e := range evs {
				write(t, single, e)
			}
			m, b, s := ReadAll(t, mem, now, traces), ReadAll(t, batch, now, traces), ReadAll(t, single, now, traces)
			if got := len(b["events"].([]svc.RuntimeEvent)); got != n {
				t.Fatalf("the store written in one batch holds %d events, want %d", got, n)
			}
			for k := range m {
				if !reflect.DeepEqual(m[k], b[k]) {
					t.Errorf("%s differs:\nmemory %+v\nbatch  %+v", k, m[k], b[k])
				}
				if !reflect.DeepEqual(s[k], b[k]) {
					t.Errorf("%s differs:\nsingle %+v\nbatch  %+v", k, s[k], b[k])
				}
			}
		})
	}
}
