package main

import (
	"cmp"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"log"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// verify checks an X-Svc-Signature header: t=<unix seconds>,v1=<hex of
// HMAC-SHA256(key, t + "." + body)>, t within 5 minutes of now.
func verify(key []byte, header string, body []byte, now time.Time) error {
	var ts string
	var sigs []string
	for _, part := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			sigs = append(sigs, v)
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return errors.New("no timestamp")
	}
	if d := now.Sub(time.Unix(sec, 0)); d > 5*time.Minute || d < -5*time.Minute {
		return errors.New("timestamp too far from now")
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(ts + "."))
	mac.Write(body)
	want := mac.Sum(nil)
	for _, s := range sigs {
		if got, err := hex.DecodeString(s); err == nil && hmac.Equal(got, want) {
			return nil
		}
	}
	return errors.New("signature does not match")
}

func main() {
	key, err := os.ReadFile(os.Getenv("SVC_WEBHOOK_KEY_FILE")) // the file of --webhook-key-file
	if err != nil {
		log.Fatal(err)
	}
	key = []byte(strings.TrimSpace(string(key)))
	http.HandleFunc("POST /svc-callback", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 64<<20))
		if err != nil {
			http.Error(w, "read error", http.StatusBadRequest)
			return
		}
		if err := verify(key, r.Header.Get("X-Svc-Signature"), body, time.Now()); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized) // a 4xx: not sent again
			return
		}
		// X-Svc-Delivery is the same on every attempt: drop one seen before.
		log.Printf("%s: %s", r.Header.Get("X-Svc-Delivery"), body)
		w.WriteHeader(http.StatusNoContent)
	})
	log.Fatal(http.ListenAndServe(cmp.Or(os.Getenv("ADDR"), "127.0.0.1:9000"), nil))
}
