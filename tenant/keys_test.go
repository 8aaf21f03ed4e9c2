package tenant

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	svc "github.com/svc-dev/svc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	keyA     = "sk-team-a-0123456789"
	keyB     = "sk-team-b-9876543210"
	keyAdmin = "sk-admin-5555555555"
)

// keyFile is a file of three keys: team-a may run, submit and read; team-b
// only read, until the start of 2020 (long expired); ops is admin.
func keyFile() string {
	return "keys:\n" +
		"  - sha256: " + Hash(keyA) + "\n    tenant: team-a\n    scopes: [run, submit, read]\n" +
		"  - sha256: " + Hash(keyB) + "\n    tenant: team-b\n    scopes: [read]\n    expires: 2020-01-01T00:00:00Z\n" +
		"  - sha256: " + Hash(keyAdmin) + "\n    tenant: ops\n    scopes: [admin]\n"
}

func TestHash(t *testing.T) {
	// The SHA-256 of "abc" (FIPS 180-2, appendix B.1).
	if got := Hash("abc"); got != "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" {
		t.Errorf("Hash(abc) = %s", got)
	}
}

func TestParse(t *testing.T) {
	keys, err := Parse("keys.yaml", []byte(keyFile()))
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 3 {
		t.Fatalf("%d keys, want 3", len(keys))
	}
	a, b := keys[0], keys[1]
	if a.Tenant != "team-a" || len(a.Scopes) != 3 || a.Scopes[1] != svc.ScopeSubmit || !a.Expires.IsZero() || a.Line != 2 {
		t.Errorf("key a = %+v", a)
	}
	if b.Expires != time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC) || b.ID != "sha256:"+Hash(keyB)[:12] {
		t.Errorf("key b = %+v", b)
	}
}

// TestParseErrors: each bad file is refused with file:line: field: why.
func TestParseErrors(t *testing.T) {
	h := Hash(keyA)
	for _, c := range []struct{ name, file, want string }{
		{"empty", "", "f.yaml: the file is empty"},
		{"not yaml", "keys: [", "f.yaml: not YAML"},
		{"a list", "- a\n", "f.yaml:1: want a mapping"},
		{"unknown top field", "keys: []\nversion: 1\n", "f.yaml:2: version: unknown field"},
		{"no keys", "{}\n", "f.yaml:1: keys: missing"},
		{"keys not a list", "keys: 3\n", "f.yaml:1: keys: want a list"},
		{"empty list", "keys: []\n", "f.yaml:1: keys: the list is empty"},
		{"entry not a mapping", "keys:\n  - x\n", "f.yaml:2: keys[0]: want a mapping"},
		{"the key, not its hash", "keys:\n  - sha256: " + keyA + "\n    tenant: a\n    scopes: [run]\n", "f.yaml:2: keys[0].sha256: want the key's SHA-256"},
		{"short hash", "keys:\n  - sha256: " + h[:60] + "\n    tenant: a\n    scopes: [run]\n", "f.yaml:2: keys[0].sha256"},
		{"bad tenant", "keys:\n  - sha256: " + h + "\n    tenant: a b\n    scopes: [run]\n", `f.yaml:3: keys[0].tenant: "a b"`},
		{"bad scope", "keys:\n  - sha256: " + h + "\n    tenant: a\n    scopes: [run, write]\n", `f.yaml:4: keys[0].scopes: "write": want run, submit, read or admin`},
		{"no scopes", "keys:\n  - sha256: " + h + "\n    tenant: a\n    scopes: []\n", "f.yaml:4: keys[0].scopes: want a non-empty list"},
		{"scope twice", "keys:\n  - sha256: " + h + "\n    tenant: a\n    scopes: [run, run]\n", `f.yaml:4: keys[0].scopes: "run" given twice`},
		{"bad expiry", "keys:\n  - sha256: " + h + "\n    tenant: a\n    scopes: [run]\n    expires: tomorrow\n", `f.yaml:5: keys[0].expires: "tomorrow": want an RFC 3339 time`},
		{"unknown field", "keys:\n  - sha256: " + h + "\n    tenant: a\n    scopes: [run]\n    name: x\n", "f.yaml:5: keys[0].name: unknown field"},
		{"field twice", "keys:\n  - sha256: " + h + "\n    tenant: a\n    tenant: b\n    scopes: [run]\n", "f.yaml:4: keys[0].tenant: given twice"},
		{"limits not yet", "keys:\n  - sha256: " + h + "\n    tenant: a\n    scopes: [run]\n    limits: {}\n", "f.yaml:5: keys[0].limits: per-tenant limits and weights are not supported"},
		{"missing tenant", "keys:\n  - sha256: " + h + "\n    scopes: [run]\n", "f.yaml:2: keys[0].tenant: missing"},
		{"missing hash", "keys:\n  - tenant: a\n    scopes: [run]\n", "f.yaml:2: keys[0].sha256: missing"},
		{"same key twice", "keys:\n  - {sha256: " + h + ", tenant: a, scopes: [run]}\n  - {sha256: " + h + ", tenant: b, scopes: [read]}\n", "f.yaml:3: keys[1].sha256: the same key as line 2"},
		{"same id", "keys:\n  - {sha256: " + h + ", tenant: a, scopes: [run]}\n  - {sha256: " + h[:12] + strings.Repeat("0", 52) + ", tenant: b, scopes: [read]}\n", "f.yaml:3: keys[1].sha256: starts with the same 12 hex digits as the key of line 2"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("f.yaml", []byte(c.file))
			var fe *FileError
			if !errors.As(err, &fe) {
				t.Fatalf("err = %v, want a *FileError", err)
			}
			if !strings.HasPrefix(err.Error(), c.want) && !strings.Contains(err.Error(), c.want) {
				t.Errorf("err = %q, want it to say %q", err, c.want)
			}
			if c.name == "the key, not its hash" && strings.Contains(err.Error(), keyA) {
				t.Errorf("the message repeats the key: %q", err)
			}
		})
	}
}

