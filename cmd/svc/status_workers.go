package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/svc-dev/svc"
)

// printWorkers is `svc status --workers`: one line per worker of the fleet
// as GET /runtime/stats of the server at --url lists it, then it exits.
//
//	worker runtime_id=w-1 status=healthy in_flight=2 concurrency_cap=10 agents=echo,nap last_heartbeat=2026-11-24T22:40:01Z worker_stopped=false
func (s *statusCmd) printWorkers(ctx context.Context, out io.Writer) error {
	target, err := statsURL(s.url)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	token, err := s.auth.resolve()
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", target, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("GET %s: %w", target, err)
	}
	if resp.StatusCode != http.StatusOK {
		hint := ""
		if resp.StatusCode == http.StatusNotFound {
			hint = " (a server without a broker or an event store has no /runtime/stats)"
		}
		return fmt.Errorf("GET %s: %s: %.200s%s", target, resp.Status, strings.TrimSpace(string(body)), hint)
	}
	var st svc.RuntimeStats
	if err := json.Unmarshal(body, &st); err != nil {
		return fmt.Errorf("GET %s: %w", target, err)
	}
	if len(st.Workers) == 0 {
		fmt.Fprintln(out, "no workers")
		return nil
	}
	for _, w := range st.Workers {
		fmt.Fprintf(out, "worker runtime_id=%s status=%s in_flight=%d concurrency_cap=%d agents=%s last_heartbeat=%s worker_stopped=%t\n",
			plainOrQuoted(w.RuntimeID, "-"), w.Status, w.InFlight, w.Concurrency, plainOrQuoted(strings.Join(w.Agents, ","), "-"),
			w.LastHeartbeat.UTC().Format(time.RFC3339), w.Stopped)
	}
	return nil
}

// statsURL is GET /runtime/stats of the server whose event stream is at
// streamURL: the same origin and mount prefix, /events/stream replaced.
func statsURL(streamURL string) (string, error) {
	u, err := url.Parse(streamURL)
	if err != nil {
		return "", fmt.Errorf("--url: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return "", fmt.Errorf("--url %q: want an http:// or https:// URL", streamURL)
	}
	prefix := strings.TrimSuffix(strings.TrimSuffix(u.Path, "/"), "/events/stream")
	u.Path, u.RawQuery, u.RawPath = prefix+"/runtime/stats", "", ""
	return u.String(), nil
}
