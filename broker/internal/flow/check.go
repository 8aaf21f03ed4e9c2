package flow

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"

	svc "github.com/svc-dev/svc"
)

// CheckSubject refuses an empty subject; pkg names the broker in the error
// ("redisbroker: empty subject"), as every broker's errors do. The error is
// a permanent svc.BrokerError: the same call is refused again.
func CheckSubject(pkg, subject string) error {
	if subject == "" {
		return svc.PermanentBrokerError(pkg, "", errors.New("empty subject"))
	}
	return nil
}

// CheckSize refuses a message of more than svc.MaxPayloadBytes, the limit
// every broker holds to whatever its server would take: a permanent
// svc.BrokerError.
func CheckSize(pkg string, n int) error {
	if n > svc.MaxPayloadBytes {
		return svc.PermanentBrokerError(pkg, "", fmt.Errorf("message of %d bytes exceeds the %d-byte limit", n, svc.MaxPayloadBytes))
	}
	return nil
}

// Refused is a permanent svc.BrokerError of pkg: a call the broker refuses
// whatever the state of its server (a missing handler, a bad subject, a
// second consumer group).
func Refused(pkg, format string, args ...any) error {
	return svc.PermanentBrokerError(pkg, "", fmt.Errorf(format, args...))
}

// Wrap types err from pkg's op: nil stays nil; this broker's own
// svc.BrokerError is returned as it is; any other permanent one (such as
// svc.ErrBrokerClosed) stays permanent under the op's name; permanent decides the rest
// (nil: every other failure is transient, a broken or slow connection
// that a later call may find mended).
func Wrap(pkg, op string, err error, permanent func(error) bool) error {
	var be *svc.BrokerError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &be) && be.Broker == pkg:
		return err // typed already, and named for this broker
	case svc.IsPermanentBrokerError(err), permanent != nil && permanent(err):
		return svc.PermanentBrokerError(pkg, op, err)
	default:
		return svc.TransientBrokerError(pkg, op, err)
	}
}

// NewID is a random message or consumer-tag id: 24 hex digits.
func NewID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
