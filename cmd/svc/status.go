package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/svc-dev/svc"
)

// Reconnection backoff of `svc status`: the first retry waits minBackoff,
// each failed one doubles the wait up to maxBackoff, and a connection that
// succeeded starts over from minBackoff.
const (
	statusMinBackoff = 500 * time.Millisecond
	statusMaxBackoff = 10 * time.Second
)

type statusCmd struct {
	url         string
	eventTypes  []string
	agent       string
	auth        authFlags
	noReconnect bool
	idleTimeout time.Duration
	workers     bool // --workers: print the fleet (status_workers.go) and exit

	// Backoff bounds; the tests shorten them.
	minBackoff, maxBackoff time.Duration
}

func newStatus() *cobra.Command {
	return statusCommand(&statusCmd{minBackoff: statusMinBackoff, maxBackoff: statusMaxBackoff})
}

// statusCommand is svc status with its flags bound to s.
func statusCommand(s *statusCmd) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Follow the runtime events of a server, one line per event",
		Long: `Follow GET /events/stream of a running server (--url, its base URL) and
print one line per runtime event:

  agent_completed agent=echo task=0193… trace=req-1 backend=local duration_ms=1.2 model=test:echo tokens_used=3

the event type, then agent, task and trace ("-" when empty), then the
payload's key=value pairs sorted by key. Strings and numbers are printed as
they are; other values, and strings with spaces, quotes, "=" or control
characters, are JSON-encoded. Frames whose data is not an event are skipped.

When the connection fails or drops, or the server ends the stream (it shut
down), status reconnects, waiting 0.5s and doubling the wait up to 10s; a
connection that succeeded starts the wait over. A stream silent for longer
than --idle-timeout (the server sends a heartbeat every 15s) counts as
dropped. With --no-reconnect it stops instead.

Exit status: 0 after SIGINT or SIGTERM, and with --no-reconnect when the
server ended the stream cleanly; 1 when the server refuses the request
(401 without the right --auth-token, 404 when it has no event stream, 400
for a filter it rejects; never retried), and with --no-reconnect when the
connection failed or dropped; 2 for bad usage.`,
		Example: `  svc status                                    # until Ctrl-C`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			s.url = serverURL(s.url, cmd.ErrOrStderr())
			if s.workers {
				return s.printWorkers(ctx, cmd.OutOrStdout())
			}
			return s.run(ctx, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&s.url, "url", "", "base URL of the server (its /events/stream is followed; a URL ending in /events/stream is taken as it is) (default $SVC_URL, else "+defaultURL+")")
	fs.StringSliceVar(&s.eventTypes, "filter-event-type", nil, "print only events of this type; repeatable or comma-separated (default: all types)")
	fs.StringVar(&s.agent, "filter-agent", "", "print only events of this agent (default: all agents)")
	s.auth.register(fs, "bearer token sent to the server")
	fs.BoolVar(&s.noReconnect, "no-reconnect", false, "stop when the stream ends or the connection fails, instead of reconnecting (default false)")
	fs.DurationVar(&s.idleTimeout, "idle-timeout", time.Minute, "reconnect when the stream is silent this long, heartbeats included; 0 never")
	fs.BoolVar(&s.workers, "workers", false, "print the fleet's workers from GET /runtime/stats of the same server (runtime_id, healthy/stale/down, in_flight, concurrency_cap, agents) and exit, instead of following events (default false)")
	return cmd
}

