package dashboard_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/svc-dev/svc/internal/testutil"
)

// TestDashboardDrawerResumed (issue 30 part 4): a group run whose server
// is killed (SIGKILL) between its first and second node is resumed by the
// restarted server; the run drawer says it was resumed, how many steps it
// had recorded, and marks the events from before the resume as replayed,
// with the run_resumed frame between them and the rest.
func TestDashboardDrawerResumed(t *testing.T) {
	t.Parallel() // its own server and browser
	a := startAppSpecs(t, map[string]string{
		"agents/nap.yaml": "version: 1\nname: nap\nmodel: test:echo\ninstructions: Nap.\nmodel_settings: {latency_ms: 4000}\n",
		"groups/relay.yaml": "version: 1\nname: relay\nnodes:\n  first: {agent: echo}\n  second: {agent: nap}\n" +
			"edges:\n  - {from: first, to: second}\n",
	}, "")
	id := submit(t, a, "relay", `{"text":"carry on"}`)
	// The second node runs (progress: one done, one running); its start
	// event is stored within milliseconds, long before its 4 s are up.
	testutil.Within(t, wait, "the second node to start", func() bool {
		_, p := runStatus(t, a, id)
		return p != nil && p.Completed == 1 && p.Running == 1
	})
	time.Sleep(500 * time.Millisecond)
	a.proc.Kill(t)
	a.restart()
	testutil.Within(t, wait, "the resumed run to complete", func() bool { s, _ := runStatus(t, a, id); return s == "completed" })

	b := newBrowser(t, 1200, 800)
	b.do(chromedp.Navigate(a.URL() + "/dashboard/"))
	b.until("the run to be listed", fmt.Sprintf(`!!document.querySelector(%q)`, runRow(id)))
	b.click(runRow(id))
	b.until("the drawer to say the run was resumed", `((document.querySelector('#drawer-resumed') || {}).textContent || '').startsWith('1 time')`)
	if got := b.text("#drawer-resumed"); !strings.Contains(got, "steps recorded") || strings.Contains(got, " 0 steps") {
		t.Errorf("resumed row %q: want the steps the run recorded", got)
	}
	// The current step: the last the run recorded, the second node's.
	if got := b.text("#drawer-step"); !strings.Contains(got, "group_node") || !strings.Contains(got, "second") {
		t.Errorf("current step %q: want the second node's outcome", got)
	}
	b.until("the timeline to have the run_resumed frame", `!!document.querySelector('#drawer-timeline li.ev-run_resumed')`)
	// Before the frame: the first node's start and end, marked replayed;
	// after it: the second node's end (its start came before the kill),
	// not marked.
	marks := eval[[]string](b, `Array.from(document.querySelectorAll('#drawer-timeline li')).map(li =>`+
		` (li.classList.contains('replayed') ? 'R ' : '- ') + li.querySelector('b').textContent + ' ' + (li.textContent.includes('nap') ? 'nap' : li.textContent.includes('echo') ? 'echo' : ''))`)
	want := []string{"R agent_started echo", "R agent_completed echo", "R agent_started nap", "- run_resumed ", "- agent_completed nap", "- group_completed "}
	if strings.Join(marks, "|") != strings.Join(want, "|") {
		t.Errorf("timeline\n got %q\nwant %q", marks, want)
	}
	b.shot("drawer-resumed")
	for _, e := range b.errors() {
		t.Errorf("console error: %s", e)
	}
}
