package emittertest

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/svc-dev/svc"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestRecorderContract(t *testing.T) {
	Run(t, func(*testing.T) svc.Emitter { return &Recorder{} })
}

func TestDriveCatchesBlockingEmitter(t *testing.T) {
	release := make(chan struct{})
	defer close(release) // lets the abandoned goroutine finish before goleak looks
	blocking := svc.EmitterFunc(func(svc.RuntimeEvent) { <-release })

	err := drive(50*time.Millisecond, 1, func(int) { blocking.Emit(svc.RuntimeEvent{}) })
	if err == nil || !strings.Contains(err.Error(), "did not return") {
		t.Fatalf("drive = %v, want a timeout error", err)
	}
}

func TestDriveCatchesPanics(t *testing.T) {
	for _, goroutines := range []int{1, ConcurrentGoroutines} {
		t.Run(fmt.Sprint(goroutines), func(t *testing.T) {
			err := drive(EmitTimeout, goroutines, func(g int) {
				if g == goroutines-1 {
					panic("emitter bug")
				}
			})
			if err == nil || !strings.Contains(err.Error(), "panicked: emitter bug") {
				t.Fatalf("drive = %v, want the panic reported", err)
			}
		})
	}
}

func TestDrivePassesWellBehavedEmitter(t *testing.T) {
	var n sync.WaitGroup
	n.Add(ConcurrentGoroutines)
	if err := drive(EmitTimeout, ConcurrentGoroutines, func(int) { n.Done() }); err != nil {
		t.Fatal(err)
	}
	n.Wait() // every goroutine ran
}

func TestSampleEventsMeetTheirContract(t *testing.T) {
	for _, typ := range svc.EventTypes {
		ev := SampleEvent(typ)
		CheckPayload(t, ev)
		if ev.EventType != typ || ev.TraceID == "" || ev.AgentName == "" {
			t.Errorf("SampleEvent(%s) = %+v", typ, ev)
		}
	}
	a, b := SampleEvent(svc.EventAgentSpawned), SampleEvent(svc.EventAgentSpawned)
	a.Payload["backend"] = "changed"
	if b.Payload["backend"] == "changed" {
		t.Error("SampleEvent shares its payload between calls")
	}
}

// fakeTB records failures. Fatalf ends the calling goroutine like the real
// one does, so callers run the code under test in their own goroutine.
type fakeTB struct {
	testing.TB
	mu     sync.Mutex
	errors []string
	fatal  bool
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Errorf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errors = append(f.errors, fmt.Sprintf(format, args...))
}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.errors = append(f.errors, fmt.Sprintf(format, args...))
	f.fatal = true
	f.mu.Unlock()
	runtime.Goexit()
}

func (f *fakeTB) messages() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.Join(f.errors, "\n")
}

// inGoroutine runs fn in a goroutine and waits for it, surviving Goexit.
func inGoroutine(fn func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	<-done
}

func TestCheckPayload(t *testing.T) {
	withReason := SampleEvent(svc.EventAgentFailed)
	withReason.Payload["reason"] = "timeout"
	reasonElsewhere := SampleEvent(svc.EventAgentCompleted)
	reasonElsewhere.Payload["reason"] = "timeout"
	missing := SampleEvent(svc.EventBudgetExceeded)
	delete(missing.Payload, "scope")
	extra := SampleEvent(svc.EventBatchStarted)
	extra.Payload["surprise"] = 1
	nilPayload := SampleEvent(svc.EventGroupStarted)
	nilPayload.Payload = nil

	cases := []struct {
		name    string
		ev      svc.RuntimeEvent
		wantErr string // "" = passes
	}{
		{"sample", SampleEvent(svc.EventWorkerHeartbeat), ""},
		{"agent_failed with reason", withReason, ""},
		{"reason on agent_completed", reasonElsewhere, `unexpected keys ["reason"]`},
		{"missing key", missing, `missing keys ["scope"]`},
		{"extra key", extra, `unexpected keys ["surprise"]`},
		{"nil payload", nilPayload, `missing keys ["group_name" "node_count"]`},
		{"unknown type", svc.RuntimeEvent{EventType: "bogus"}, `event type "bogus" has no payload contract`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tb := &fakeTB{}
			CheckPayload(tb, c.ev)
			got := tb.messages()
			if c.wantErr == "" && got != "" {
				t.Fatalf("CheckPayload failed: %s", got)
			}
			if c.wantErr != "" && !strings.Contains(got, c.wantErr) {
				t.Fatalf("CheckPayload reported %q, want it to contain %q", got, c.wantErr)
			}
		})
	}
}

func TestRecorder(t *testing.T) {
	var r Recorder
	r.Emit(SampleEvent(svc.EventAgentSpawned))
	r.Emit(SampleEvent(svc.EventAgentCompleted))
	r.Emit(SampleEvent(svc.EventAgentSpawned))

	if got := r.Events(); len(got) != 3 || got[1].EventType != svc.EventAgentCompleted {
		t.Fatalf("Events = %v", got)
	}
	if got := r.OfType(svc.EventAgentSpawned); len(got) != 2 {
		t.Fatalf("OfType(agent_spawned) = %d events, want 2", len(got))
	}
	evs := r.Events()
	evs[0].AgentName = "changed"
	if r.Events()[0].AgentName == "changed" {
		t.Fatal("Events returns the recorder's own slice")
	}
	r.Reset()
	if got := r.Events(); len(got) != 0 {
		t.Fatalf("after Reset, Events = %v", got)
	}
}

func TestRecorderWaitForConcurrentEmits(t *testing.T) {
	var r Recorder
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				r.Emit(SampleEvent(svc.EventToolCallStarted))
				r.Emit(SampleEvent(svc.EventTypes[g]))
			}
		}()
	}
	got := r.WaitFor(t, svc.EventToolCallStarted, 200, 10*time.Second)
	wg.Wait()
	if len(got) != 200 {
		t.Fatalf("WaitFor returned %d events, want 200", len(got))
	}
	for _, ev := range got {
		if ev.EventType != svc.EventToolCallStarted {
			t.Fatalf("WaitFor returned a %s event", ev.EventType)
		}
	}
}

func TestRecorderWaitForReturnsAtOnceWhenAlreadyThere(t *testing.T) {
	var r Recorder
	r.Emit(SampleEvent(svc.EventBatchStarted))
	r.Emit(SampleEvent(svc.EventBatchStarted))
	if got := r.WaitFor(t, svc.EventBatchStarted, 1, time.Nanosecond); len(got) != 2 {
		t.Fatalf("WaitFor = %d events, want both recorded", len(got))
	}
}

func TestRecorderWaitForFailsOnTimeout(t *testing.T) {
	var r Recorder
	r.Emit(SampleEvent(svc.EventAgentSpawned))
	tb := &fakeTB{}
	returned := false
	inGoroutine(func() {
		r.WaitFor(tb, svc.EventAgentCompleted, 1, 20*time.Millisecond)
		returned = true
	})
	if returned || !tb.fatal {
		t.Fatal("WaitFor returned instead of failing the test")
	}
	msg := tb.messages()
	for _, want := range []string{"1 agent_completed events, got 0", "agent_spawned×1"} {
		if !strings.Contains(msg, want) {
			t.Errorf("failure message %q does not mention %q", msg, want)
		}
	}
}
