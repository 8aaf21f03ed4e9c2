package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"math"
	"strings"
	"time"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/internal/settingval"
	"github.com/svc-dev/svc/model"
	"github.com/svc-dev/svc/ratelimit"
)

// The model_settings keys the runtime reads for flow control; they never
// reach a provider.
const (
	// keyRateLimit names the limit of the runtime's rate_limits the
	// agent's calls draw from.
	keyRateLimit = "rate_limit"
	// keyMaxConcurrent caps the agent's calls at once to each of its
	// models (the original system's setting), shared by the agents with
	// the same cap on the same model.
	keyMaxConcurrent = "max_concurrent_requests"
)

// WithRateLimits makes the agent's model calls wait for their turn under
// set's limits: the one model_settings.rate_limit names, a cap of
// model_settings.max_concurrent_requests calls at once per model, and
// otherwise the learned limit of the model's provider key (provider, base
// URL, API key, model). The `test` provider, which answers in process,
// has no learned limit. Without it (or with a nil set) calls never wait.
func WithRateLimits(set *ratelimit.Set) CompileOption {
	return func(c *compileConfig) { c.limits = set }
}

// compileLimits reads the flow-control settings of c and picks the limits
// of each of its models from set; the settings sent to the providers are
// the agent's without the runtime's keys.
func (c *Compiled) compileLimits(set *ratelimit.Set, bad func(error, string, ...any) error) error {
	ms := c.Def.ModelSettings
	c.settings = ms
	name, hasName := ms[keyRateLimit]
	capV, hasCap := ms[keyMaxConcurrent]
	if hasName || hasCap {
		c.settings = maps.Clone(ms)
		delete(c.settings, keyRateLimit)
		delete(c.settings, keyMaxConcurrent)
	}
	var named *ratelimit.Limiter
	if hasName && name != nil {
		s, ok := name.(string)
		if !ok || s == "" {
			return bad(nil, "agent %s: model_settings.%s: want the name of a limit of rate_limits, got %v", c.Def.Name, keyRateLimit, name)
		}
		if set != nil {
			if named, ok = set.Named(s); !ok {
				return bad(nil, "agent %s: model_settings.%s: no limit %q in the runtime's rate_limits", c.Def.Name, keyRateLimit, s)
			}
		}
	}
	capN := 0
	if hasCap && capV != nil {
		n, ok := settingval.Integer(capV)
		if !ok || n <= 0 || n > math.MaxInt32 {
			return bad(nil, "agent %s: model_settings.%s: want a positive whole number, got %v", c.Def.Name, keyMaxConcurrent, capV)
		}
		capN = int(n)
	}
	if set == nil {
		return nil
	}
	c.limits = make([][]*ratelimit.Limiter, len(c.Models))
	for i, m := range c.Models {
		var ls []*ratelimit.Limiter
		if named != nil {
			ls = append(ls, named)
		} else if !strings.HasPrefix(m.ID, "test:") {
			ls = append(ls, set.Learned(providerKey(m.ID, c.settings)))
		}
		if capN > 0 {
			ls = append(ls, set.Capped(m.ID, capN))
		}
		c.limits[i] = ls
	}
	return nil
}

// providerKey names the provider key a model's calls go to: the model,
// the base URL and a digest of the API key (or of the variable naming it)
// in settings, so that two agents calling one model with one key share
// its learned limit and the key itself is never shown.
func providerKey(id string, settings map[string]any) string {
	key := id
	if u, ok := settings["base_url"].(string); ok && u != "" {
		key += " at " + u
	}
	secret := ""
	if k, ok := settings["api_key"].(string); ok {
		secret = "key:" + k
	} else if e, ok := settings["api_key_env"].(string); ok {
		secret = "env:" + e
	}
	if secret != "" {
		sum := sha256.Sum256([]byte(secret))
		key += " key " + hex.EncodeToString(sum[:4])
	}
	return key
}

// acquire waits for the turn of a call to model i under its limits, with
// its token estimate; nil permits when it has no limits. The wait counts
// against the run's timeout (ctx), and a run cancelled while waiting
// leaves the queues at once.
func (r *runner) acquire(ctx context.Context, i int, estimate int64) ([]*ratelimit.Permit, error) {
	if i >= len(r.c.limits) || len(r.c.limits[i]) == 0 {
		return nil, nil
	}
	s := svc.ScopeFrom(ctx)
	run := s.RequestID
	if run == "" {
		run = r.inv.TraceID
	}
	prio := r.inv.Priority
	if prio == ratelimit.Normal {
		prio, _ = ratelimit.ParsePriority(s.Priority)
	}
	permits := make([]*ratelimit.Permit, 0, len(r.c.limits[i]))
	for _, l := range r.c.limits[i] {
		p, err := l.Acquire(ctx, run, prio, int(min(estimate, 1<<31)))
		if err != nil {
			releasePermits(permits, &svc.ModelResponse{}, nil)
			return nil, fmt.Errorf("waiting for rate limit %s: %w", l.Name(), err)
		}
		permits = append(permits, p)
		if p.Waited > rateLimitedAfter {
			r.emit(svc.EventRateLimited, svc.Payload{"rate_limit": l.Name(), "wait_ms": p.Waited.Milliseconds(), "reason": p.Reason})
		}
	}
	return permits, nil
}

// rateLimitedAfter is the wait past which a call's wait for a rate limit
// is told (a rate_limited event): shorter waits are the pace working.
const rateLimitedAfter = time.Second

// releasePermits ends the calls' turns with the tokens the call used and
// its error: what the answer's headers said of the provider's rate limits
// (on resp, or on the ProviderError) paces a learned limit, and a
// provider's 429 tells the limits to slow down.
func releasePermits(permits []*ratelimit.Permit, resp *svc.ModelResponse, err error) {
	throttled, retryAfter := false, time.Duration(0)
	var hint *svc.RateHint
	if err == nil {
		hint = resp.RateLimit
	} else if pe, ok := errors.AsType[*model.ProviderError](err); ok {
		hint = pe.RateLimit
		if pe.Status == 429 || pe.Class == model.ClassRateLimit {
			throttled, retryAfter = true, pe.RetryAfter
		}
	}
	tokens := int(min(resp.Tokens(), 1<<31))
	for _, p := range permits {
		p.Observe(hint)
		p.Done(tokens, throttled, retryAfter)
	}
}
