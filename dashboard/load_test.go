package dashboard_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/svc-dev/svc/internal/testutil"
)

// BenchmarkDashboardBusy measures the live view of a busy `svc serve` (the
// real binary, its default SQLite stores): 10,000 runs submitted through
// POST /submit by eight clients, then 200 events a second (100 echo runs a
// second, two events each, submitted over HTTP) for ten seconds while the
// page is open. It reports how long drawing one update of the live view
// takes (render-ms) and how long an event waits from arrival to the frame
// that shows it (lag-ms), as the page measures them (window.__svcPerf), and
// checks that the page held no more than its bounded window of events. Run
// it with
//
//	go test -run '^$' -bench DashboardBusy -benchtime 1x ./dashboard/
func BenchmarkDashboardBusy(b *testing.B) {
	a := startApp(b, "")
	ctx := context.Background()
	const stored = 10_000
	var wg sync.WaitGroup
	var next, failed atomic.Int64
	seedStart := time.Now()
	for range 8 {
		wg.Go(func() {
			for next.Add(1) <= stored {
				if _, err := a.submit(ctx, "echo", `{"n":1}`); err != nil {
					if failed.Add(1) == 1 {
						b.Error(err)
					}
				}
			}
		})
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d of %d submits failed", n, stored)
	}
	testutil.Within(b, 5*time.Minute, "the stored runs to finish", func() bool {
		var page struct {
			Runs []json.RawMessage `json:"runs"`
		}
		return api(b, a, "", http.MethodGet, "/runs?state=running&limit=1", "", &page) == http.StatusOK && len(page.Runs) == 0
	})
	b.Logf("%d runs submitted over HTTP and finished in %v", stored, time.Since(seedStart).Round(time.Millisecond))

	br := newBrowser(b, 1200, 800)
	br.do(chromedp.Navigate(a.URL() + "/dashboard/"))
	br.until("the event stream to connect", `document.querySelector('#conn').dataset.state === 'connected'`)
	br.until("the first page of runs", `document.querySelectorAll('#live-table tbody tr.clickable').length === 100`)
	eval[chromedp.Void](br, `window.__svcPerf.renders.length = 0, window.__svcPerf.lags.length = 0`)

	b.ResetTimer()
	const seconds, perSecond = 10, 100 // runs; two events each
	tick := time.NewTicker(time.Second / perSecond)
	var late atomic.Int64
	for i := 0; i < seconds*perSecond; i++ {
		<-tick.C
		wg.Go(func() {
			if _, err := a.submit(ctx, "echo", `{"n":2}`); err != nil {
				if late.Add(1) == 1 {
					b.Error(err)
				}
			}
		})
	}
	tick.Stop()
	wg.Wait()
	b.StopTimer()
	time.Sleep(time.Second)

	renders := eval[[]float64](br, `window.__svcPerf.renders`)
	lags := eval[[]float64](br, `window.__svcPerf.lags`)
	var kept struct{ Events, Traces, Tasks, Results, Seen int }
	raw := eval[[]byte](br, `window.__svcPerf.kept()`)
	if err := json.Unmarshal(raw, &kept); err != nil {
		b.Fatal(err)
	}
	if kept.Events > 2000 || kept.Traces > 2000 || kept.Results > 1000 {
		b.Errorf("the page holds more than its window: %+v", kept)
	}
	if len(renders) == 0 || len(lags) == 0 {
		b.Fatalf("the page drew no update (renders %d, lags %d)", len(renders), len(lags))
	}
	b.ReportMetric(quantile(renders, 0.5), "render-ms-p50")
	b.ReportMetric(quantile(renders, 0.95), "render-ms-p95")
	b.ReportMetric(quantile(lags, 0.5), "lag-ms-p50")
	b.ReportMetric(quantile(lags, 0.95), "lag-ms-p95")
	b.ReportMetric(float64(len(renders))/seconds, "frames/s")
	b.ReportMetric(float64(kept.Events), "events-kept")
	b.Logf("%d updates drawn for %d events seen; %d kept; heap %s", len(renders), kept.Seen, kept.Events,
		eval[string](br, `(performance.memory ? (performance.memory.usedJSHeapSize / 1048576).toFixed(1) + ' MiB' : 'n/a')`))
	for _, e := range br.errors() {
		b.Errorf("console error: %s", e)
	}
}

func quantile(xs []float64, q float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}
