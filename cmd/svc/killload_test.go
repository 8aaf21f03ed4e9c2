package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/testutil"
)

// A run whose submit was answered 202 survives kill -9 of the server under
// group-committed load: sixteen clients submit fast and slow runs, the
// server is SIGKILLed mid-load, and after a restart on the same store every
// accepted run exists and is terminal, with a status, result and stream
// that agree: completed with a successful result, those the kill cut
// resumed by the restarted server (issue 30). Run on SQLite and Pebble,
// whose writes of concurrent submits share one commit.
func TestServeKillUnderLoadLosesNoAcceptedRun(t *testing.T) {
	t.Parallel()
	for _, store := range []string{"sqlite", "pebble"} {
		t.Run(store, func(t *testing.T) {
			dir := t.TempDir()
			spec := "sqlite:" + filepath.Join(dir, "runs.db")
			if store == "pebble" {
				spec = "pebble:" + filepath.Join(dir, "runs.pebble")
			}
			killUnderLoad(t, dir, spec)
		})
	}
}

func killUnderLoad(t *testing.T, dir, storeSpec string) {
	specs := writeSpecs(t, map[string]string{
		"agents/echo.yaml": "version: 1\nname: echo\nmodel: test:echo\n",
		"agents/slow.yaml": "version: 1\nname: slow\nmodel: test:echo\nmodel_settings: {latency_ms: 300}\n",
	})
	args := []string{"--specs", specs, "--data-dir", dir, "--store", storeSpec}
	s := startServe(t, nil, args...)
	const clients = 16
	var (
		mu       sync.Mutex
		accepted = map[string]string{} // run id → target
		wg       sync.WaitGroup
		stop     = make(chan struct{})
	)
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{}}
	defer c.CloseIdleConnections()
	for i := range clients {
		wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				target := "echo"
				if (i+n)%3 == 0 {
					target = "slow"
				}
				resp, err := c.Post(s.url+"/submit", "application/json",
					strings.NewReader(fmt.Sprintf(`{"target":%q,"task":{"input":{"n":%d}}}`, target, n)))
				if err != nil {
					return // the server is gone
				}
				var sub struct {
					RunID string `json:"run_id"`
				}
				err = json.NewDecoder(resp.Body).Decode(&sub)
				resp.Body.Close()
				if resp.StatusCode == http.StatusAccepted && err == nil && sub.RunID != "" {
					mu.Lock()
					accepted[sub.RunID] = target
					mu.Unlock()
				}
			}
		})
	}
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(accepted) }
	testutil.Within(t, 60*time.Second, "300 accepted submits", func() bool { return count() >= 300 })
	s.signal(t, syscall.SIGKILL)
	s.wait(t, 10*time.Second)
	close(stop)
	wg.Wait()
	c.CloseIdleConnections()

	s2 := startServe(t, nil, args...)
	get := func(id, path string) (int, []byte) {
		resp, err := httpClient.Get(s2.url + "/runs/" + id + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	states := map[string]int{}
	for id, target := range accepted {
		var (
			code int
			body []byte
			st   struct {
				State, Reason string
			}
		)
		// The runs the kill cut are resumed by the restarted server.
		testutil.Within(t, 60*time.Second, "run "+id+" to end", func() bool {
			code, body = get(id, "/status")
			if code != http.StatusOK {
				t.Fatalf("run %s (%s) was accepted with a 202 but is lost after kill -9: %d %s", id, target, code, body)
			}
			if err := json.Unmarshal(body, &st); err != nil {
				t.Fatal(err)
			}
			return st.State == "completed" || st.State == "failed" || st.State == "cancelled"
		})
		states[st.State+"/"+st.Reason]++
		code, res := get(id, "/result")
		var r struct {
			Success bool
			Error   *struct{ Reason string }
		}
		_ = json.Unmarshal(res, &r)
		switch {
		case st.State == "completed" && code == http.StatusOK && r.Success:
		default: // every accepted run kept its task: none ends interrupted
			t.Fatalf("run %s (%s) after kill -9 and restart: status %s, result %d %s", id, target, body, code, res)
		}
		code, stream := get(id, "/stream") // a terminal run's stream replays and ends
		if code != http.StatusOK || !strings.Contains(string(stream), "event: ") {
			t.Fatalf("run %s stream after restart: %d %s", id, code, stream)
		}
	}
	t.Logf("%d runs accepted before kill -9, all found terminal after the restart: %v", len(accepted), states)
}
