package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"iter"
	"net/http"
	"slices"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/http/server"
)

// reversed is a backend whose streamed gather hands the results over in
// the reverse of task order, as a batch whose first task is the slowest
// does (in order when forward), each output its input padded to pad
// bytes; failAfter > 0 makes it fail (the runtime shutting down) after
// that many results.
type reversed struct {
	fakeBackend
	pad       int
	forward   bool
	failAfter int
}

func (b *reversed) GatherStream(ctx context.Context, name string, tasks iter.Seq[svc.TaskSpec], conc int) iter.Seq2[svc.GatherItem, error] {
	return func(yield func(svc.GatherItem, error) bool) {
		all := slices.Collect(tasks)
		for n := range all {
			i := len(all) - 1 - n
			if b.forward {
				i = n
			}
			if b.failAfter > 0 && n == b.failAfter {
				yield(svc.GatherItem{}, svc.Errorf(svc.KindShuttingDown, "runtime is shutting down"))
				return
			}
			var in string
			_ = json.Unmarshal(all[i].Input, &in)
			out, _ := json.Marshal(in + strings.Repeat("x", b.pad))
			res := svc.AgentResult{AgentName: name, TaskID: all[i].ID, Success: true, Output: out}
			if !yield(svc.GatherItem{Index: i, Result: res}, nil) {
				return
			}
		}
	}
}

// gatherBody is a JSON gather of n tasks whose inputs name them.
func gatherBody(n int) string {
	tasks := make([]string, n)
	for i := range tasks {
		tasks[i] = fmt.Sprintf(`{"id":"t%d","input":"%d"}`, i, i)
	}
	return `{"tasks":[` + strings.Join(tasks, ",") + `]}`
}

// A JSON gather answers its results in task order, however the batch
// finishes them: a small answer whole with its Content-Length, a large one
// as it is encoded, the same JSON either way.
func TestGatherListOrder(t *testing.T) {
	for _, c := range []struct {
		name    string
		n, pad  int
		chunked bool
	}{{"small", 50, 10, false}, {"large", 3000, 1000, true}} {
		t.Run(c.name, func(t *testing.T) {
			h, err := server.NewRouter(&reversed{pad: c.pad}, server.WithLogger(zap.NewNop()))
			if err != nil {
				t.Fatal(err)
			}
			srv := serve(t, h)
			resp, err := srv.Client().Post(srv.URL+"/agents/echo/gather", "application/json", strings.NewReader(gatherBody(c.n)))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("%d %v: %.200s", resp.StatusCode, err, body)
			}
			if chunked := resp.ContentLength < 0; chunked != c.chunked {
				t.Errorf("Content-Length %d for a %d-byte answer", resp.ContentLength, len(body))
			}
			var results []svc.AgentResult
			if err := json.Unmarshal(body, &results); err != nil {
				t.Fatal(err)
			}
			if len(results) != c.n {
				t.Fatalf("%d results, want %d", len(results), c.n)
			}
			for i, r := range results {
				if r.TaskID != fmt.Sprintf("t%d", i) || !strings.HasPrefix(string(r.Output), fmt.Sprintf(`"%dx`, i)) {
					t.Fatalf("result %d is task %s (%.20s): not in task order", i, r.TaskID, r.Output)
				}
			}
		})
	}
}

// An error before any of the answer went out is a problem answer; after
// its status went out, the connection is cut, so that the client never
// reads a short list as the whole answer.
func TestGatherListError(t *testing.T) {
	for _, c := range []struct {
		name    string
		backend *reversed
	}{
		// Reversed, no result is in order until the last: nothing was sent.
		{"before", &reversed{pad: 1000, failAfter: 2500}},
		// In order, 2,500 results of 1 KB are past the buffered megabyte.
		{"after", &reversed{pad: 1000, failAfter: 2500, forward: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			h, err := server.NewRouter(c.backend, server.WithLogger(zap.NewNop()))
			if err != nil {
				t.Fatal(err)
			}
			srv := serve(t, h)
			resp, err := srv.Client().Post(srv.URL+"/agents/echo/gather", "application/json", strings.NewReader(gatherBody(3000)))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			got, readErr := io.ReadAll(resp.Body)
			if !c.backend.forward {
				if resp.StatusCode != http.StatusServiceUnavailable || readErr != nil || !strings.Contains(string(got), "shutting down") {
					t.Fatalf("%d %v %.200s: want a 503 problem", resp.StatusCode, readErr, got)
				}
				return
			}
			var results []svc.AgentResult
			if resp.StatusCode != http.StatusOK || readErr == nil || json.Unmarshal(got, &results) == nil {
				t.Fatalf("%d, read error %v, %d bytes that parse: want 200 and a cut answer", resp.StatusCode, readErr, len(got))
			}
		})
	}
}
