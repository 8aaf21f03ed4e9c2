package dashboard_test

import (
	"net/url"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestDNSRebinding: a page on evil.example whose name the attacker made
// resolve to 127.0.0.1 (DNS rebinding; here chromium's resolver rules do
// what the attacker's DNS server would) calls a token-less svc serve on
// loopback "same-origin": the browser sends Origin http://evil.example:PORT
// or none, which the origin check cannot tell from the server's own. The
// Host header still names evil.example, and the server refuses it with 421
// (issue 25 part 2: before, POST /submit got 202 and GET /agents the list).
// Its own names still work from the same browser.
func TestDNSRebinding(t *testing.T) {
	t.Parallel() // each has its own server and browser
	a := startApp(t, "")
	u, err := url.Parse(a.URL())
	if err != nil {
		t.Fatal(err)
	}
	b := newBrowser(t, 1024, 768, chromedp.Flag("host-resolver-rules", "MAP evil.example 127.0.0.1"))
	evil := "http://evil.example:" + u.Port()
	b.do(chromedp.Navigate(evil + "/"))
	if got := eval[string](b, "location.origin"); got != evil {
		t.Fatalf("the page's origin is %q, want %q", got, evil)
	}
	fetch := func(method, path, body string) string {
		t.Helper()
		js := `fetch(` + quote(path) + `, {method: ` + quote(method)
		if body != "" {
			js += `, headers: {"Content-Type": "application/json"}, body: ` + quote(body)
		}
		js += `}).then(async r => r.status + " " + (await r.text()))`
		return eval[string](b, js, chromedp.EvalAwaitPromise)
	}
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/agents", ""},
		{"POST", "/submit", `{"target":"echo","task":{"input":"rebound"}}`},
		{"GET", "/dashboard/", ""},
	} {
		got := fetch(c.method, c.path, c.body)
		if !strings.HasPrefix(got, "421 ") || !strings.Contains(got, "MisdirectedRequestError") {
			t.Errorf("%s %s from the rebound page = %.200s, want 421 MisdirectedRequestError", c.method, c.path, got)
		}
	}
	// The same browser on the server's own name is served.
	b.do(chromedp.Navigate(a.URL() + "/healthz"))
	if got := fetch("GET", "/agents", ""); !strings.HasPrefix(got, "200 ") || !strings.Contains(got, "echo") {
		t.Errorf("GET /agents from http://127.0.0.1 = %.200s, want 200 with the agents", got)
	}
}

// quote is a JavaScript string literal of s.
func quote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`, "\n", `\n`).Replace(s) + "'"
}
