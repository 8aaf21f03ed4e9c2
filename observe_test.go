package svc_test

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/svc-dev/svc"
)

// countedJSON counts its encodings.
type countedJSON struct{ n *atomic.Int64 }

func (c countedJSON) MarshalJSON() ([]byte, error) {
	c.n.Add(1)
	return []byte(`7`), nil
}

// Readers of one EncodedEvent share one encoding, the event's own JSON.
func TestEncodedEventEncodesOnce(t *testing.T) {
	var n atomic.Int64
	ev := svc.RuntimeEvent{EventType: svc.EventToolCallCompleted, AgentName: "a", Payload: svc.Payload{"v": countedJSON{&n}}}
	want, err := ev.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	n.Store(0)
	ee := svc.NewEncodedEvent(ev)
	const readers = 8
	got := make([][]byte, readers)
	var wg sync.WaitGroup
	for i := range readers {
		wg.Go(func() {
			b, err := ee.JSON()
			if err != nil {
				t.Error(err)
			}
			got[i] = b
		})
	}
	wg.Wait()
	if c := n.Load(); c != 1 {
		t.Errorf("encoded %d times by %d readers; want once", c, readers)
	}
	for i, b := range got {
		if string(b) != string(want) {
			t.Fatalf("reader %d got %s, want %s", i, b, want)
		}
		if &b[0] != &got[0][0] {
			t.Errorf("reader %d got a copy; want the shared bytes", i)
		}
	}
}

// An event that cannot be encoded reports the encoder's error to every
// reader.
func TestEncodedEventError(t *testing.T) {
	ee := svc.NewEncodedEvent(svc.RuntimeEvent{EventType: svc.EventAgentSpawned, Payload: svc.Payload{"f": func() {}}})
	for range 2 {
		if b, err := ee.JSON(); err == nil {
			t.Fatalf("JSON = %s, nil; want an error", b)
		}
	}
}
