package app

import (
	"fmt"

	"go.uber.org/zap"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/webhook"
)

// newWebhooks builds the sender of callbacks over the run store, when a
// signing key is given and the process serves HTTP: without a key a
// callback_url is refused, and the deliveries a previous process queued
// wait for one that has a key.
func (a *App) newWebhooks(log *zap.Logger) error {
	o := a.opts
	if len(o.WebhookKey) == 0 || o.Worker != nil {
		return nil
	}
	ws, ok := a.runStore.(svc.WebhookStore)
	if !ok {
		return &ConfigError{Option: "WebhookKey", Err: fmt.Errorf("the run store (%T) keeps no webhook queue", a.runStore)}
	}
	s, err := webhook.New(webhook.Config{Store: ws, Key: o.WebhookKey, AllowPrivate: o.WebhookAllowPrivate, Log: log.Named("webhook")})
	if err != nil {
		return fmt.Errorf("app: webhooks: %w", err)
	}
	a.webhooks = s
	return nil
}

// callbacks is the sender as the runtime and the batches take it: nil
// without one.
func (a *App) callbacks() svc.Callbacks {
	if a.webhooks == nil {
		return nil
	}
	return a.webhooks
}

// startWebhooks starts delivering, the deliveries a stopped process left
// included, once the runs and batches they report on can be read.
func (a *App) startWebhooks() {
	if a.webhooks == nil {
		return
	}
	src := webhook.Sources{Runs: a.rt}
	if a.batches != nil {
		src.Batches = a.batches
	}
	a.webhooks.Start(src)
}