func newRing(t *testing.T, cfg Config) (*Keyring, *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(zap.InfoLevel)
	cfg.Log = zap.New(core)
	k, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return k, logs
}

func writeKeys(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestAuthenticate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.yaml")
	writeKeys(t, path, keyFile())
	k, _ := newRing(t, Config{File: path, AuthToken: "tok"})
	for _, c := range []struct {
		key, tenant, id string
		admin, ok       bool
	}{
		{keyA, "team-a", "sha256:" + Hash(keyA)[:12], false, true},
		{keyAdmin, "ops", "sha256:" + Hash(keyAdmin)[:12], true, true},
		{"tok", "", AuthTokenKeyID, true, true},
		{keyB, "team-b", "sha256:" + Hash(keyB)[:12], false, false}, // expired
		{"guess", "", "", false, false},
		{keyA + "x", "", "", false, false},
		{"", "", "", false, false},
	} {
		p, err := k.Authenticate(c.key)
		if (err == nil) != c.ok || p.Tenant != c.tenant || p.KeyID != c.id || p.Admin() != c.admin {
			t.Errorf("Authenticate(%q) = %+v, %v; want tenant %q id %q admin %v ok %v", c.key, p, err, c.tenant, c.id, c.admin, c.ok)
		}
		if err != nil && !errors.Is(err, svc.ErrUnauthorized) {
			t.Errorf("Authenticate(%q): %v, want an UnauthorizedError", c.key, err)
		}
		if err != nil && c.key != "" && strings.Contains(err.Error(), c.key) {
			t.Errorf("the error repeats the key: %v", err)
		}
	}
	if _, err := k.Authenticate(keyB); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Errorf("expired key: %v, want it to say expired", err)
	}
	p, _ := k.Authenticate(keyA)
	if !p.Has(svc.ScopeRun) || !p.Has(svc.ScopeRead) || p.Has(svc.ScopeAdmin) {
		t.Errorf("team-a's scopes: %+v", p)
	}
}

