package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Bad worker command lines are refused with exit 2 and a message that says
// what to do, before anything connects.
func TestWorkerUsage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no broker", []string{"worker", "start", "--all-from", exampleSpecs}, "--broker is required"},
		{"no agents", []string{"worker", "start", "--broker", "memory://"}, "--all-from DIR, or --specs DIR"},
		{"both sources", []string{"worker", "start", "--broker", "memory://", "--all-from", exampleSpecs, "--specs", exampleSpecs}, "give one"},
		{"agents with all-from", []string{"worker", "start", "--broker", "memory://", "--all-from", exampleSpecs, "--agents", "echo"}, "--agents goes with --specs"},
		{"zero concurrency", []string{"worker", "start", "--broker", "memory://", "--all-from", exampleSpecs, "--concurrency", "0"}, "--concurrency must be at least 1"},
		{"embedded", []string{"worker", "start", "--broker", "embedded", "--all-from", exampleSpecs}, "svc serve --broker embedded"},
		{"unknown scheme", []string{"worker", "start", "--broker", "kafka://k:9092", "--all-from", exampleSpecs}, "--broker"},
		{"unknown agent", []string{"worker", "start", "--broker", "memory://", "--specs", exampleSpecs, "--agents", "nope"}, `unknown agent "nope"`},
		{"serve listen without embedded", []string{"serve", "--broker", "memory://", "--nats-listen", "127.0.0.1:1"}, "--nats-listen needs --broker embedded"},
		{"serve ack-wait without broker", []string{"serve", "--ack-wait", "5s"}, "--ack-wait needs --broker"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := svcExec(t, nil, "", tc.args...)
			if r.code != 2 || !strings.Contains(r.stderr, tc.want) {
				t.Fatalf("exit %d, stderr:\n%s\nwant exit 2 and %q", r.code, r.stderr, tc.want)
			}
		})
	}
}

// A worker on an unreachable broker fails at start (exit 1) rather than at
// its first task.
func TestWorkerBrokerUnreachable(t *testing.T) {
	r := svcExec(t, nil, "", "worker", "start", "--broker", "nats://127.0.0.1:1", "--all-from", exampleSpecs)
	if r.code != 1 || !strings.Contains(r.stderr, "nats") {
		t.Fatalf("exit %d, stderr:\n%s", r.code, r.stderr)
	}
}

func TestWorkerHelp(t *testing.T) {
	r := svcExec(t, nil, "", "worker", "start", "--help")
	for _, flag := range []string{"--broker", "--all-from", "--agents", "--concurrency", "--prefetch", "--heartbeat-seconds",
		"--consumer-id", "--shutdown-grace", "--ack-wait", "--max-deliver", "--dispatch-nested"} {
		if !strings.Contains(r.stdout, flag) {
			t.Errorf("worker start --help lacks %s", flag)
		}
	}
	r = svcExec(t, nil, "", "serve", "--help")
	for _, flag := range []string{"--broker", "--nats-listen", "--ack-wait", "--max-deliver"} {
		if !strings.Contains(r.stdout, flag) {
			t.Errorf("serve --help lacks %s", flag)
		}
	}
}

// A bad key file or SVC_BROKER_KEYS stops serve and worker before they
// connect, naming the file and line (or the variable).
func TestBrokerKeysUsage(t *testing.T) {
	keys := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(keys, []byte("# fleet keys\nnew:0123456789abcdef-new\nold:short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"serve bad file", nil, []string{"serve", "--broker", "memory://", "--broker-keys", keys}, keys + ":3: "},
		{"worker bad file", nil, []string{"worker", "start", "--broker", "memory://", "--all-from", exampleSpecs, "--broker-keys", keys}, keys + ":3: "},
		{"worker missing file", nil, []string{"worker", "start", "--broker", "memory://", "--all-from", exampleSpecs, "--broker-keys", keys + ".nope"}, "keys.nope"},
		{"worker bad env", []string{"SVC_BROKER_KEYS=k1"}, []string{"worker", "start", "--broker", "memory://", "--all-from", exampleSpecs}, "SVC_BROKER_KEYS"},
		{"serve keys without broker", nil, []string{"serve", "--broker-keys", keys}, "--broker-keys needs --broker"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := svcExec(t, tc.env, "", tc.args...)
			if r.code != 2 || !strings.Contains(r.stderr, tc.want) {
				t.Fatalf("exit %d, stderr:\n%s\nwant exit 2 and %q", r.code, r.stderr, tc.want)
			}
		})
	}
}
