package app

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/svc-dev/svc"
)

// Many serve nodes: nodes sharing a run store (svc.SharedRunStore, Redis)
// each own the runs they create and keep a lease on them in the store.
// Every node sweeps: it fails the unfinished runs of the nodes whose lease
// expired (killed, or cut off from the store), so a dead node's runs end
// without waiting for it to come back.

// startSweeper starts the sweep of a shared run store, every half lease;
// stopSweeper ends it. A store that is not shared needs none.
func (a *App) startSweeper() {
	s, ok := a.runStore.(svc.SharedRunStore)
	if !ok {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	a.sweepStop, a.sweepDone = cancel, make(chan struct{})
	go func() {
		defer close(a.sweepDone)
		t := time.NewTicker(s.LeaseTTL() / 2)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if a.rt.Resumes() {
				// The runs of a dead node are resumed here, if this
				// node claims them first.
				resumed, failed, err := a.rt.ClaimExpired(ctx)
				switch {
				case err != nil && ctx.Err() == nil:
					a.log.Warn("run store sweep failed; trying again", zap.Error(err))
				case resumed+failed > 0:
					a.log.Warn("runs of serve nodes whose lease expired taken over",
						zap.Int("resumed", resumed), zap.Int("failed_interrupted", failed))
				}
				continue
			}
			n, nodes, err := s.Sweep(ctx)
			switch {
			case err != nil && ctx.Err() == nil:
				a.log.Warn("run store sweep failed; trying again", zap.Error(err))
			case n > 0:
				a.log.Warn("runs of serve nodes whose lease expired marked failed (interrupted)",
					zap.Int("runs", n), zap.Strings("nodes", nodes))
			}
		}
	}()
}

func (a *App) stopSweeper() {
	if a.sweepStop != nil {
		a.sweepStop()
		<-a.sweepDone
	}
}