// TestExpiryIsAtTheInstant: a key works until its expiry and not from it.
func TestExpiryIsAtTheInstant(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.yaml")
	writeKeys(t, path, "keys:\n  - {sha256: "+Hash(keyA)+", tenant: a, scopes: [read], expires: 2030-06-01T00:00:00Z}\n")
	var mu sync.Mutex
	now := time.Date(2030, 5, 31, 23, 59, 59, 0, time.UTC)
	k, _ := newRing(t, Config{File: path, Now: func() time.Time { mu.Lock(); defer mu.Unlock(); return now }})
	if _, err := k.Authenticate(keyA); err != nil {
		t.Fatalf("a second before expiry: %v", err)
	}
	mu.Lock()
	now = now.Add(time.Second)
	mu.Unlock()
	if _, err := k.Authenticate(keyA); err == nil {
		t.Fatal("at the expiry the key still works")
	}
}

// TestReload: a changed file replaces the keys (a removed key is revoked,
// an added one works); a bad one keeps the keys in use; the auth token's
// key stays through both.
func TestReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.yaml")
	writeKeys(t, path, keyFile())
	k, _ := newRing(t, Config{File: path, AuthToken: "tok"})
	if changed, err := k.Reload(); changed || err != nil {
		t.Fatalf("Reload of the same file = %v, %v; want no change", changed, err)
	}
	writeKeys(t, path, "keys:\n  - {sha256: "+Hash(keyB)+", tenant: team-b, scopes: [read]}\n")
	if changed, err := k.Reload(); !changed || err != nil {
		t.Fatalf("Reload = %v, %v", changed, err)
	}
	if _, err := k.Authenticate(keyA); err == nil {
		t.Error("the removed key still works")
	}
	if p, err := k.Authenticate(keyB); err != nil || p.Tenant != "team-b" {
		t.Errorf("the new entry of key b: %+v, %v", p, err)
	}
	writeKeys(t, path, "keys:\n  - {sha256: nothex, tenant: x, scopes: [read]}\n")
	if _, err := k.Reload(); err == nil || !strings.Contains(err.Error(), path+":2: keys[0].sha256") {
		t.Fatalf("Reload of a bad file: %v, want file:line: field", err)
	}
	if _, err := k.Authenticate(keyB); err != nil {
		t.Errorf("after a bad reload the keys in use are gone: %v", err)
	}
	if _, err := k.Authenticate("tok"); err != nil {
		t.Errorf("the auth token after reloads: %v", err)
	}
}

