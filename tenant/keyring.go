package tenant

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	svc "github.com/svc-dev/svc"
)

// Config configures New.
type Config struct {
	// File is the key file (svc serve --api-keys); "" for none.
	File string
	// AuthToken, when set, is one more key: an admin key of the default
	// tenant (""), with the key id AuthTokenKeyID (svc serve
	// --auth-token).
	AuthToken string
	// Log receives reloads, failed reloads and denied requests; zap.L()
	// when nil.
	Log *zap.Logger
	// Interval is how often Watch reads the file; DefaultInterval when
	// zero.
	Interval time.Duration
	// Now is the clock expiries are checked against; time.Now when nil.
	Now func() time.Time
}

// DefaultInterval is how often Watch reads the key file.
const DefaultInterval = time.Second

// DeniedLogEvery is how often at most a denied request is logged per key
// (the unknown and the missing key each counting as one key), so that a
// client retrying with a revoked key does not flood the log.
const DeniedLogEvery = time.Minute

// Keyring holds the keys in use and answers who presented a key. It is
// safe for concurrent use; Watch swaps in a changed file without a lock on
// the request path.
type Keyring struct {
	cfg  Config
	log  *zap.Logger
	now  func() time.Time
	keys atomic.Pointer[[]Key]
	// data is the file's content as last loaded (Watch compares).
	data []byte

	mu     sync.Mutex
	usage  map[string]*use      // by key id; kept across reloads
	denied map[string]deniedLog // by key id, "unknown" or "missing"
}

type use struct {
	requests atomic.Int64
	denied   atomic.Int64
	last     atomic.Int64 // unix nanoseconds
	tenant   string
}

type deniedLog struct {
	at         time.Time
	suppressed int
}

