package dashboard_test

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/svc-dev/svc/internal/svcproc"
)

// TestDashboardFleetLive: with a broker and a real worker (heartbeat every
// second), the health view follows the fleet: the worker's in-flight count
// moves with a run it executes, its last heartbeat is counted live, and
// once the worker is killed the page says "no heartbeat for N s" (its
// status stays the server's thresholds'). The live event feed hides the
// worker heartbeats unless asked.
func TestDashboardFleetLive(t *testing.T) {
	t.Parallel() // its own server, worker and browser
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nats := l.Addr().String()
	_ = l.Close()
	a := startApp(t, "", "--broker", "embedded", "--nats-listen", nats, "--publish-events")
	var wlog bytes.Buffer
	w := exec.Command(svcBinary(t), "worker", "start", "--broker", "nats://"+nats, "--specs", a.specs,
		"--heartbeat-seconds", "1", "--runtime-id", "w-dash")
	w.Env, w.Stderr = svcproc.Env(), &wlog
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	exited := false
	t.Cleanup(func() {
		if !exited {
			_ = w.Process.Kill()
			_ = w.Wait()
		}
		if t.Failed() {
			t.Logf("worker log:\n%s", wlog.String())
		}
	})

	b := newBrowser(t, 1280, 900)
	b.do(chromedp.Navigate(a.page("#health")))
	row := `#workers-table tr[data-worker="w-dash"]`
	inFlight := func(n int) string {
		return fmt.Sprintf(`((document.querySelector('%s td.num') || {}).textContent || '').startsWith('%d /')`, row, n)
	}
	age := fmt.Sprintf(`((document.querySelector('%s .hb-age') || {}).textContent || '')`, row)
	b.until("the worker listed, heard from seconds ago", age+`.endsWith(' s ago)')`)
	b.until("nothing in flight", inFlight(0))

	// A run on the worker: in flight 1, then 0 once it is cancelled.
	id := submit(t, a, "slow", `"x"`)
	b.until("the run in flight on the worker", inFlight(1))
	if st := api(t, a, "", http.MethodPost, "/runs/"+id+"/cancel", "", nil); st != http.StatusNoContent {
		t.Fatalf("cancel: status %d", st)
	}
	b.until("in flight back to 0", inFlight(0))

	// The feed: the run's events, and the heartbeats (one a second) only
	// when asked for.
	b.do(chromedp.Navigate(a.page("#live")))
	beats := `[...document.querySelectorAll('#feed-table td')].some((td) => td.textContent === 'worker_heartbeat')`
	b.until("the run's events in the feed", `[...document.querySelectorAll('#feed-table td')].some((td) => td.textContent === 'agent_dispatched')`)
	if eval[bool](b, beats) {
		t.Error("worker heartbeats in the feed by default")
	}
	b.click("#feed-heartbeats")
	b.until("the heartbeats in the feed once asked for", beats)
	b.click("#feed-heartbeats")
	b.until("the heartbeats hidden again", "!"+beats)

	// Killed without a word: the page says so within seconds, live.
	b.do(chromedp.Navigate(a.page("#health")))
	b.until("the worker listed again", age+`.endsWith(' s ago)')`)
	if err := w.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = w.Wait()
	exited = true
	b.until("no heartbeat for N s", `/^no heartbeat for \d+ s$/.test(`+age+`)`)
	if errs := b.errors(); len(errs) > 0 {
		t.Errorf("console errors: %q", errs)
	}
}
