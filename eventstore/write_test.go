package eventstore_test

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/eventstore"
)

// TestSQLiteBatchSizes writes batches of every size around the multi-row
// statements' chunk boundaries (powers of two up to 64, and past them) in
// one Write, and the same events one Write each, and compares both with a
// memory store: the same events in the same order (ties in timestamp
// too), and the same rollups, whose totals a batch of many new keys
// (a trace per event) upserts in chunks as well.
func TestSQLiteBatchSizes(t *testing.T) {
	now := time.Now()
	fs := factories()
	for _, n := range []int{1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 66, 127, 128, 129, 191, 255, 256, 257} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
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
			mem, batch, single := fs[0].open(t, eventstore.Retention{}), fs[1].open(t, eventstore.Retention{}),
				fs[1].open(t, eventstore.Retention{})
			write(t, mem, evs...)
			write(t, batch, evs...)
			for _, e := range evs {
				write(t, single, e)
			}
			m, b, s := readAll(t, mem, now, traces), readAll(t, batch, now, traces), readAll(t, single, now, traces)
			if got := len(b["events"].([]svc.RuntimeEvent)); got != n {
				t.Fatalf("the batch store holds %d events, want %d", got, n)
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