// streamURL is --url with the filters added to its query; an --url not
// resolved yet (serverURL, when the command runs) is the default server.
func (s *statusCmd) streamURL() (string, error) {
	if s.url == "" {
		s.url = defaultURL
	}
	u, err := url.Parse(s.url)
	if err != nil {
		return "", fmt.Errorf("--url: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return "", fmt.Errorf("--url %q: want an http:// or https:// URL", s.url)
	}
	// --url is the server's base URL, as for every command; the stream's
	// own URL, which it used to be, still works.
	if !strings.HasSuffix(strings.TrimSuffix(u.Path, "/"), "/events/stream") {
		u.Path = strings.TrimSuffix(u.Path, "/") + "/events/stream"
		u.RawPath = ""
	}
	q := u.Query()
	for _, t := range s.eventTypes {
		t = strings.TrimSpace(t)
		if t == "" {
			continue
		}
		if !slices.Contains(svc.EventTypes, svc.EventType(t)) {
			names := make([]string, len(svc.EventTypes))
			for i, et := range svc.EventTypes {
				names[i] = string(et)
			}
			return "", fmt.Errorf("--filter-event-type %q: not an event type (known: %s)", t, strings.Join(names, ", "))
		}
		q.Add("event_type", t)
	}
	if s.agent != "" {
		q.Set("agent", s.agent)
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// refusedError is an answer of the server that retrying will not change.
type refusedError struct{ err error }

func (e *refusedError) Error() string { return e.err.Error() }
func (e *refusedError) Unwrap() error { return e.err }

func (s *statusCmd) run(ctx context.Context, out, errw io.Writer) error {
	if s.idleTimeout < 0 {
		return &exitError{code: 2, err: fmt.Errorf("--idle-timeout %v: must not be negative", s.idleTimeout)}
	}
	target, err := s.streamURL()
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	token, err := s.auth.resolve()
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	// No keep-alive: a stream's connection is not worth reusing, and no
	// idle connection outlives the command. No client timeout either: a
	// stream lasts as long as it lasts; --idle-timeout watches it.
	client := &http.Client{Transport: &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: 30 * time.Second,
		DisableKeepAlives:     true,
	}}
	backoff := s.minBackoff
	for {
		connected, err := s.follow(ctx, client, target, token, out, errw)
		if ctx.Err() != nil {
			return nil // interrupted: a normal way to stop
		}
		var refused *refusedError
		if errors.As(err, &refused) {
			return err
		}
		if s.noReconnect {
			return err // nil when the server ended the stream cleanly
		}
		if connected {
			backoff = s.minBackoff
		}
		why := "the server ended the stream"
		if err != nil {
			why = err.Error()
		}
		fmt.Fprintf(errw, "svc status: %s; reconnecting in %s\n", why, backoff)
		timer := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-timer.C:
		}
		backoff = min(2*backoff, s.maxBackoff)
	}
}

// follow makes one connection and prints its events until the stream
// ends. connected reports whether the server accepted the stream; the
// error is nil when it ended the stream cleanly.
func (s *statusCmd) follow(ctx context.Context, client *http.Client, target, token string, out, errw io.Writer) (connected bool, err error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return false, &refusedError{err}
	}
	req.Header.Set("Accept", "text/event-stream")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return false, fmt.Errorf("connect: %w", err)
	}
	defer resp.Body.Close()
	if err := checkStreamResponse(resp); err != nil {
		return false, err
	}
	fmt.Fprintf(errw, "svc status: connected to %s\n", target)

	// The idle timer ends the request when nothing, not even a heartbeat,
	// has come for idleTimeout: a peer that vanished without closing the
	// connection would otherwise hold the read forever.
	errIdle := fmt.Errorf("no data for --idle-timeout %s", s.idleTimeout)
	var idle *time.Timer
	if s.idleTimeout > 0 {
		idle = time.AfterFunc(s.idleTimeout, func() { cancel(errIdle) })
		defer idle.Stop()
	}
	err = readFrames(resp.Body, func() {
		if idle != nil {
			idle.Reset(s.idleTimeout)
		}
	}, func(data []byte) {
		var ev svc.RuntimeEvent
		if json.Unmarshal(data, &ev) != nil || ev.EventType == "" {
			fmt.Fprintf(errw, "svc status: skipped a frame that is not an event: %.80q\n", data)
			return
		}
		fmt.Fprintln(out, formatEvent(ev))
	})
	if cause := context.Cause(ctx); errors.Is(cause, errIdle) {
		return true, errIdle
	}
	if err != nil {
		return true, fmt.Errorf("stream dropped: %w", err)
	}
	return true, nil
}

