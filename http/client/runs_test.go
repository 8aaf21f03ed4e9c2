package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/http/client"
	"github.com/svc-dev/svc/http/client/clienttest"
	"github.com/svc-dev/svc/http/internal/runstest"
	"github.com/svc-dev/svc/http/server"
)

// runRouter serves the runs of a fresh runstest.Runs, with a quick heartbeat.
func runRouter(t *testing.T) http.Handler {
	t.Helper()
	rt, err := server.NewRouter(runstest.New(t, &fakeBackend{}), server.WithHeartbeat(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	return rt
}

func TestRunContract(t *testing.T) {
	t.Run("fake", func(t *testing.T) {
		clienttest.RunSubmit(t, func(t *testing.T) svc.RunBackend { return runstest.New(t, &fakeBackend{}) })
	})
	t.Run("Client", func(t *testing.T) {
		clienttest.RunSubmit(t, func(t *testing.T) svc.RunBackend {
			return newClient(t, serve(t, runRouter(t)).URL)
		})
	})
	t.Run("Client/standalone with auth", func(t *testing.T) {
		clienttest.RunSubmit(t, func(t *testing.T) svc.RunBackend {
			h, err := server.NewStandalone(runstest.New(t, &fakeBackend{}), server.StandaloneConfig{AuthToken: "tok"})
			if err != nil {
				t.Fatal(err)
			}
			return newClient(t, serve(t, h).URL, client.WithAuthToken("tok"))
		})
	})
	t.Run("Client/mounted under a prefix", func(t *testing.T) {
		clienttest.RunSubmit(t, func(t *testing.T) svc.RunBackend {
			mux := http.NewServeMux()
			mux.Handle("/svc/", http.StripPrefix("/svc", runRouter(t)))
			return newClient(t, serve(t, mux).URL+"/svc")
		})
	})
	t.Run("Local/OverHandler", func(t *testing.T) {
		clienttest.RunSubmit(t, func(t *testing.T) svc.RunBackend {
			l, err := client.NewLocal(client.OverHandler(runRouter(t)))
			if err != nil {
				t.Fatal(err)
			}
			return l
		})
	})
	t.Run("Local/OverBackend", func(t *testing.T) {
		clienttest.RunSubmit(t, func(t *testing.T) svc.RunBackend {
			l, err := client.NewLocal(client.OverBackend(runstest.New(t, &fakeBackend{})))
			if err != nil {
				t.Fatal(err)
			}
			return l
		})
	})
}

// TestLocalWithoutRunBackend: a Local over a backend that cannot submit
// says so on every run call, without panicking.
func TestLocalWithoutRunBackend(t *testing.T) {
	l, err := client.NewLocal(client.OverBackend(&fakeBackend{}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	check := func(what string, err error) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), "cannot submit") || !errors.Is(err, svc.ErrRuntime) {
			t.Errorf("%s = %v, want an error saying the backend cannot submit", what, err)
		}
	}
	_, err = l.SubmitRun(ctx, "echo", svc.TaskSpec{Input: json.RawMessage(`1`)}, "")
	check("SubmitRun", err)
	_, err = l.RunStatus(ctx, "x")
	check("RunStatus", err)
	_, err = l.RunResult(ctx, "x")
	check("RunResult", err)
	check("CancelRun", l.CancelRun(ctx, "x"))
	_, err = l.RunEvents(ctx, "x", 0)
	check("RunEvents", err)
}

// TestRunsAbsentOverHTTP: a server whose backend cannot submit has no run
// routes: the client reports the 404 "no route" problem.
func TestRunsAbsentOverHTTP(t *testing.T) {
	c := newClient(t, serve(t, router(t, &fakeBackend{})).URL)
	if _, err := c.SubmitRun(t.Context(), "echo", svc.TaskSpec{Input: json.RawMessage(`1`)}, ""); err == nil || !strings.Contains(err.Error(), "no route for POST /submit") {
		t.Errorf("SubmitRun against a router without runs = %v, want the 404 of a missing route", err)
	}
}

// TestSubmitRequest checks what the client puts on the wire: the target,
// task and kind, and the request id in the body and the header.
func TestSubmitRequest(t *testing.T) {
	rec := &recorder{}
	c := newClient(t, serve(t, rec.wrap(runRouter(t))).URL)
	ctx := svc.WithRequestID(t.Context(), "ctx-id")
	run, err := c.SubmitRun(ctx, "split", svc.TaskSpec{ID: "t1", Input: json.RawMessage(`{"a":1}`)}, svc.TargetGroup)
	if err != nil {
		t.Fatal(err)
	}
	if run.ID == "" || run.Target != "split" {
		t.Errorf("run = %+v", run)
	}
	reqs := rec.take()
	if len(reqs) != 1 || reqs[0].method != http.MethodPost || reqs[0].path != "/submit" || reqs[0].requestID != "ctx-id" {
		t.Fatalf("requests = %+v, want one POST /submit with X-Request-Id ctx-id", reqs)
	}
	var body map[string]json.RawMessage
	if err := json.Unmarshal(reqs[0].body, &body); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{"target": `"split"`, "kind": `"group"`, "request_id": `"ctx-id"`} {
		if string(body[k]) != want {
			t.Errorf("body %s = %s, want %s", k, body[k], want)
		}
	}
	var task svc.TaskSpec
	if err := json.Unmarshal(body["task"], &task); err != nil || task.ID != "t1" || string(task.Input) != `{"a":1}` {
		t.Errorf("body task = %s (%v)", body["task"], err)
	}
}

// TestResultWaitsWithContext: Result polls until the run ends, and gives
// up with the caller's context.
func TestResultWaitsWithContext(t *testing.T) {
	f := runstest.New(t, &fakeBackend{})
	f.Hold = make(chan struct{})
	c := newClient(t, serve(t, runRouter2(t, f)).URL)
	run, err := c.SubmitRun(t.Context(), "echo", svc.TaskSpec{Input: json.RawMessage(`7`)}, "")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if _, err := run.Result(ctx); !errors.Is(err, svc.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Result of a held run with a 100ms deadline = %v, want a TimeoutError", err)
	}
	if st, err := run.Status(t.Context()); err != nil || st.State != svc.RunPending {
		t.Errorf("Status of a held run = %+v, %v; want pending", st, err)
	}
	if _, err := c.RunResult(t.Context(), run.ID); !errors.Is(err, svc.ErrRunState) {
		t.Errorf("RunResult of a pending run = %v, want a RunStateError", err)
	}
	done := make(chan error, 1)
	go func() {
		raw, err := run.Result(t.Context())
		if err == nil && !strings.Contains(string(raw), `"output":7`) {
			err = errors.New("result " + string(raw))
		}
		done <- err
	}()
	close(f.Hold)
	if err := <-done; err != nil {
		t.Errorf("Result after release: %v", err)
	}
}

func runRouter2(t *testing.T, f *runstest.Runs) http.Handler {
	t.Helper()
	rt, err := server.NewRouter(f)
	if err != nil {
		t.Fatal(err)
	}
	return rt
}

// TestRunEventsEndsWithContext: ending the caller's context closes the
// channel of a stream that would otherwise stay open.
func TestRunEventsEndsWithContext(t *testing.T) {
	for name, b := range map[string]func(t *testing.T) svc.RunBackend{
		"Client": func(t *testing.T) svc.RunBackend { return newClient(t, serve(t, runRouter(t)).URL) },
		"Local/OverHandler": func(t *testing.T) svc.RunBackend {
			l, err := client.NewLocal(client.OverHandler(runRouter(t)))
			if err != nil {
				t.Fatal(err)
			}
			return l
		},
	} {
		t.Run(name, func(t *testing.T) {
			rb := b(t)
			run, err := client.Submit(t.Context(), rb, "slow", svc.TaskSpec{Input: json.RawMessage(`1`)}, "")
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(t.Context())
			ch, err := run.Events(ctx, 0)
			if err != nil {
				t.Fatal(err)
			}
			first := <-ch
			if first.Type != svc.RunAgentStarted || first.Seq != 1 {
				t.Errorf("first event = %+v, want agent_started seq 1", first)
			}
			cancel()
			deadline := time.After(5 * time.Second)
			for {
				select {
				case _, ok := <-ch:
					if !ok {
						return
					}
				case <-deadline:
					t.Fatal("the channel stayed open after the context ended")
				}
			}
		})
	}
}