// New loads cfg.File (an error names file:line: field) and returns the
// keyring. Either a file or an AuthToken is required.
func New(cfg Config) (*Keyring, error) {
	if cfg.File == "" && cfg.AuthToken == "" {
		return nil, errors.New("tenant: New: a key file or an auth token is required")
	}
	if cfg.Log == nil {
		cfg.Log = zap.L()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	k := &Keyring{cfg: cfg, log: cfg.Log, now: cfg.Now, usage: map[string]*use{}, denied: map[string]deniedLog{}}
	var keys []Key
	if cfg.File != "" {
		data, err := os.ReadFile(cfg.File)
		if err != nil {
			return nil, fmt.Errorf("--api-keys: %w", err)
		}
		if keys, err = Parse(cfg.File, data); err != nil {
			return nil, err
		}
		k.data = data
	}
	k.set(keys)
	return k, nil
}

// set installs keys, with the auth token's key when there is one.
func (k *Keyring) set(keys []Key) {
	if k.cfg.AuthToken != "" {
		keys = append(slices.Clone(keys), Key{Hash: sha256.Sum256([]byte(k.cfg.AuthToken)), ID: AuthTokenKeyID, Scopes: []svc.KeyScope{svc.ScopeAdmin}})
	}
	keys = slices.Clone(keys) // use is set below: the caller's slice stays as it was
	k.mu.Lock()
	for i, key := range keys {
		u, ok := k.usage[key.ID]
		if !ok || u.tenant != key.Tenant {
			u = &use{tenant: key.Tenant}
			k.usage[key.ID] = u
		}
		keys[i].use = u
	}
	k.mu.Unlock()
	k.keys.Store(&keys)
}

// Authenticate returns the principal of the presented key. A key that is
// not in the ring is an UnauthorizedError with a zero principal; an
// expired one is an UnauthorizedError with the key's principal, so that
// the refusal can be audited under its id. Every key is compared, in
// constant time, whatever matches: the time taken says nothing of which
// key, or how much of one, was right.
func (k *Keyring) Authenticate(token string) (svc.Principal, error) {
	sum := sha256.Sum256([]byte(token))
	keys := *k.keys.Load()
	found := -1
	for i := range keys {
		if subtle.ConstantTimeCompare(keys[i].Hash[:], sum[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return svc.Principal{}, svc.Errorf(svc.KindUnauthorized, "invalid bearer token")
	}
	key := &keys[found]
	p := svc.Principal{KeyID: key.ID, Tenant: key.Tenant, Scopes: key.Scopes}
	now := k.now()
	key.use.requests.Add(1)
	key.use.last.Store(now.UnixNano())
	if !key.Expires.IsZero() && !now.Before(key.Expires) {
		return p, svc.Errorf(svc.KindUnauthorized, "the API key expired at %s", key.Expires.UTC().Format(time.RFC3339))
	}
	return p, nil
}

// Denied records a refused request: counted for its key (p.KeyID; none
// for a missing or unknown key) and logged at most once per key every
// DeniedLogEvery, with the route and the reason, never the key.
func (k *Keyring) Denied(p svc.Principal, route, reason string) {
	id := p.KeyID
	if id == "" {
		id = "unknown"
		if strings.HasPrefix(reason, "missing") {
			id = "missing"
		}
	}
	now := k.now()
	k.mu.Lock()
	if u := k.usage[p.KeyID]; u != nil {
		u.denied.Add(1)
	}
	d, logged := k.denied[id]
	if logged && now.Sub(d.at) < DeniedLogEvery {
		d.suppressed++
		k.denied[id] = d
		k.mu.Unlock()
		return
	}
	k.denied[id] = deniedLog{at: now}
	k.mu.Unlock()
	k.log.Warn("request denied", zap.String("key_id", id), zap.String("tenant", p.Tenant),
		zap.String("route", route), zap.String("reason", reason), zap.Int("suppressed_since_last", d.suppressed))
}

// KeyUsage returns the use of each key in the ring, by tenant and key id.
func (k *Keyring) KeyUsage() []svc.KeyUse {
	keys := *k.keys.Load()
	out := make([]svc.KeyUse, 0, len(keys))
	for _, key := range keys {
		u := key.use
		ku := svc.KeyUse{KeyID: key.ID, Tenant: key.Tenant, Requests: u.requests.Load(), Denied: u.denied.Load()}
		if ns := u.last.Load(); ns != 0 {
			ku.LastUse = time.Unix(0, ns).UTC()
		}
		out = append(out, ku)
	}
	slices.SortFunc(out, func(a, b svc.KeyUse) int {
		if c := strings.Compare(a.Tenant, b.Tenant); c != 0 {
			return c
		}
		return strings.Compare(a.KeyID, b.KeyID)
	})
	return out
}

// Reload reads the key file again and swaps in its keys when they load.
// A file that does not keep the old keys and returns why; one that has
// not changed since the last load changes nothing. It reports whether the
// keys changed. It must not run concurrently with itself or Watch.
func (k *Keyring) Reload() (bool, error) {
	if k.cfg.File == "" {
		return false, nil
	}
	data, err := os.ReadFile(k.cfg.File)
	if err != nil {
		return false, fmt.Errorf("--api-keys: %w", err)
	}
	return k.load(data)
}

// load swaps in the keys of data, the file's content, unless it is the
// content last loaded.
func (k *Keyring) load(data []byte) (bool, error) {
	if bytes.Equal(data, k.data) {
		return false, nil
	}
	// Not tried again until the file changes: one message per edit.
	k.data = data
	keys, err := Parse(k.cfg.File, data)
	if err != nil {
		return false, err
	}
	k.set(keys)
	return true, nil
}

// Watch reads the key file every interval and swaps in a changed one once
// it has read the same content twice in a row (a file being written is
// not loaded half-way); a file that fails to load is logged once, and the
// keys in use stay. It returns when ctx is done; the caller owns the
// goroutine it runs in.
func (k *Keyring) Watch(ctx context.Context) {
	if k.cfg.File == "" {
		<-ctx.Done()
		return
	}
	t := time.NewTicker(k.cfg.Interval)
	defer t.Stop()
	var (
		pending []byte // a changed content, loaded when the next read agrees
		lastErr string // logged once, not every interval while it lasts
	)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		data, err := os.ReadFile(k.cfg.File)
		if err == nil && !bytes.Equal(data, k.data) && !bytes.Equal(data, pending) {
			pending = data
			continue
		}
		pending = nil
		changed := false
		if err == nil {
			changed, err = k.load(data)
		} else {
			err = fmt.Errorf("--api-keys: %w", err)
		}
		switch {
		case err != nil && err.Error() == lastErr:
		case err != nil:
			lastErr = err.Error()
			k.log.Error("api keys reload failed; still using the previous keys", zap.String("file", k.cfg.File), zap.Error(err))
		case changed:
			lastErr = ""
			k.log.Info("api keys reloaded", zap.String("file", k.cfg.File), zap.Int("keys", len(*k.keys.Load())))
		}
	}
}
