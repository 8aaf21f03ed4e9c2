// Package tenant owns the API keys of svc serve --api-keys: the key file
// (parsed, validated and reloaded on change), the constant-time lookup of
// a presented key by its SHA-256, and the audit of each key's use.
package tenant

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"time"

	"go.yaml.in/yaml/v3"

	svc "github.com/svc-dev/svc"
)

// Key is one API key of the key file: never the key itself, only its
// SHA-256, so that the file can be read by whoever deploys the service
// without handing out the keys.
type Key struct {
	// Hash is the SHA-256 of the key's text.
	Hash [sha256.Size]byte
	// ID names the key in logs and stats (svc.Principal.KeyID).
	ID     string
	Tenant string
	Scopes []svc.KeyScope
	// Expires, when not zero, is when the key stops working.
	Expires time.Time
	// Line is the key's line in its file, for messages.
	Line int
	// use is the key's audit, set when a Keyring takes the key, so that a
	// request counts itself without a lock.
	use *use
}

// AuthTokenKeyID is the key id of the admin key svc serve --auth-token
// gives.
const AuthTokenKeyID = "auth-token"

// IDOf returns the key id of a key whose SHA-256 is hash: "sha256:" and
// its first 12 hex digits. The hash is in the key file already, and 48
// bits of it say nothing usable about the key.
func IDOf(hash [sha256.Size]byte) string { return "sha256:" + hex.EncodeToString(hash[:6]) }

// Hash returns the SHA-256 hex of key, as the key file wants it (svc keys
// hash).
func Hash(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// tenantName is what a tenant may be called: it appears in logs, query
// parameters and store columns.
var tenantName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// ValidTenant reports whether name may name a tenant in the key file.
func ValidTenant(name string) bool { return tenantName.MatchString(name) }

// FileError is a key file that cannot be used: the file, the line and the
// field at fault, and why.
type FileError struct {
	File  string
	Line  int
	Field string
	Msg   string
}

func (e *FileError) Error() string {
	at := e.File
	if e.Line > 0 {
		at = fmt.Sprintf("%s:%d", e.File, e.Line)
	}
	if e.Field != "" {
		return fmt.Sprintf("%s: %s: %s", at, e.Field, e.Msg)
	}
	return at + ": " + e.Msg
}

// Parse reads a key file:
//
//	keys:
//	  - sha256: 64 hex digits       # svc keys hash
//	    tenant: team-a
//	    scopes: [run, submit, read]  # run, submit, read, admin
//	    expires: 2027-01-01T00:00:00Z   # optional, RFC 3339
//
// file names the file in errors, which say file:line: field: why. Unknown
// fields, duplicate keys and an empty list are errors.
func Parse(file string, data []byte) ([]Key, error) {
	fail := func(line int, field, format string, args ...any) error {
		return &FileError{File: file, Line: line, Field: field, Msg: fmt.Sprintf(format, args...)}
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fail(0, "", "the file is empty; want keys: [...]")
		}
		return nil, fail(0, "", "not YAML: %v", err)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind != yaml.MappingNode {
		return nil, fail(root.Line, "", "want a mapping with keys: [...]")
	}
	var list *yaml.Node
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if k.Value != "keys" {
			return nil, fail(k.Line, k.Value, "unknown field (want keys)")
		}
		list = v
	}
	if list == nil {
		return nil, fail(root.Line, "keys", "missing")
	}
	if list.Kind != yaml.SequenceNode {
		return nil, fail(list.Line, "keys", "want a list of keys")
	}
	if len(list.Content) == 0 {
		return nil, fail(list.Line, "keys", "the list is empty: no key could use the server")
	}
	var keys []Key
	seen := map[[sha256.Size]byte]int{}
	ids := map[string]int{}
	for i, n := range list.Content {
		where := fmt.Sprintf("keys[%d]", i)
		if n.Kind != yaml.MappingNode {
			return nil, fail(n.Line, where, "want a mapping {sha256, tenant, scopes, expires?}")
		}
		k := Key{Line: n.Line}
		has := map[string]bool{}
		for j := 0; j+1 < len(n.Content); j += 2 {
			name, v := n.Content[j], n.Content[j+1]
			field := where + "." + name.Value
			if has[name.Value] {
				return nil, fail(name.Line, field, "given twice")
			}
			has[name.Value] = true
			switch name.Value {
			case "sha256":
				b, err := hex.DecodeString(v.Value)
				if v.Kind != yaml.ScalarNode || err != nil || len(b) != sha256.Size {
					return nil, fail(v.Line, field, "want the key's SHA-256 as 64 hex digits (svc keys hash makes it), not the key")
				}
				copy(k.Hash[:], b)
			case "tenant":
				if v.Kind != yaml.ScalarNode || !ValidTenant(v.Value) {
					return nil, fail(v.Line, field, "%q: want 1 to 64 letters, digits, '_', '.' or '-', starting with a letter or digit", v.Value)
				}
				k.Tenant = v.Value
			case "scopes":
				if v.Kind != yaml.SequenceNode || len(v.Content) == 0 {
					return nil, fail(v.Line, field, "want a non-empty list of run, submit, read, admin")
				}
				for _, s := range v.Content {
					sc := svc.KeyScope(s.Value)
					if s.Kind != yaml.ScalarNode || !sc.Valid() {
						return nil, fail(s.Line, field, "%q: want run, submit, read or admin", s.Value)
					}
					if slices.Contains(k.Scopes, sc) {
						return nil, fail(s.Line, field, "%q given twice", s.Value)
					}
					k.Scopes = append(k.Scopes, sc)
				}
			case "expires":
				t, err := time.Parse(time.RFC3339, v.Value)
				if v.Kind != yaml.ScalarNode || err != nil {
					return nil, fail(v.Line, field, "%q: want an RFC 3339 time (2027-01-01T00:00:00Z)", v.Value)
				}
				k.Expires = t
			case "limits", "weight":
				// Parsed by name so that the message says what is missing
				// rather than calling the issue's own fields unknown.
				return nil, fail(name.Line, field, "per-tenant limits and weights are not supported by this version yet; remove the field")
			default:
				return nil, fail(name.Line, field, "unknown field (want sha256, tenant, scopes, expires)")
			}
		}
		for _, f := range []string{"sha256", "tenant", "scopes"} {
			if !has[f] {
				return nil, fail(n.Line, where+"."+f, "missing")
			}
		}
		if prev, dup := seen[k.Hash]; dup {
			return nil, fail(n.Line, where+".sha256", "the same key as line %d", prev)
		}
		seen[k.Hash] = n.Line
		k.ID = IDOf(k.Hash)
		if prev, dup := ids[k.ID]; dup {
			return nil, fail(n.Line, where+".sha256", "starts with the same 12 hex digits as the key of line %d, which name keys in logs: make a new key", prev)
		}
		ids[k.ID] = n.Line
		keys = append(keys, k)
	}
	return keys, nil
}
