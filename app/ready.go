package app

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/svc-dev/svc"
)

// Readiness probe of the broker.
const (
	// brokerProbeTTL is how long a Ping's answer is reused: a load
	// balancer probing /readyz several times a second costs the broker
	// one round trip a second.
	brokerProbeTTL = time.Second
	// brokerPingTimeout bounds that round trip: a broker that takes longer
	// is not ready.
	brokerPingTimeout = time.Second
)

// brokerProbe is the /readyz check of a process with a broker: not ready
// while the client reports its connection down (svc.BrokerStatus, no round
// trip) or a Ping, made at most once per brokerProbeTTL, fails. It logs
// each change between ready and not ready, with the cause.
type brokerProbe struct {
	b   svc.Broker
	log *zap.Logger
	now func() time.Time

	mu   sync.Mutex
	at   time.Time // of the last Ping
	err  error     // its answer
	down bool      // what was logged last
}

func newBrokerProbe(b svc.Broker, log *zap.Logger) *brokerProbe {
	return &brokerProbe{b: b, log: log, now: time.Now}
}

// check is the server.WithReadyCheck function.
func (p *brokerProbe) check(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var err error
	if st, ok := p.b.(svc.BrokerStatus); ok {
		err = st.Connected()
	}
	if err == nil {
		if now := p.now(); p.at.IsZero() || now.Sub(p.at) >= brokerProbeTTL {
			pctx, cancel := context.WithTimeout(ctx, brokerPingTimeout)
			p.err = p.b.Ping(pctx)
			cancel()
			p.at = now
		}
		err = p.err
	}
	if (err != nil) != p.down {
		p.down = err != nil
		if p.down {
			p.log.Warn("broker not ready", zap.String("broker", p.b.Scheme()), zap.Error(err))
		} else {
			p.log.Info("broker ready again", zap.String("broker", p.b.Scheme()))
		}
	}
	if err != nil {
		return &svc.Error{Kind: svc.KindRuntime, Reason: "broker",
			Message: "the " + p.b.Scheme() + " broker is not reachable; the process reconnects on its own", Err: err}
	}
	return nil
}
