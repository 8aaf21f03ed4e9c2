package flow

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"

	svc "github.com/svc-dev/svc"
)

// CheckSubject refuses an empty subject; pkg names the broker in the error
// ("redisbroker: empty subject"), as every broker's errors do.
func CheckSubject(pkg, subject string) error {
	if subject == "" {
		return errors.New(pkg + ": empty subject")
	}
	return nil
}

// CheckSize refuses a message of more than svc.MaxPayloadBytes, the limit
// every broker holds to whatever its server would take.
func CheckSize(pkg string, n int) error {
	if n > svc.MaxPayloadBytes {
		return fmt.Errorf("%s: message of %d bytes exceeds the %d-byte limit", pkg, n, svc.MaxPayloadBytes)
	}
	return nil
}

// NewID is a random message or consumer-tag id: 24 hex digits.
func NewID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
