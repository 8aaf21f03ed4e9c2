package app

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/batch"
)

// startBatches starts the batch manager over the run store, when it keeps
// batches (every store in stores/ does): it resumes the batches a stopped
// process left unfinished, and, on a store shared by several serve nodes,
// claims those of dead nodes every half lease.
func (a *App) startBatches(log *zap.Logger) error {
	bs, ok := a.runStore.(svc.BatchStore)
	if !ok || a.opts.Worker != nil { // a worker serves no HTTP
		return nil
	}
	cfg := batch.Config{Store: bs, Runner: a.rt, Log: log.Named("batch"), Owner: uuid.NewString(), ProviderPoll: a.opts.ProviderBatchPoll,
		Callbacks: a.callbacks()}
	if s, ok := a.runStore.(svc.SharedRunStore); ok {
		cfg.Owner = s.NodeID() + "/" + cfg.Owner
		cfg.ClaimEvery = s.LeaseTTL() / 2
	}
	m, err := batch.New(cfg)
	if err != nil {
		return fmt.Errorf("app: batches: %w", err)
	}
	if err := m.Start(context.Background()); err != nil {
		_ = m.Close()
		return fmt.Errorf("app: batches: %w", err)
	}
	a.batches = m
	return nil
}
