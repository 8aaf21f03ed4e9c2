package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/servertest"
	"github.com/svc-dev/svc/internal/testutil"
)

// The distributed mode with real processes on loopback (issue 11, parts 6
// and 7): one `svc serve --broker …` publisher and `svc worker start`
// processes, over the embedded NATS broker and over a real redis-server.
// Every process is killed by its PID when its test ends.

// fleetWait bounds every wait for the fleet: only a hang reaches it on a
// loaded machine.
const fleetWait = 60 * time.Second

// fleetSpecs are the agents of the fleet tests: echo (work in flight for a
// moment), slow (until cancelled), nap (long enough to be caught by a
// drain) and ghost, which the server knows and no worker serves.
var fleetSpecs = map[string]string{
	"agents/echo.yaml": "version: 1\nname: echo\nmodel: test:echo\nmodel_settings: {latency_ms: 50}\n",
	"agents/slow.yaml": "version: 1\nname: slow\nmodel: test:echo\nmodel_settings: {latency_ms: 60000}\n",
	"agents/nap.yaml":  "version: 1\nname: nap\nmodel: test:echo\nmodel_settings: {latency_ms: 2000}\n",
	// steady is the load of a worker killed mid-way: its tasks last long
	// enough that one seen holding tasks (by its log, read late on a busy
	// machine) still holds them when the kill lands.
	"agents/steady.yaml": "version: 1\nname: steady\nmodel: test:echo\nmodel_settings: {latency_ms: 400}\n",
	"agents/ghost.yaml":  "version: 1\nname: ghost\nmodel: test:echo\n",
}

// fleetBroker is a fresh broker for one test: the flags that make serve its
// publisher, and the URL workers connect to.
type fleetBroker struct {
	serveArgs []string
	workerURL string
}

var fleetBrokers = []struct {
	name  string
	setup func(t *testing.T) fleetBroker
}{
	{"embedded", func(t *testing.T) fleetBroker {
		addr := "127.0.0.1:" + freePort(t)
		return fleetBroker{serveArgs: []string{"--broker", "embedded", "--nats-listen", addr}, workerURL: "nats://" + addr}
	}},
	{"redis", func(t *testing.T) fleetBroker {
		url := servertest.Redis(t)
		return fleetBroker{serveArgs: []string{"--broker", url}, workerURL: url}
	}},
}

// fleetProc is a running svc process of a fleet (serve or worker).
type fleetProc struct {
	*proc
	url string // serve's HTTP address
}

// startFleetProc starts svc with args; it is SIGKILLed (if still running)
// when the test ends.
func startFleetProc(t *testing.T, name string, args ...string) *fleetProc {
	t.Helper()
	return &fleetProc{proc: startProc(t, name, nil, args...)}
}

// startFleetServe starts `svc serve` as the fleet's publisher on a free
// port, with a short ack deadline, and waits for its address.
func startFleetServe(t *testing.T, name, specs, dataDir string, b fleetBroker, extra ...string) *fleetProc {
	t.Helper()
	args := append([]string{"serve", "--host", "127.0.0.1", "--port", "0", "--specs", specs, "--data-dir", dataDir,
		"--ack-wait", "2s", "--log-format", "json"}, b.serveArgs...)
	p := startFleetProc(t, name, append(args, extra...)...)
	p.waitLog(t, regexp.MustCompile(`"msg":"svc serving"`))
	p.url = regexp.MustCompile(`"url":"(http://127\.0\.0\.1:[0-9]+)"`).FindStringSubmatch(p.stderr.String())[1]
	return p
}

// startFleetWorker starts `svc worker start` serving echo, slow and nap,
// logging every event as JSON on stderr, and waits for worker_started.
func startFleetWorker(t *testing.T, name, specs string, b fleetBroker, extra ...string) *fleetProc {
	t.Helper()
	args := append([]string{"worker", "start", "--broker", b.workerURL, "--specs", specs, "--agents", "echo,slow,nap,steady",
		"--ack-wait", "2s", "--heartbeat-seconds", "1", "--log-format", "json", "--runtime-id", name}, extra...)
	p := startFleetProc(t, name, args...)
	p.waitLog(t, regexp.MustCompile(`"msg":"worker_started"`))
	return p
}

