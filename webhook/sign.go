// Package webhook sends the callbacks of batches and submitted runs: it
// signs each POST (HMAC-SHA256 over a timestamp and the body, in
// X-Svc-Signature), refuses URLs that point into the server's own network
// (the server-side request forgery guard, at submit and again at connect
// time), and delivers from the durable queue in the run store
// (svc.WebhookStore), retrying with capped exponential backoff and jitter
// for up to svc.WebhookMaxAge, so a delivery survives a restart.
//
// A Sender implements svc.Callbacks. It owns one goroutine that claims due
// deliveries and the goroutines that send them; Close stops them all.
package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Headers of a callback POST.
const (
	// SignatureHeader carries "t=<unix seconds>,v1=<hex HMAC-SHA256 of
	// t + "." + body>".
	SignatureHeader = "X-Svc-Signature"
	// DeliveryHeader names the delivery ("batch:ID" or "run:ID"), the
	// same on every attempt: a receiver drops a repeat by it.
	DeliveryHeader = "X-Svc-Delivery"
	// AttemptHeader counts the attempts, from 1.
	AttemptHeader = "X-Svc-Attempt"
)

// DefaultTolerance is how old a signature Verify takes by default: old
// enough for clocks a little apart, too young for a replay next day.
const DefaultTolerance = 5 * time.Minute

// Sign returns the X-Svc-Signature value of body sent at t.
func Sign(key []byte, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac(key, ts, body))
}

func mac(key []byte, ts string, body []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(ts))
	h.Write([]byte{'.'})
	h.Write(body)
	return h.Sum(nil)
}

// Errors of Verify.
var (
	ErrBadSignature = errors.New("webhook: signature does not match")
	ErrExpired      = errors.New("webhook: signature timestamp outside the tolerance")
)

// Verify checks the X-Svc-Signature header of body against key: the HMAC
// must match (compared in constant time) and its timestamp be within
// tolerance of now (0 means DefaultTolerance). A header may carry several
// v1 values (one per key, while keys rotate); one match is enough.
func Verify(key []byte, header string, body []byte, now time.Time, tolerance time.Duration) error {
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	var ts string
	var sigs [][]byte
	for part := range strings.SplitSeq(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			continue
		}
		switch k {
		case "t":
			ts = v
		case "v1":
			if b, err := hex.DecodeString(v); err == nil {
				sigs = append(sigs, b)
			}
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || len(sigs) == 0 {
		return fmt.Errorf("webhook: malformed %s header %q: want t=<unix>,v1=<hex>", SignatureHeader, header)
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return ErrExpired
	}
	want := mac(key, ts, body)
	for _, s := range sigs {
		if hmac.Equal(s, want) {
			return nil
		}
	}
	return ErrBadSignature
}
