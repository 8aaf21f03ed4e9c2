package dashboard_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/svc-dev/svc/internal/testutil"
)

// TestDashboardWaitingRuns (issue 31 part 6): the Live view lists the runs
// waiting for a person with what each waits for; Approve in the page
// resumes the run, which completes with the tool's result; a question is
// answered by picking one of its choices in the run's drawer, and Deny
// with a reason reaches the model.
func TestDashboardWaitingRuns(t *testing.T) {
	t.Parallel() // its own server and browser
	a := startAppSpecs(t, map[string]string{
		"agents/gate.yaml": "version: 1\nname: gate\nmodel: test:echo\ninstructions: Tell the time.\ntools: [current_time]\n" +
			"trust_level: low\napproval: [current_time]\nmodel_settings: {call_tools: all}\n",
		"agents/deny.yaml": "version: 1\nname: deny\nmodel: test:echo\ninstructions: Tell the time.\ntools: [current_time]\n" +
			"trust_level: low\napproval: [current_time]\nmodel_settings: {call_tools: all}\n",
		"agents/asker.yaml": "version: 1\nname: asker\nmodel: test:echo\ninstructions: Ask.\nbuiltin_tools: [ask_human]\n" +
			"model_settings: {call_tools: all, tool_arguments: {ask_human: {question: 'Which color?', choices: [red, blue]}}}\n",
	}, "")
	gate := submit(t, a, "gate", `"now?"`)
	deny := submit(t, a, "deny", `"now?"`)
	asker := submit(t, a, "asker", `"pick"`)
	for _, id := range []string{gate, deny, asker} {
		testutil.Within(t, wait, "run "+id+" to wait", func() bool { s, _ := runStatus(t, a, id); return s == "waiting" })
	}

	b := newBrowser(t, 1200, 900)
	b.do(chromedp.Navigate(a.page("")))
	card := func(id string) string { return fmt.Sprintf(`#waiting-list .request[data-run=%q]`, id) }
	b.until("the waiting runs to be listed", fmt.Sprintf(`document.querySelectorAll('#waiting-list .request').length === 3 && !!document.querySelector(%q)`, card(gate)))
	if got := b.text(card(gate)); !strings.Contains(got, "Approve current_time?") || !strings.Contains(got, "agent gate") {
		t.Errorf("the gate run's card %q: want the tool and the agent", got)
	}
	if got := b.text(card(asker)); !strings.Contains(got, "Which color?") {
		t.Errorf("the asker run's card %q: want the question", got)
	}

	// Approve in the page: the run resumes and completes, the tool called.
	b.click(card(gate) + " .req-approve")
	testutil.Within(t, wait, "the approved run to complete", func() bool { s, _ := runStatus(t, a, gate); return s == "completed" })
	var res struct {
		Output struct {
			Tools map[string]any `json:"tools"`
		} `json:"output"`
	}
	if code := api(t, a, "", "GET", "/runs/"+gate+"/result", "", &res); code != 200 || res.Output.Tools["current_time"] == nil {
		t.Errorf("approved run's result %d %+v: want current_time's answer", code, res)
	}

	// Deny with a reason: the model is told, the tool not called.
	b.until("the approved run's card to go", fmt.Sprintf(`!document.querySelector(%q)`, card(gate)))
	b.do(chromedp.SendKeys(chromedp.CSS(card(deny)+" .req-reason"), "not now"))
	b.click(card(deny) + " .req-deny")
	testutil.Within(t, wait, "the denied run to complete", func() bool { s, _ := runStatus(t, a, deny); return s == "completed" })
	var denied map[string]any
	api(t, a, "", "GET", "/runs/"+deny+"/result", "", &denied)
	if out := fmt.Sprint(denied["output"]); !strings.Contains(out, "denied") || !strings.Contains(out, "not now") {
		t.Errorf("denied run's output %s: want the denial and its reason", out)
	}

	// The question, answered in the run's drawer (once the answered runs'
	// cards have gone, so the table no longer moves under the click).
	b.until("the answered runs' cards to go", `document.querySelectorAll('#waiting-list .request').length === 1`)
	b.click(runRow(asker))
	b.until("the drawer to show the question", `!!document.querySelector('#drawer-wait .req-choice[data-choice="blue"]')`)
	b.click(`#drawer-wait .req-choice[data-choice="blue"]`)
	testutil.Within(t, wait, "the answered run to complete", func() bool { s, _ := runStatus(t, a, asker); return s == "completed" })
	var answered map[string]any
	api(t, a, "", "GET", "/runs/"+asker+"/result", "", &answered)
	if out := fmt.Sprint(answered["output"]); !strings.Contains(out, "blue") {
		t.Errorf("answered run's output %s: want the answer", out)
	}
	b.until("the waiting list to empty", `document.getElementById('waiting-box').hidden`)
	b.shot("waiting")
	for _, e := range b.errors() {
		t.Errorf("console error: %s", e)
	}
}