// waitLog waits until stderr matches re, failing if the process exits
// first or nothing matches within fleetWait.
func (p *fleetProc) waitLog(t *testing.T, re *regexp.Regexp) {
	t.Helper()
	deadline := time.Now().Add(fleetWait)
	for !re.MatchString(p.stderr.String()) {
		select {
		case <-p.done:
			if re.MatchString(p.stderr.String()) {
				return
			}
			t.Fatalf("%s exited with %d before logging %s; stderr:\n%s", p.name, p.code, re, tail(p.stderr.String(), 8<<10))
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s logged no %s within %v", p.name, re, fleetWait)
		}
	}
}

func (p *fleetProc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("%s: %v", p.name, err)
	}
}

// wait waits at most limit for the process to exit and returns its code.
func (p *fleetProc) wait(t *testing.T, limit time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(limit):
		t.Fatalf("%s still running %v later", p.name, limit)
		return 0
	}
}

// kill SIGKILLs the process and waits for it to be gone.
func (p *fleetProc) kill(t *testing.T) {
	t.Helper()
	p.signal(t, syscall.SIGKILL)
	p.wait(t, fleetWait)
}

// logEvent is one JSON log line of a process: an event of the log emitter
// (msg is the event type) or any other log line.
type logEvent struct {
	Msg    string `json:"msg"`
	TaskID string `json:"task_id"`
	Reason string `json:"reason"`
}

// events parses the JSON lines of stderr; a line cut short by a kill, and
// the banner, are skipped.
func (p *fleetProc) events() []logEvent {
	var out []logEvent
	for _, line := range strings.Split(p.stderr.String(), "\n") {
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var ev logEvent
		if json.Unmarshal([]byte(line), &ev) == nil {
			out = append(out, ev)
		}
	}
	return out
}

// tasks are the task ids of the events of type msg on this process.
func (p *fleetProc) tasks(msg string) map[string]int {
	m := map[string]int{}
	for _, ev := range p.events() {
		if ev.Msg == msg && ev.TaskID != "" {
			m[ev.TaskID]++
		}
	}
	return m
}

// hasEvent reports whether the process logged an event of type msg for
// task (with reason, when not empty).
func (p *fleetProc) hasEvent(msg, task, reason string) bool {
	for _, ev := range p.events() {
		if ev.Msg == msg && ev.TaskID == task && (reason == "" || ev.Reason == reason) {
			return true
		}
	}
	return false
}

// countEvent counts the log lines msg of task.
func (p *fleetProc) countEvent(msg, task string) int {
	n := 0
	for _, ev := range p.events() {
		if ev.Msg == msg && ev.TaskID == task {
			n++
		}
	}
	return n
}

// fleetClient keeps connections alive across the many requests of a load;
// its idle connections are closed when the test ends (goleak).
type fleetClient struct {
	t    *testing.T
	base string
	c    *http.Client
}

func newFleetClient(t *testing.T, base string) *fleetClient {
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	t.Cleanup(tr.CloseIdleConnections)
	return &fleetClient{t: t, base: base, c: &http.Client{Timeout: fleetWait, Transport: tr}}
}

