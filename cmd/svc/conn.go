package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/app"
	"github.com/svc-dev/svc/http/client"
)

// defaultURL is where the client commands that need a server look for one
// when neither --url nor $SVC_URL names it.
const defaultURL = "http://127.0.0.1:8420"

// urlUsage is --url's help on the commands that talk to a server; the
// default is resolved when the command runs (serverURL), so that the help
// says it once.
const urlUsage = "base URL of the server (default $SVC_URL, else " + defaultURL + ")"

// serverURL is the server a client command talks to: flag (--url) when
// given, else $SVC_URL, else defaultURL, which it says on w in one line,
// with how to name another, since a user who meant another server (or to
// run in process) would otherwise only see a connection refused.
func serverURL(flag string, w io.Writer) string {
	if flag != "" {
		return flag
	}
	if v := os.Getenv("SVC_URL"); v != "" {
		return v
	}
	fmt.Fprintf(w, "svc: no --url given and SVC_URL not set: trying %s (set --url or SVC_URL to use another server)\n", defaultURL)
	return defaultURL
}

// remoteFlags are the flags of a command that talks to a server: --url
// (its base URL), the bearer token and the timeout of each call.
type remoteFlags struct {
	url     string
	auth    authFlags
	timeout time.Duration
}

// register adds the flags; urlDefault is --url's default ("" for the
// commands that run in process without one).
func (r *remoteFlags) register(fs *pflag.FlagSet, urlDefault, urlUsage string) {
	fs.StringVar(&r.url, "url", urlDefault, urlUsage)
	r.auth.register(fs, "bearer token sent to the server of --url")
	fs.DurationVar(&r.timeout, "timeout", 30*time.Second, "HTTP timeout of each call to --url: a synchronous run or gather is one call, so raise it for long ones (waiting for a submitted run is many short calls)")
}

// client returns a client of --url (resolved by serverURL, which may say
// so on w); its errors are usage errors.
func (r *remoteFlags) client(w io.Writer) (*client.Client, error) {
	r.url = serverURL(r.url, w)
	tok, err := r.auth.resolve()
	if err != nil {
		return nil, err
	}
	if r.timeout <= 0 {
		return nil, fmt.Errorf("--timeout %v: must be positive", r.timeout)
	}
	c, err := client.New(r.url, client.WithAuthToken(tok), client.WithTimeout(r.timeout))
	if err != nil {
		return nil, fmt.Errorf("--url: %w", err)
	}
	return c, nil
}

// connFlags are the flags of a command that runs work either in process
// (--specs DIR) or on a server (--url).
type connFlags struct {
	runtimeFlags
	remoteFlags
}

func (f *connFlags) register(fs *pflag.FlagSet) {
	f.runtimeFlags.register(fs, "")
	f.remoteFlags.register(fs, "", "base URL of a server to run on (default $SVC_URL, else "+defaultURL+"); with --specs DIR the command runs in process instead")
}

// backend is what a command runs on: the runtime of an in-process app,
// or a client of a server.
type backend interface {
	svc.Backend
	svc.GroupBackend
	svc.RunBackend
}

// conn is an open backend; close releases it (for an in-process app, shut
// it down).
type conn struct {
	backend
	inProcess bool
	close     func()
}

// open starts the in-process runtime or connects to --url. Its errors are
// exitErrors with the right status.
func (f *connFlags) open(cmd *cobra.Command) (*conn, error) {
	usage := func(err error) error { return &exitError{code: 2, err: err} }
	if f.url != "" && f.specs != "" {
		return nil, usage(errors.New("give --specs DIR (in process) or --url URL (a server), not both"))
	}
	if f.specs == "" {
		// A server: --url, $SVC_URL, or the default address.
		c, err := f.client(cmd.ErrOrStderr())
		if err != nil {
			return nil, usage(err)
		}
		return &conn{backend: c, close: func() { _ = c.Close() }}, nil
	}
	if cmd.Flags().Changed("auth-token") || cmd.Flags().Changed("auth-token-file") {
		return nil, usage(errors.New("--auth-token and --auth-token-file need --url"))
	}
	// In process, the log (and the events in it) goes to stderr at warn
	// level and above unless --log-level asks otherwise: the result on
	// stdout is what a run is for.
	if !cmd.Flags().Changed("log-level") {
		f.logLevel = "warn"
	}
	log, err := f.logger()
	if err != nil {
		return nil, usage(err)
	}
	// The process without its server and stores: runs in memory, no
	// event store, nothing listening.
	o := f.appOptions(cmd.Flags(), log)
	o.NoListen, o.Store, o.Events = true, "memory", "none"
	a, err := app.New(o)
	if err != nil {
		_ = log.Sync()
		return nil, appError(f.specs, err)
	}
	if err := a.Start(); err != nil {
		_ = log.Sync()
		return nil, appError(f.specs, err)
	}
	b, ok := a.Backend().(backend)
	if !ok {
		return nil, &exitError{code: 1, err: fmt.Errorf("the in-process runtime (%T) does not run groups and submitted runs", a.Backend())}
	}
	return &conn{backend: b, inProcess: true, close: func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = a.Shutdown(ctx)
		_ = log.Sync()
	}}, nil
}

// kindOf tells whether target is an agent or a group, by the lists the
// backend serves; kind ("agent", "group" or "" for either) settles a name
// that is both.
func kindOf(ctx context.Context, b backend, target, flag string) (svc.TargetKind, error) {
	kind := svc.TargetKind(flag)
	switch kind {
	case "", svc.TargetAgent, svc.TargetGroup:
	default:
		return "", &exitError{code: 2, err: fmt.Errorf("--kind %q: want agent or group", kind)}
	}
	agents, err := b.Agents(ctx)
	if err != nil {
		return "", err
	}
	groups, err := b.Groups(ctx)
	if err != nil {
		return "", err
	}
	isAgent, isGroup := contains(agents, target), contains(groups, target)
	switch {
	case kind == svc.TargetAgent && isAgent, kind == svc.TargetGroup && isGroup:
		return kind, nil
	case kind == "" && isAgent && isGroup:
		return "", &exitError{code: 2, err: fmt.Errorf("%q is both an agent and a group: say which with --kind agent or --kind group", target)}
	case kind == "" && isAgent:
		return svc.TargetAgent, nil
	case kind == "" && isGroup:
		return svc.TargetGroup, nil
	case kind != "":
		return "", svc.Errorf(svc.KindRegistry, "unknown %s %q", kind, target)
	}
	return "", svc.Errorf(svc.KindRegistry, "unknown agent or group %q", target)
}

func contains(names []string, name string) bool {
	for _, n := range names {
		if n == name {
			return true
		}
	}
	return false
}
