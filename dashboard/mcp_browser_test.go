package dashboard_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/chromedp/chromedp"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/internal/testutil"
)

// TestDashboardToolServers: `svc serve` with an agent that has two MCP
// servers over streamable HTTP, started at once (--mcp-eager-start): one
// served in this process by the go-sdk on 127.0.0.1 ("up", two tools),
// one at an address nobody listens on ("down"). The health view lists
// both as /runtime/stats' tool_servers has them: up ready with its two
// tools and no restart, down restarting with its last error.
func TestDashboardToolServers(t *testing.T) {
	t.Parallel() // each has its own server and browser
	srv := sdk.NewServer(&sdk.Implementation{Name: "dash-test", Version: "1"}, nil)
	type textIn struct {
		Text string `json:"text"`
	}
	for _, name := range []string{"echo", "shout"} {
		sdk.AddTool(srv, &sdk.Tool{Name: name, Description: name + "es text", Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}},
			func(_ context.Context, _ *sdk.CallToolRequest, in textIn) (*sdk.CallToolResult, any, error) {
				return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: name + ": " + in.Text}}}, nil, nil
			})
	}
	up := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil))
	t.Cleanup(up.Close)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + l.Addr().String() + "/mcp"
	_ = l.Close() // nobody listens there now

	spec := fmt.Sprintf("version: 1\nname: tooly\nmodel: test:echo\ninstructions: Use the tools.\ntrust_level: high\nmcp_servers:\n"+
		"  - {name: up, transport: http, url: %q, prefix: up_}\n  - {name: down, transport: http, url: %q, prefix: down_}\n", up.URL, down)
	a := startAppSpecs(t, map[string]string{"agents/tooly.yaml": spec}, "", "--mcp-eager-start")

	servers := map[string]svc.ToolServerStatus{}
	testutil.Within(t, wait, "/runtime/stats to have up ready and down restarting", func() bool {
		var st struct {
			ToolServers []svc.ToolServerStatus `json:"tool_servers"`
		}
		api(t, a, "", http.MethodGet, "/runtime/stats", "", &st)
		clear(servers)
		for _, s := range st.ToolServers {
			servers[s.Name] = s
		}
		return len(st.ToolServers) == 2 && servers["up"].State == "ready" && servers["down"].State == "restarting" && servers["down"].LastError != ""
	})
	if u := servers["up"]; u.Agent != "tooly" || u.Transport != "http" || len(u.Tools) != 2 || u.Restarts != 0 || u.LastError != "" {
		t.Fatalf("the up server in /runtime/stats: %+v", u)
	}
	t.Logf("tool servers: %+v", servers)

	b := newBrowser(t, 1200, 900)
	b.do(chromedp.Navigate(a.page("#health")))
	row := func(name string) string {
		return fmt.Sprintf(`[...document.querySelectorAll('#servers-table tbody tr')].find(r => r.cells[0].textContent === %q)`, name)
	}
	for _, name := range []string{"up", "down"} {
		s := servers[name]
		b.until(fmt.Sprintf("the %s server's row as /runtime/stats has it", name), fmt.Sprintf(`(() => { const r = %s; return !!r && r.cells.length === 7 &&
			r.cells[1].textContent === %q && r.cells[2].textContent === %q &&
			r.cells[3].querySelector('.badge')?.textContent === %q && r.cells[3].querySelector('.badge').classList.contains(%q) &&
			r.cells[4].textContent === %q })()`, row(name), s.Agent, s.Transport, s.State, "ts-"+s.State, fmt.Sprintf("%d tools", len(s.Tools))))
	}
	if r := eval[string](b, row("up")+`.cells[5].textContent`); r != "0" {
		t.Errorf("the up server's restarts say %q, want 0", r)
	}
	if e := eval[string](b, row("up")+`.cells[6].textContent`); e != "" {
		t.Errorf("the up server shows an error %q", e)
	}
	if e := eval[string](b, row("down")+`.cells[6].textContent`); e == "" {
		t.Errorf("the down server shows no error; /runtime/stats has %q", servers["down"].LastError)
	}
	if n := eval[int](b, `document.querySelectorAll('#servers-table tbody tr').length`); n != 2 {
		t.Errorf("the servers table has %d rows, want 2", n)
	}
	if errs := b.errors(); len(errs) > 0 {
		t.Errorf("console errors: %q", errs)
	}
}