// do sends a request; errors are returned, not fatal, so goroutines may
// call it.
func (c *fleetClient) do(method, path, body string) (int, []byte, http.Header, error) {
	req, err := http.NewRequest(method, c.base+path, strings.NewReader(body))
	if err != nil {
		return 0, nil, nil, err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.c.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, resp.Header, err
}

// must is do that fails the test on a transport error (test goroutine
// only).
func (c *fleetClient) must(method, path, body string) (int, []byte) {
	c.t.Helper()
	code, b, _, err := c.do(method, path, body)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	return code, b
}

// submit posts a run of target with the given task id and input and
// returns its run id.
func (c *fleetClient) submit(target, taskID, input string) (string, error) {
	body := fmt.Sprintf(`{"target":%q,"task":{"id":%q,"input":%s}}`, target, taskID, input)
	code, b, _, err := c.do(http.MethodPost, "/submit", body)
	if err != nil {
		return "", err
	}
	var r struct {
		RunID string `json:"run_id"`
	}
	if code != http.StatusAccepted || json.Unmarshal(b, &r) != nil || r.RunID == "" {
		return "", fmt.Errorf("submit %s: %d %s", target, code, b)
	}
	return r.RunID, nil
}

func (c *fleetClient) mustSubmit(target, taskID, input string) string {
	c.t.Helper()
	id, err := c.submit(target, taskID, input)
	if err != nil {
		c.t.Fatal(err)
	}
	return id
}

// state is the run's state ("" on an error).
func (c *fleetClient) state(runID string) string {
	code, b, _, err := c.do(http.MethodGet, "/runs/"+runID+"/status", "")
	if err != nil || code != http.StatusOK {
		return ""
	}
	var st struct {
		State string `json:"state"`
	}
	_ = json.Unmarshal(b, &st)
	return st.State
}

// waitState waits until the run is in state want, failing if it ends in
// another terminal state.
func (c *fleetClient) waitState(runID, want string) {
	c.t.Helper()
	var got string
	testutil.Within(c.t, fleetWait, "run "+runID+" to be "+want, func() bool {
		got = c.state(runID)
		if got != want && isTerminal(got) {
			c.t.Fatalf("run %s ended %s, want %s", runID, got, want)
		}
		return got == want
	})
}

func isTerminal(state string) bool {
	return state == "completed" || state == "failed" || state == "cancelled"
}

// streamEvents reads a terminal run's event stream to its end and returns
// the event types in order.
func (c *fleetClient) streamEvents(runID string) ([]string, error) {
	code, b, _, err := c.do(http.MethodGet, "/runs/"+runID+"/stream", "")
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("stream of %s: %d %s", runID, code, b)
	}
	var types []string
	for _, line := range strings.Split(string(b), "\n") {
		if typ, ok := strings.CutPrefix(line, "event: "); ok {
			types = append(types, typ)
		}
	}
	return types, nil
}

// unfinished counts the runs the server has pending or running (at most
// 1000 of each).
func (c *fleetClient) unfinished() (int, error) {
	n := 0
	for _, st := range []string{"pending", "running"} {
		code, b, _, err := c.do(http.MethodGet, "/runs?limit=1000&state="+st, "")
		if err != nil {
			return 0, err
		}
		var page struct {
			Runs []json.RawMessage `json:"runs"`
		}
		if code != http.StatusOK || json.Unmarshal(b, &page) != nil {
			return 0, fmt.Errorf("GET /runs?state=%s: %d %s", st, code, b)
		}
		n += len(page.Runs)
	}
	return n, nil
}

// parallel runs f(i) for i in [0, n) on at most width goroutines and
// returns the errors.
func parallel(n, width int, f func(i int) error) []error {
	var (
		wg   sync.WaitGroup
		next atomic.Int64
		mu   sync.Mutex
		errs []error
	)
	for range width {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return errs
}

func firstErrors(t *testing.T, what string, errs []error) {
	t.Helper()
	if len(errs) == 0 {
		return
	}
	t.Fatalf("%s: %d errors, the first: %v", what, len(errs), errors.Join(errs[:min(5, len(errs))]...))
}

// TestFleet runs alone, each broker after the other: run beside other
// tests, the worker it kills mid-load had sometimes finished its tasks
// before the kill landed, which the test must see redelivered.
func TestFleet(t *testing.T) {
	// Each case starts its own broker and processes on free ports, and
	// spends most of its time waiting on them (ack deadlines, drains): run
	// beside the others, not before them.
	t.Parallel()
	specs := writeSpecs(t, fleetSpecs)
	for _, b := range fleetBrokers {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			t.Run("LoadWithWorkerKilled", func(t *testing.T) { fleetLoadWithWorkerKilled(t, specs, b.setup(t)) })
			t.Run("Cancel", func(t *testing.T) { fleetCancel(t, specs, b.setup(t)) })
			t.Run("Drain", func(t *testing.T) { fleetDrain(t, specs, b.setup(t)) })
			t.Run("DrainGraceExpires", func(t *testing.T) { fleetDrainGraceExpires(t, specs, b.setup(t)) })
			t.Run("WorkerRestartSameConsumer", func(t *testing.T) { fleetWorkerRestartSameConsumer(t, specs, b.setup(t)) })
			t.Run("DeadLetter", func(t *testing.T) { fleetDeadLetter(t, specs, b.setup(t)) })
			t.Run("UnknownAgent", func(t *testing.T) { fleetUnknownAgent(t, specs, b.setup(t)) })
			t.Run("PublisherRestart", func(t *testing.T) { fleetPublisherRestart(t, specs, b.setup(t)) })
			t.Run("PublisherRestartUnderWorkers", func(t *testing.T) { fleetPublisherRestartUnderWorkers(t, specs, b.setup(t)) })
		})
	}
}