// TestWatch: the watch swaps in a changed file, logs a bad one once with
// why, and returns when its context ends.
func TestWatch(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.yaml")
	writeKeys(t, path, keyFile())
	k, logs := newRing(t, Config{File: path, Interval: 5 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		k.Watch(ctx)
	}()
	defer func() { cancel(); <-done }()
	writeKeys(t, path, "keys:\n  - {sha256: "+Hash(keyB)+", tenant: team-b, scopes: [read]}\n")
	waitFor(t, func() bool { _, err := k.Authenticate(keyA); return err != nil })
	writeKeys(t, path, "keys:\n  - {sha256: "+Hash(keyB)+", tenant: team-b, scopes: [write]}\n")
	waitFor(t, func() bool {
		return logs.FilterMessage("api keys reload failed; still using the previous keys").Len() > 0
	})
	time.Sleep(50 * time.Millisecond) // ten more reads of the same bad file
	if n := logs.FilterMessage("api keys reload failed; still using the previous keys").Len(); n != 1 {
		t.Errorf("the bad file was logged %d times, want once", n)
	}
	e := logs.FilterMessage("api keys reload failed; still using the previous keys").All()[0]
	if err := e.ContextMap()["error"]; !strings.Contains(err.(string), `keys[0].scopes: "write"`) {
		t.Errorf("the log says %v, want the field at fault", err)
	}
	if _, err := k.Authenticate(keyB); err != nil {
		t.Errorf("after the bad file: %v", err)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
	}
}

// TestAudit: each key's requests, refusals and last use are counted; a
// refusal is logged once per key a minute, with route and reason but no
// key.
func TestAudit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.yaml")
	writeKeys(t, path, keyFile())
	var mu sync.Mutex
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	k, logs := newRing(t, Config{File: path, Now: clock})

	for range 3 {
		if _, err := k.Authenticate(keyA); err != nil {
			t.Fatal(err)
		}
	}
	pa, _ := k.Authenticate(keyA)
	k.Denied(pa, "POST /runtime/budget/reset", "lacks the admin scope")
	advance(10 * time.Second)
	k.Denied(pa, "POST /runtime/budget/reset", "lacks the admin scope")
	pb, _ := k.Authenticate(keyB) // expired
	k.Denied(pb, "GET /runs", "expired")
	p0, _ := k.Authenticate("guess")
	k.Denied(p0, "GET /runs", "invalid bearer token")
	k.Denied(svc.Principal{}, "GET /runs", "missing bearer token")

	use := map[string]svc.KeyUse{}
	for _, u := range k.KeyUsage() {
		use[u.Tenant] = u
	}
	if len(use) != 3 {
		t.Fatalf("KeyUsage = %+v, want the three keys", k.KeyUsage())
	}
	if a := use["team-a"]; a.Requests != 4 || a.Denied != 2 || !a.LastUse.Equal(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)) {
		t.Errorf("team-a's use = %+v, want 4 requests, 2 denied, last at 12:00", a)
	}
	if b := use["team-b"]; b.Requests != 1 || b.Denied != 1 {
		t.Errorf("team-b's use = %+v", b)
	}
	if o := use["ops"]; o.Requests != 0 || !o.LastUse.IsZero() {
		t.Errorf("ops's use = %+v, want none", o)
	}
	denied := logs.FilterMessage("request denied").All()
	ids := map[string]int{}
	for _, e := range denied {
		ids[e.ContextMap()["key_id"].(string)]++
		for _, secret := range []string{keyA, keyB, "guess"} {
			for _, v := range e.ContextMap() {
				if s, ok := v.(string); ok && strings.Contains(s, secret) {
					t.Errorf("a denied line holds a key: %v", e.ContextMap())
				}
			}
		}
	}
	if ids[pa.KeyID] != 1 || ids[pb.KeyID] != 1 || ids["unknown"] != 1 || ids["missing"] != 1 || len(denied) != 4 {
		t.Errorf("denied lines by key = %v, want one each for team-a, team-b, unknown and missing", ids)
	}
	if e := denied[0].ContextMap(); e["route"] != "POST /runtime/budget/reset" || e["reason"] != "lacks the admin scope" || e["tenant"] != "team-a" {
		t.Errorf("first denied line = %v", e)
	}
	advance(DeniedLogEvery)
	k.Denied(pa, "GET /metrics", "lacks the admin scope")
	again := logs.FilterMessage("request denied").All()
	if len(again) != 5 || again[4].ContextMap()["suppressed_since_last"] != int64(1) {
		t.Errorf("a minute later: %d lines, last %v; want a fifth saying one was suppressed", len(again), again[len(again)-1].ContextMap())
	}
}

// TestAuthenticateRace: lookups while the file is swapped.
func TestAuthenticateRace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.yaml")
	writeKeys(t, path, keyFile())
	k, _ := newRing(t, Config{File: path})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 200 {
				p, _ := k.Authenticate(keyA)
				k.Denied(p, "GET /x", "test")
				_ = k.KeyUsage()
			}
		})
	}
	for i := range 20 {
		writeKeys(t, path, keyFile()+strings.Repeat("\n", i+1))
		if _, err := k.Reload(); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
}
