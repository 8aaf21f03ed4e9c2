package fleetwire

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

// Keyring holds a fleet's envelope keys: Sign uses SignID, Verify accepts any
// of Keys. A nil Keyring means signing is off: Sign does nothing and Verify
// accepts every envelope.
type Keyring struct {
	SignID string
	Keys   map[string][]byte
}

// MinKeyBytes is the shortest secret a Keyring accepts: an HMAC key much
// shorter than its 32-byte output is guessable offline from one message.
const MinKeyBytes = 16

// ParseKeyring reads "id:secret,id2:secret2" (as in SVC_BROKER_KEYS); the
// first key signs, all of them verify. Each secret is used as its bytes and
// must be at least MinKeyBytes long. An empty spec gives nil (signing off).
func ParseKeyring(spec string) (*Keyring, error) {
	spec = strings.TrimSpace(spec)
	if spec == "" {
		return nil, nil
	}
	k := &Keyring{Keys: map[string][]byte{}}
	for i, part := range strings.Split(spec, ",") {
		if err := k.add(part); err != nil {
			return nil, fmt.Errorf("envelope keys: key %d: %w", i+1, err)
		}
	}
	return k, nil
}

// LoadKeyring reads a key file (svc serve/worker --broker-keys): one key a
// line, "KEYID:SECRET", the first line's key signing and every key
// verifying; blank lines and lines starting with # are skipped. A bad line
// is reported as path:line. A file without keys is an error: an operator
// who names a key file means to sign.
func LoadKeyring(path string) (*Keyring, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("envelope keys: %w", err)
	}
	k := &Keyring{Keys: map[string][]byte{}}
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if err := k.add(line); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, i+1, err)
		}
	}
	if len(k.Keys) == 0 {
		return nil, fmt.Errorf("%s: no keys (want lines KEYID:SECRET)", path)
	}
	return k, nil
}

// add adds one "id:secret"; the first added signs.
func (k *Keyring) add(entry string) error {
	id, secret, ok := strings.Cut(strings.TrimSpace(entry), ":")
	id, secret = strings.TrimSpace(id), strings.TrimSpace(secret)
	switch {
	case !ok || id == "" || secret == "":
		return errors.New(`want "KEYID:SECRET"`)
	case strings.ContainsAny(id, " \t,"):
		return fmt.Errorf("key id %q has a space or a comma", id)
	case len(secret) < MinKeyBytes:
		return fmt.Errorf("key %q: secret of %d bytes, want at least %d (openssl rand -hex 32 makes one)", id, len(secret), MinKeyBytes)
	}
	if _, dup := k.Keys[id]; dup {
		return fmt.Errorf("key id %q given twice", id)
	}
	if k.SignID == "" {
		k.SignID = id
	}
	k.Keys[id] = []byte(secret)
	return nil
}

// Sign signs e with the signing key; it does nothing on a nil Keyring.
func (k *Keyring) Sign(e *Envelope) error {
	if k == nil {
		return nil
	}
	key, ok := k.Keys[k.SignID]
	if !ok {
		return fmt.Errorf("envelope keys: no key %q to sign with", k.SignID)
	}
	return e.Sign(k.SignID, key)
}

// Verify checks e's signature; a nil Keyring accepts every envelope.
func (k *Keyring) Verify(e *Envelope) error {
	if k == nil {
		return nil
	}
	return e.Verify(k.Keys)
}