// 1,000 submitted runs over three workers, one SIGKILLed mid-load: every
// run completes with its own output, none has two results, and the tasks
// the killed worker held are completed by the others after the ack
// deadline.
func fleetLoadWithWorkerKilled(t *testing.T, specs string, b fleetBroker) {
	const runs, clients = 1000, 16
	start := time.Now()
	s := startFleetServe(t, "serve", specs, t.TempDir(), b)
	var workers []*fleetProc
	for i := range 3 {
		workers = append(workers, startFleetWorker(t, fmt.Sprintf("worker-%d", i), specs, b, "--concurrency", "16"))
	}
	c := newFleetClient(t, s.url)
	input := func(i int) string { return fmt.Sprintf(`{"n":%d,"s":"load-%04d"}`, i, i) }

	// The kill: once a few hundred tasks are done, the first worker dies
	// while it holds tasks (by its own log: started, not finished; two or
	// more, or one once most of the load is done).
	victim := workers[0]
	killed := make(chan int, 1) // completions seen at the kill
	stopWatch := make(chan struct{})
	var watch sync.WaitGroup
	watch.Add(1)
	go func() {
		defer watch.Done()
		for {
			n := 0
			for _, w := range workers {
				n += strings.Count(w.stderr.String(), `"msg":"agent_completed"`)
			}
			log := victim.stderr.String()
			holds := strings.Count(log, `"msg":"agent_spawned"`) - strings.Count(log, `"msg":"agent_completed"`)
			if n >= 300 && (holds >= 2 || n >= 700 && holds >= 1) {
				_ = victim.cmd.Process.Signal(syscall.SIGKILL)
				killed <- n
				return
			}
			select {
			case <-stopWatch:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	defer func() { close(stopWatch); watch.Wait() }()

	ids := make([]string, runs)
	firstErrors(t, "submit", parallel(runs, clients, func(i int) error {
		id, err := c.submit("steady", fmt.Sprintf("load-%04d", i), input(i))
		ids[i] = id
		return err
	}))
	t.Logf("%d runs submitted in %v", runs, time.Since(start).Round(time.Millisecond))
	var atKill int
	select {
	case atKill = <-killed:
	case <-time.After(fleetWait):
		t.Fatalf("%s was never found holding tasks after 300 completions: it was not killed", victim.name)
	}
	victim.wait(t, fleetWait)
	t.Logf("%s SIGKILLed after %d completions", victim.name, atKill)

	testutil.Within(t, 2*fleetWait, "every run to be terminal", func() bool {
		n, err := c.unfinished()
		if err != nil {
			t.Fatal(err)
		}
		return n == 0
	})
	t.Logf("all runs terminal %v after the start", time.Since(start).Round(time.Millisecond))

	// 0 lost, 0 swapped, 0 duplicated.
	firstErrors(t, "runs", parallel(runs, clients, func(i int) error {
		id := ids[i]
		if st := c.state(id); st != "completed" {
			return fmt.Errorf("run %d (%s) is %q, want completed", i, id, st)
		}
		code, body, _, err := c.do(http.MethodGet, "/runs/"+id+"/result", "")
		if err != nil {
			return err
		}
		var res struct {
			TaskID  string          `json:"task_id"`
			Success bool            `json:"success"`
			Output  json.RawMessage `json:"output"`
		}
		if code != http.StatusOK || json.Unmarshal(body, &res) != nil {
			return fmt.Errorf("result of run %d: %d %s", i, code, body)
		}
		var out bytes.Buffer
		if err := json.Compact(&out, res.Output); err != nil || out.String() != input(i) ||
			!res.Success || res.TaskID != fmt.Sprintf("load-%04d", i) {
			return fmt.Errorf("result of run %d is not its own: %s", i, body)
		}
		types, err := c.streamEvents(id)
		if err != nil {
			return err
		}
		completed := 0
		for _, typ := range types {
			if typ == "agent_completed" {
				completed++
			}
		}
		if completed != 1 {
			return fmt.Errorf("run %d: %d agent_completed events, want 1: %v", i, completed, types)
		}
		return nil
	}))

	// What the killed worker held when it died was run again, to the end,
	// by the others.
	spawned, done := victim.tasks("agent_spawned"), victim.tasks("agent_completed")
	var held []string
	for id := range spawned {
		if done[id] == 0 {
			held = append(held, id)
		}
	}
	if len(held) == 0 {
		t.Fatalf("%s held no task when it was killed (%d spawned, all completed): nothing was redelivered", victim.name, len(spawned))
	}
	// A task the victim logged as spawned but not as completed was either
	// still running when it died, and must then have been run again by
	// another worker, or had already answered and died before its
	// agent_completed line reached stderr (seen on a quiet machine: the
	// result goes back before the log line is written). Both end with the
	// run completed with its own result and exactly one agent_completed,
	// which the check above asserts for every run; here the first kind is
	// counted. That a task held by a dead worker is run again is asserted
	// on its own by the redelivery cases below (the nap tasks).
	slices.Sort(held)
	byOthers := map[string]int{}
	for _, w := range workers[1:] {
		for id, n := range w.tasks("agent_completed") {
			byOthers[id] += n
		}
	}
	rerun := 0
	for _, id := range held {
		if byOthers[id] > 0 {
			rerun++
		}
	}
	t.Logf("%d of the %d tasks %s logged as spawned and not completed were run again by the other workers",
		rerun, len(held), victim.name)
	t.Logf("load done in %v", time.Since(start).Round(time.Millisecond))
}

// A cancel of a run in flight on a worker stops the work there, and the
// run ends cancelled.
func fleetCancel(t *testing.T, specs string, b fleetBroker) {
	s := startFleetServe(t, "serve", specs, t.TempDir(), b)
	workers := []*fleetProc{startFleetWorker(t, "worker-0", specs, b), startFleetWorker(t, "worker-1", specs, b)}
	c := newFleetClient(t, s.url)
	id := c.mustSubmit("slow", "slow-1", `"wait"`)
	c.waitState(id, "running")
	var on *fleetProc
	testutil.Within(t, fleetWait, "a worker to start the slow task", func() bool {
		for _, w := range workers {
			if w.hasEvent("agent_spawned", "slow-1", "") {
				on = w
				return true
			}
		}
		return false
	})
	if code, body := c.must(http.MethodPost, "/runs/"+id+"/cancel", ""); code != http.StatusNoContent {
		t.Fatalf("cancel: %d %s, want 204", code, body)
	}
	c.waitState(id, "cancelled")
	types, err := c.streamEvents(id)
	if err != nil {
		t.Fatal(err)
	}
	if len(types) == 0 || types[len(types)-1] != "run_cancelled" {
		t.Errorf("run events %v: want run_cancelled last", types)
	}
	testutil.Within(t, fleetWait, on.name+" to stop the cancelled task", func() bool {
		return on.hasEvent("agent_failed", "slow-1", "CancelledError")
	})
	if code, _ := c.must(http.MethodGet, "/runs/"+id+"/result", ""); code != http.StatusConflict {
		t.Errorf("result of a cancelled run: %d, want 409", code)
	}
}

// A worker SIGTERMed while busy drains: it exits 0 within its grace after
// finishing what it runs, and those runs complete.
func fleetDrain(t *testing.T, specs string, b fleetBroker) {
	s := startFleetServe(t, "serve", specs, t.TempDir(), b)
	var workers []*fleetProc
	for i := range 3 {
		workers = append(workers, startFleetWorker(t, fmt.Sprintf("worker-%d", i), specs, b, "--shutdown-grace", "45s"))
	}
	c := newFleetClient(t, s.url)
	const naps = 4
	ids := make([]string, naps)
	for i := range naps {
		ids[i] = c.mustSubmit("nap", fmt.Sprintf("nap-%d", i), fmt.Sprintf(`{"nap":%d}`, i))
	}
	// Every worker holding a nap task is stopped while it runs.
	owner := map[string]*fleetProc{}
	testutil.Within(t, fleetWait, "every nap task to start on a worker", func() bool {
		for i := range naps {
			task := fmt.Sprintf("nap-%d", i)
			for _, w := range workers {
				if owner[task] == nil && w.hasEvent("agent_spawned", task, "") {
					owner[task] = w
				}
			}
		}
		return len(owner) == naps
	})
	busy := map[*fleetProc][]string{}
	for task, w := range owner {
		busy[w] = append(busy[w], task)
	}
	if len(busy) == len(workers) {
		// Keep one worker: the fleet keeps serving through the drain.
		for w := range busy {
			delete(busy, w)
			break
		}
	}
	for w := range busy {
		w.signal(t, syscall.SIGTERM)
	}
	for w, tasks := range busy {
		if code := w.wait(t, fleetWait); code != 0 {
			t.Errorf("%s exited with %d after SIGTERM, want 0", w.name, code)
		}
		if !strings.Contains(w.stderr.String(), `"msg":"worker_stopped"`) {
			t.Errorf("%s logged no worker_stopped", w.name)
		}
		// Drained, not handed back: it finished its own tasks.
		for _, task := range tasks {
			if !w.hasEvent("agent_completed", task, "") {
				t.Errorf("%s did not finish %s before exiting", w.name, task)
			}
		}
		// A task was still running when the drain began.
		log := w.stderr.String()
		down := strings.Index(log, `"msg":"svc shutting down"`)
		if down < 0 || !strings.Contains(log[down:], `"msg":"agent_completed"`) {
			t.Errorf("%s: no task finished after the drain began: the drain had nothing to wait for", w.name)
		}
	}
	for _, id := range ids {
		c.waitState(id, "completed")
	}
}

// A worker SIGTERMed with tasks that outlast its --shutdown-grace gives them
// back to the broker: another worker runs them and their runs complete.
func fleetDrainGraceExpires(t *testing.T, specs string, b fleetBroker) {
	s := startFleetServe(t, "serve", specs, t.TempDir(), b)
	first := startFleetWorker(t, "worker-0", specs, b, "--shutdown-grace", "300ms")
	c := newFleetClient(t, s.url)
	const naps = 2
	ids := make([]string, naps)
	for i := range naps {
		ids[i] = c.mustSubmit("nap", fmt.Sprintf("nap-%d", i), fmt.Sprintf(`{"nap":%d}`, i))
	}
	testutil.Within(t, fleetWait, "the nap tasks to start on the first worker", func() bool {
		return len(first.tasks("agent_spawned")) == naps
	})
	second := startFleetWorker(t, "worker-1", specs, b)
	first.signal(t, syscall.SIGTERM)
	code := first.wait(t, fleetWait)
	if !strings.Contains(first.stderr.String(), `"msg":"worker_stopped"`) {
		t.Errorf("%s logged no worker_stopped", first.name)
	}
	if n := len(first.tasks("agent_completed")); n != 0 {
		t.Fatalf("%s finished %d nap tasks within a 300ms grace: the test proves nothing", first.name, n)
	}
	for _, id := range ids {
		c.waitState(id, "completed")
	}
	for i := range naps {
		if task := fmt.Sprintf("nap-%d", i); !second.hasEvent("agent_completed", task, "") {
			t.Errorf("%s was not run by the second worker", task)
		}
	}
	t.Logf("%s exited with %d after handing its tasks back", first.name, code)
}

// A task delivered more than --max-deliver times (its workers died holding
// it) goes to the dead letter, and its run fails with the reason instead of
// waiting for its timeout.
func fleetDeadLetter(t *testing.T, specs string, b fleetBroker) {
	s := startFleetServe(t, "serve", specs, t.TempDir(), b)
	first := startFleetWorker(t, "worker-0", specs, b, "--max-deliver", "1")
	c := newFleetClient(t, s.url)
	id := c.mustSubmit("slow", "doomed", `"doomed"`)
	first.waitLog(t, regexp.MustCompile(`"msg":"agent_spawned".*"task_id":"doomed"`))
	first.kill(t)
	startFleetWorker(t, "worker-1", specs, b, "--max-deliver", "1")
	c.waitState(id, "failed")
	code, body := c.must(http.MethodGet, "/runs/"+id+"/result", "")
	if code != http.StatusOK || !strings.Contains(string(body), `"reason":"dead_letter"`) {
		t.Errorf("result of the dead-lettered run: %d %s, want the dead letter's reason", code, body)
	}
}

// A run of an agent the server knows and no worker serves fails with a
// TimeoutError that says so; the server stays healthy.
func fleetUnknownAgent(t *testing.T, specs string, b fleetBroker) {
	s := startFleetServe(t, "serve", specs, t.TempDir(), b, "--timeout-seconds", "3")
	startFleetWorker(t, "worker-0", specs, b)
	// The server has heard of the worker, so "no worker serves it" is
	// about ghost, not an empty fleet.
	s.waitLog(t, regexp.MustCompile(`"msg":"worker_heartbeat"`))
	c := newFleetClient(t, s.url)
	code, body, hdr, err := c.do(http.MethodPost, "/agents/ghost/run", `{"input":1}`)
	if err != nil {
		t.Fatal(err)
	}
	if code != http.StatusGatewayTimeout || hdr.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("run ghost: %d %s %s, want 504 problem+json", code, hdr.Get("Content-Type"), body)
	}
	var p problem
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatal(err)
	}
	if p.Error != "TimeoutError" || !strings.Contains(p.Detail, "no worker") || !strings.Contains(p.Detail, "ghost") {
		t.Errorf("problem %+v: want TimeoutError with a detail saying no worker serves ghost", p)
	}
	if code, body := c.must(http.MethodGet, "/healthz", ""); code != http.StatusOK {
		t.Errorf("healthz after the timeout: %d %s", code, body)
	}
	if code, body := c.must(http.MethodPost, "/agents/echo/run", `{"input":{"still":"serving"}}`); code != http.StatusOK ||
		!strings.Contains(string(body), `"still":"serving"`) {
		t.Errorf("echo after the timeout: %d %s", code, body)
	}
}

// A publisher SIGKILLed with runs still in the broker: after its restart on
// the same data dir (and broker), every run is terminal — completed, or
// failed "interrupted" — and the fleet serves new runs.
func fleetPublisherRestart(t *testing.T, specs string, b fleetBroker) {
	const runs = 20
	data := t.TempDir()
	s := startFleetServe(t, "serve", specs, data, b)
	w := startFleetWorker(t, "worker-0", specs, b)
	c := newFleetClient(t, s.url)
	c.waitState(c.mustSubmit("echo", "before", `"before"`), "completed")
	// No worker: the runs wait in the broker.
	w.signal(t, syscall.SIGTERM)
	if code := w.wait(t, fleetWait); code != 0 {
		t.Fatalf("worker exited with %d", code)
	}
	ids := make([]string, runs)
	for i := range runs {
		ids[i] = c.mustSubmit("echo", fmt.Sprintf("queued-%d", i), fmt.Sprintf(`{"queued":%d}`, i))
	}
	for _, id := range ids {
		c.waitState(id, "running")
	}
	testutil.Within(t, fleetWait, "every queued task to be dispatched", func() bool {
		return strings.Count(s.stderr.String(), `"msg":"agent_dispatched"`) >= runs+1
	})
	s.kill(t)

	s2 := startFleetServe(t, "serve-2", specs, data, b)
	w2 := startFleetWorker(t, "worker-1", specs, b)
	c2 := newFleetClient(t, s2.url)
	testutil.Within(t, fleetWait, "no run left pending or running", func() bool {
		n, err := c2.unfinished()
		if err != nil {
			t.Fatal(err)
		}
		return n == 0
	})
	code, body := c2.must(http.MethodGet, "/runs?limit=1000", "")
	var page struct {
		Runs []struct {
			RunID  string `json:"run_id"`
			State  string `json:"state"`
			Reason string `json:"reason"`
		} `json:"runs"`
	}
	if code != http.StatusOK || json.Unmarshal(body, &page) != nil {
		t.Fatalf("GET /runs: %d %s", code, body)
	}
	byID := map[string]string{}
	for _, r := range page.Runs {
		byID[r.RunID] = r.State + "/" + r.Reason
	}
	outcomes := map[string]int{}
	for i, id := range ids {
		st := byID[id]
		outcomes[st]++
		switch st {
		case "completed/", "failed/interrupted":
		default:
			t.Errorf("queued run %d (%s) is %q after the restart, want completed or failed/interrupted", i, id, st)
		}
	}
	t.Logf("queued runs after the restart: %v", outcomes)
	// The tasks the broker kept are consumed by the fleet, not left there.
	testutil.Within(t, fleetWait, "the new worker to take the queued tasks", func() bool {
		return len(w2.tasks("agent_completed")) >= runs
	})
	id := c2.mustSubmit("echo", "after", `"after"`)
	c2.waitState(id, "completed")
	if code, body := c2.must(http.MethodGet, "/runs/"+id+"/result", ""); code != http.StatusOK || !strings.Contains(string(body), `"output":"after"`) {
		t.Errorf("result after the restart: %d %s", code, body)
	}
}

// A publisher SIGKILLed while its runs are in flight on workers that stay up
// (with the embedded broker, the broker dies with it and comes back with
// the restart): those runs end terminal, and the same workers, reconnected,
// run the new server's runs.
func fleetPublisherRestartUnderWorkers(t *testing.T, specs string, b fleetBroker) {
	const runs = 6
	data := t.TempDir()
	s := startFleetServe(t, "serve", specs, data, b)
	workers := []*fleetProc{startFleetWorker(t, "worker-0", specs, b), startFleetWorker(t, "worker-1", specs, b)}
	c := newFleetClient(t, s.url)
	ids := make([]string, runs)
	for i := range runs {
		ids[i] = c.mustSubmit("nap", fmt.Sprintf("nap-%d", i), fmt.Sprintf(`{"nap":%d}`, i))
	}
	testutil.Within(t, fleetWait, "the nap tasks to start on the workers", func() bool {
		n := 0
		for _, w := range workers {
			n += len(w.tasks("agent_spawned"))
		}
		return n >= runs
	})
	s.kill(t)

	s2 := startFleetServe(t, "serve-2", specs, data, b)
	c2 := newFleetClient(t, s2.url)
	testutil.Within(t, fleetWait, "no run left pending or running", func() bool {
		n, err := c2.unfinished()
		if err != nil {
			t.Fatal(err)
		}
		return n == 0
	})
	for i, id := range ids {
		if st := c2.state(id); st != "completed" && st != "failed" {
			t.Errorf("run %d (%s) is %q after the restart, want completed or failed (interrupted)", i, id, st)
		}
	}
	// The workers did not die with the publisher (nor with the embedded
	// broker): they serve the new one.
	for i := range 4 {
		id := c2.mustSubmit("echo", fmt.Sprintf("after-%d", i), fmt.Sprintf(`{"after":%d}`, i))
		c2.waitState(id, "completed")
	}
	for _, w := range workers {
		select {
		case <-w.done:
			t.Errorf("%s exited with %d when the publisher died", w.name, w.code)
		default:
		}
	}
}

// A worker SIGKILLed holding tasks and started again under the same
// --consumer-id (the only worker of the fleet) runs them again: its runs
// complete (on Redis it takes back its own pending entries).
func fleetWorkerRestartSameConsumer(t *testing.T, specs string, b fleetBroker) {
	const naps = 3
	s := startFleetServe(t, "serve", specs, t.TempDir(), b)
	w := startFleetWorker(t, "worker-0", specs, b, "--consumer-id", "steady")
	c := newFleetClient(t, s.url)
	ids := make([]string, naps)
	for i := range naps {
		ids[i] = c.mustSubmit("nap", fmt.Sprintf("nap-%d", i), fmt.Sprintf(`{"nap":%d}`, i))
	}
	testutil.Within(t, fleetWait, "the nap tasks to start", func() bool { return len(w.tasks("agent_spawned")) == naps })
	w.kill(t)
	again := startFleetWorker(t, "worker-0-again", specs, b, "--consumer-id", "steady")
	for _, id := range ids {
		c.waitState(id, "completed")
	}
	for i := range naps {
		if task := fmt.Sprintf("nap-%d", i); !again.hasEvent("agent_completed", task, "") {
			t.Errorf("%s was not run again by the restarted worker", task)
		}
	}
}
