package mcp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/svc-dev/svc/internal/zapslog"
)

// session is one connection to a server: an MCP client session and, for
// stdio, the subprocess behind it.
type session struct {
	cs      *sdk.ClientSession
	gen     int
	started time.Time
	// cancel ends the context the session was opened with; the SSE
	// transport's event stream lives as long as that context.
	cancel  context.CancelCauseFunc
	cmd     *exec.Cmd
	pid     int // the stdio subprocess (and its process group), 0 if none
	stderr  *tailWriter
	probing atomic.Bool
	down    sync.Once
}

func (s *session) stderrTail() string {
	if s.stderr == nil {
		return ""
	}
	return s.stderr.tail()
}

var errStartTimeout = errors.New("start timeout")

// connect opens a session: it starts the subprocess or opens the HTTP
// session, runs the MCP handshake and lists the tools, all within
// StartTimeout. On failure nothing it started is left running.
func (s *server) connect(base context.Context, gen int, onToolsChanged func()) (*session, []*sdk.Tool, error) {
	ctx, cancel := context.WithCancelCause(base)
	timer := time.AfterFunc(s.m.cfg.StartTimeout, func() { cancel(errStartTimeout) })
	sess := &session{gen: gen, started: time.Now(), cancel: cancel}
	t := &recorder{Transport: s.transport(sess), started: func() { s.register(sess) }}
	client := sdk.NewClient(&sdk.Implementation{Name: "svc", Version: "1"}, &sdk.ClientOptions{
		Logger: slog.New(zapslog.New(s.log)),
		// No roots, sampling or elicitation: agents cannot answer them.
		Capabilities:           &sdk.ClientCapabilities{},
		ToolListChangedHandler: func(context.Context, *sdk.ToolListChangedRequest) { onToolsChanged() },
	})
	cs, err := client.Connect(ctx, t, nil)
	var tools []*sdk.Tool
	if err == nil {
		sess.cs = cs
		tools, err = listTools(ctx, cs)
	}
	if !timer.Stop() && err == nil {
		err = errStartTimeout // it fired just as we finished: the session may be cut
	}
	if err == nil {
		s.mu.Lock()
		stopped := s.stopped
		if !stopped {
			s.sessions[sess] = struct{}{}
		}
		s.mu.Unlock()
		if !stopped {
			return sess, tools, nil
		}
		err = shuttingDown()
	}
	if ctx.Err() != nil && errors.Is(context.Cause(ctx), errStartTimeout) {
		err = fmt.Errorf("no answer within %v: %w", s.m.cfg.StartTimeout, err)
	}
	switch {
	case cs != nil:
		_ = cs.Close()
	case t.conn != nil:
		_ = t.conn.Close()
	}
	s.teardown(sess)
	if tail := sess.stderrTail(); tail != "" {
		err = fmt.Errorf("%w; stderr: %s", err, tail)
	}
	return nil, nil, err
}

func listTools(ctx context.Context, cs *sdk.ClientSession) ([]*sdk.Tool, error) {
	var out []*sdk.Tool
	for t, err := range cs.Tools(ctx, nil) {
		if err != nil {
			return nil, fmt.Errorf("list tools: %w", err)
		}
		out = append(out, t)
	}
	return out, nil
}

// transport builds the SDK transport of the server's configuration.
func (s *server) transport(sess *session) sdk.Transport {
	switch s.cfg.Transport {
	case TransportStdio:
		cmd := exec.Command(s.cfg.Command, s.cfg.Args...)
		cmd.Env = environ(s.cfg.Env)
		sess.stderr = &tailWriter{log: s.log}
		cmd.Stderr = sess.stderr
		// A grandchild holding stderr open must not hold up reaping.
		cmd.WaitDelay = s.m.cfg.StopGrace
		setProcessGroup(cmd)
		sess.cmd = cmd
		return &sdk.CommandTransport{Command: cmd, TerminateDuration: s.m.cfg.StopGrace}
	case TransportSSE:
		return &sdk.SSEClientTransport{Endpoint: s.cfg.URL, HTTPClient: s.m.http}
	default:
		return &sdk.StreamableClientTransport{Endpoint: s.cfg.URL, HTTPClient: s.m.http}
	}
}

// register records a started subprocess, so Shutdown can kill it even
// while its handshake is still running.
func (s *server) register(sess *session) {
	if sess.cmd == nil || sess.cmd.Process == nil {
		return
	}
	sess.pid = sess.cmd.Process.Pid
	s.set(func() { s.procs[sess.pid] = struct{}{} })
}

// teardown finishes a session that has closed: it kills whatever is left
// of its process group (the subprocess itself was reaped by the close) and
// forgets it. It runs once per session.
func (s *server) teardown(sess *session) {
	sess.down.Do(func() {
		sess.cancel(nil)
		if sess.pid != 0 {
			killGroup(sess.pid)
		}
		s.set(func() {
			delete(s.procs, sess.pid)
			delete(s.sessions, sess)
		})
	})
}

// environ is this process's environment with extra added, extra winning.
func environ(extra map[string]string) []string {
	env := os.Environ()
	if len(extra) == 0 {
		return env
	}
	env = slices.DeleteFunc(env, func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		_, ok := extra[k]
		return ok
	})
	keys := make([]string, 0, len(extra))
	for k := range extra {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		env = append(env, k+"="+extra[k])
	}
	return env
}

// recorder keeps the connection its transport opened, so a handshake that
// fails can close it (and with it the subprocess) even when the SDK does
// not hand back a session to close.
type recorder struct {
	sdk.Transport
	conn    sdk.Connection
	started func()
}

func (r *recorder) Connect(ctx context.Context) (sdk.Connection, error) {
	c, err := r.Transport.Connect(ctx)
	r.conn = c
	r.started() // a stdio command may have started even if Connect failed
	return c, err
}

// tailWriter receives a subprocess's stderr: it logs each line at debug
// level and keeps the last bytes, which go into the error of a failed
// start, where they usually say why.
type tailWriter struct {
	log  *zap.Logger
	mu   sync.Mutex
	buf  []byte // the last tailKeep bytes
	line []byte // an incomplete line
}

const (
	tailKeep = 2048
	tailShow = 512
)

func (w *tailWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	if len(w.buf) > 2*tailKeep {
		w.buf = append([]byte(nil), w.buf[len(w.buf)-tailKeep:]...)
	}
	w.line = append(w.line, p...)
	for {
		i := bytes.IndexByte(w.line, '\n')
		if i < 0 {
			break
		}
		if ce := w.log.Check(zapcore.DebugLevel, "mcp server stderr"); ce != nil {
			ce.Write(zap.ByteString("line", bytes.TrimRight(w.line[:i], "\r")))
		}
		w.line = w.line[i+1:]
	}
	if len(w.line) > tailKeep {
		w.line = w.line[:0]
	}
	w.line = append([]byte(nil), w.line...)
	return len(p), nil
}

func (w *tailWriter) tail() string {
	w.mu.Lock()
	b := w.buf
	if len(b) > tailShow {
		b = b[len(b)-tailShow:]
	}
	s := strings.TrimSpace(string(b))
	w.mu.Unlock()
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", " | ")), " ")
}