// checkStreamResponse accepts a 200 event stream. A 5xx, 408 or 429 is
// worth retrying; any other answer is a refusal, explained with the
// server's problem detail when there is one.
func checkStreamResponse(resp *http.Response) error {
	if resp.StatusCode == http.StatusOK {
		ct := resp.Header.Get("Content-Type")
		if !strings.HasPrefix(ct, "text/event-stream") {
			return &refusedError{fmt.Errorf("%s answered %q, not an event stream: is --url the /events/stream route?", resp.Request.URL.Redacted(), ct)}
		}
		return nil
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	detail := strings.TrimSpace(string(body))
	var p struct {
		Detail string `json:"detail"`
	}
	if json.Unmarshal(body, &p) == nil && p.Detail != "" {
		detail = p.Detail
	}
	err := fmt.Errorf("%s: %s: %.200s", resp.Request.URL.Redacted(), resp.Status, detail)
	switch code := resp.StatusCode; {
	case code >= 500, code == http.StatusRequestTimeout, code == http.StatusTooManyRequests:
		return err
	case code == http.StatusNotFound:
		return &refusedError{fmt.Errorf("%w (a server without an event stream, or the wrong --url)", err)}
	}
	return &refusedError{err}
}

// readFrames reads server-sent events from r (the text/event-stream
// format): data lines are joined with newlines and handed to onData at the
// blank line that ends the frame; comments, ids and event names are read
// and dropped, since the data carries the event type. onLine is called for
// every line, heartbeats included. It returns nil at a clean end of the
// stream, else the read error.
func readFrames(r io.Reader, onLine func(), onData func([]byte)) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var data []byte
	hasData := false
	for {
		line, err := br.ReadBytes('\n')
		if err != nil {
			if errors.Is(err, io.EOF) {
				// The server closed the stream between frames, or in the
				// middle of one that is then incomplete and dropped.
				return nil
			}
			return err
		}
		onLine()
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			if hasData {
				onData(data)
			}
			data, hasData = data[:0], false
			continue
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		if string(field) != "data" {
			continue // a comment (": ping"), id, event or retry
		}
		value = bytes.TrimPrefix(value, []byte(" "))
		if hasData {
			data = append(data, '\n')
		}
		data = append(data, value...)
		hasData = true
	}
}

// formatEvent is one output line of svc status.
func formatEvent(ev svc.RuntimeEvent) string {
	var b strings.Builder
	b.WriteString(plainOrQuoted(string(ev.EventType), "-"))
	b.WriteString(" agent=" + plainOrQuoted(ev.AgentName, "-"))
	b.WriteString(" task=" + plainOrQuoted(ev.TaskID, "-"))
	b.WriteString(" trace=" + plainOrQuoted(ev.TraceID, "-"))
	keys := make([]string, 0, len(ev.Payload))
	for k := range ev.Payload {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		b.WriteString(" " + plainOrQuoted(k, `""`) + "=" + formatValue(ev.Payload[k]))
	}
	return b.String()
}

// formatValue prints strings and numbers as they are and everything else
// as JSON.
func formatValue(v any) string {
	switch x := v.(type) {
	case string:
		return plainOrQuoted(x, `""`)
	case json.Number:
		return x.String()
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%q", fmt.Sprint(v))
	}
	return string(b)
}

// plainOrQuoted returns s itself when it reads back unambiguously in a
// line of key=value pairs, else s JSON-quoted; empty is what an empty s
// prints as.
func plainOrQuoted(s, empty string) string {
	if s == "" {
		return empty
	}
	plain := utf8.ValidString(s) && s != "-" && s != `""`
	for _, r := range s {
		if !plain {
			break
		}
		plain = !unicode.IsSpace(r) && unicode.IsPrint(r) && r != '"' && r != '=' && r != '\\'
	}
	if plain {
		return s
	}
	b, _ := json.Marshal(s) // a string always encodes
	return string(b)
}
