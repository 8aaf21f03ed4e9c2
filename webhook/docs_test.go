package webhook_test

import (
	"bytes"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/stores/memstore"
	"github.com/svc-dev/svc/webhook"
)

// The receiver of docs/api.md ("Webhooks", kept verbatim in
// testdata/receiver by the docs' tests), built and run: it accepts what
// the Sender signs with its key and refuses, with a 4xx that ends the
// delivery, what another key signed.
func TestDocsReceiver(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "receiver")
	build := exec.Command("go", "build", "-o", bin, "./testdata/receiver")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the docs' receiver: %v\n%s", err, out)
	}
	keyFile := filepath.Join(dir, "key")
	if err := os.WriteFile(keyFile, append(key, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "SVC_WEBHOOK_KEY_FILE="+keyFile, "ADDR="+addr)
	logs := &lockedBuffer{}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	for deadline := time.Now().Add(20 * time.Second); ; {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the receiver does not listen: %v\n%s", err, logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	url := "http://" + addr + "/svc-callback"

	good, src := newSender(t, memstore.New(), webhook.Config{})
	src.end()
	if err := good.ArmCallback(t.Context(), svc.CallbackBatch, "b1", url); err != nil {
		t.Fatal(err)
	}
	good.Ended(svc.CallbackBatch, "b1")
	got := waitFor(t, good, svc.CallbackBatch, "b1", terminal)
	if got.State != svc.CallbackDelivered || got.LastStatus != http.StatusNoContent {
		t.Errorf("signed with the key: %+v, want delivered with 204", got)
	}

	bad, src2 := newSender(t, memstore.New(), webhook.Config{Key: []byte("not the receiver's key at all")})
	src2.end()
	if err := bad.ArmCallback(t.Context(), svc.CallbackBatch, "b1", url); err != nil {
		t.Fatal(err)
	}
	bad.Ended(svc.CallbackBatch, "b1")
	got = waitFor(t, bad, svc.CallbackBatch, "b1", terminal)
	if got.State != svc.CallbackFailed || got.LastStatus != http.StatusUnauthorized || !strings.Contains(got.LastError, "signature does not match") {
		t.Errorf("signed with another key: %+v, want failed with 401", got)
	}
	if !strings.Contains(logs.String(), "batch:b1: {") {
		t.Errorf("the receiver logged no delivery:\n%s", logs.String())
	}
}

// lockedBuffer is the receiver's stderr, written by exec's goroutine.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
