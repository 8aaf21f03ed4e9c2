package main

import (
	"bytes"
	"fmt"
	"os"

	"github.com/spf13/pflag"

	"github.com/svc-dev/svc/app"
)

// webhookFlags are serve's flags of the callbacks (docs/api.md, Webhooks).
type webhookFlags struct {
	webhookKeyFile      string
	webhookAllowPrivate bool
}

// minWebhookKey is the shortest signing key taken: shorter is guessable.
const minWebhookKey = 16

func (w *webhookFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&w.webhookKeyFile, "webhook-key-file", "", "file holding the key (at least 16 bytes; surrounding whitespace is dropped) that signs the callbacks of batches and submitted runs (callback_url) with HMAC-SHA256 in X-Svc-Signature; without it a callback_url is refused with 400 (default none)")
	fs.BoolVar(&w.webhookAllowPrivate, "webhook-allow-private", false, "let callbacks go to loopback, private and link-local addresses, which are refused otherwise as a guard against server-side request forgery (default false)")
}

// apply reads the key file into o: a file that cannot be read, or holds
// too short a key, stops serve before it starts, naming the file.
func (w *webhookFlags) apply(o *app.Options) error {
	o.WebhookAllowPrivate = w.webhookAllowPrivate
	if w.webhookKeyFile == "" {
		return nil
	}
	b, err := os.ReadFile(w.webhookKeyFile)
	if err != nil {
		return fmt.Errorf("--webhook-key-file: %w", err)
	}
	key := bytes.TrimSpace(b)
	if len(key) < minWebhookKey {
		return fmt.Errorf("--webhook-key-file %s: the key is %d bytes, want at least %d (e.g. openssl rand -hex 32 > %s)",
			w.webhookKeyFile, len(key), minWebhookKey, w.webhookKeyFile)
	}
	o.WebhookKey = key
	return nil
}
