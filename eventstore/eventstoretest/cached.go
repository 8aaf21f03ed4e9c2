package eventstoretest

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/eventstore"
)

// testUsageCachedTokens pins how Usage sums agent_completed's optional
// cached_tokens (the input tokens read from a provider's prompt cache), in
// every grouping /usage offers: read as tokens_used is (a fraction
// truncated; a negative, non-numeric or missing value counts 0, so events
// written before the key existed count 0), only on agent_completed, and
// taken out again with the events a retention drops.
func testUsageCachedTokens(t *testing.T, open Open) {
	ctx := context.Background()
	evs := []svc.RuntimeEvent{
		mk(svc.EventAgentCompleted, 0, "triage", "k1", "t1", svc.Payload{"tokens_used": 1000, "cached_tokens": 800, "model": "anthropic:claude"}),
		mk(svc.EventAgentCompleted, 1, "triage", "k2", "t1", svc.Payload{"tokens_used": 500, "model": "anthropic:claude"}), // no cache hit, or an old event
		mk(svc.EventAgentCompleted, 2, "billing", "k3", "t2", svc.Payload{"tokens_used": 300, "cached_tokens": 128.9, "model": "openai:gpt-4o"}),
		mk(svc.EventAgentCompleted, 3, "billing", "k4", "t2", svc.Payload{"tokens_used": 40, "cached_tokens": json.Number("32"), "model": "openai:gpt-4o"}),
		mk(svc.EventAgentCompleted, 4, "billing", "k5", "t3", svc.Payload{"tokens_used": 20, "cached_tokens": -5}),     // counts 0
		mk(svc.EventAgentCompleted, 5, "billing", "k6", "t3", svc.Payload{"tokens_used": 10, "cached_tokens": "lots"}), // counts 0
		mk(svc.EventAgentFailed, 6, "triage", "k7", "t1", svc.Payload{"cached_tokens": 999, "error": "x"}),             // not a completion
		mk(svc.EventToolCallCompleted, 7, "triage", "k1", "t1", svc.Payload{"tool_name": "s", "cached_tokens": 999}),   // not a completion
	}
	total := svc.UsageTotals{TokensUsed: 1870, CachedTokens: 960, Invocations: 6}
	want := map[string]svc.Usage{
		"none": {GroupBy: "none", Total: total},
		"agent": {GroupBy: "agent", Total: total, Groups: map[string]svc.UsageTotals{
			"triage":  {TokensUsed: 1500, CachedTokens: 800, Invocations: 2},
			"billing": {TokensUsed: 370, CachedTokens: 160, Invocations: 4}}},
		"trace": {GroupBy: "trace", Total: total, Groups: map[string]svc.UsageTotals{
			"t1": {TokensUsed: 1500, CachedTokens: 800, Invocations: 2},
			"t2": {TokensUsed: 340, CachedTokens: 160, Invocations: 2},
			"t3": {TokensUsed: 30, Invocations: 2}}},
		"model": {GroupBy: "model", Total: total, Groups: map[string]svc.UsageTotals{
			"anthropic:claude": {TokensUsed: 1500, CachedTokens: 800, Invocations: 2},
			"openai:gpt-4o":    {TokensUsed: 340, CachedTokens: 160, Invocations: 2},
			svc.UnknownModel:   {TokensUsed: 30, Invocations: 2}}},
	}
	s := open(t, eventstore.Retention{})
	write(t, s, evs[4:]...)
	write(t, s, evs[:4]...)
	for g, w := range want {
		got, err := s.Usage(ctx, g)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, w) {
			t.Errorf("Usage(%q):\n got %+v\nwant %+v", g, got, w)
		}
	}

	// A retention drops the oldest completions with their cached tokens,
	// also from the keys that keep other completions.
	s = open(t, eventstore.Retention{MaxRows: 7})
	write(t, s, evs...)
	prune(t, s)
	got, err := s.Usage(ctx, svc.GroupByAgent)
	w := svc.Usage{GroupBy: "agent", Total: svc.UsageTotals{TokensUsed: 870, CachedTokens: 160, Invocations: 5},
		Groups: map[string]svc.UsageTotals{
			"triage":  {TokensUsed: 500, Invocations: 1},
			"billing": {TokensUsed: 370, CachedTokens: 160, Invocations: 4}}}
	if err != nil || !reflect.DeepEqual(got, w) {
		t.Errorf("Usage(agent) after pruning to 7 rows:\n got %+v, %v\nwant %+v", got, err, w)
	}
	s = open(t, eventstore.Retention{MaxRows: 5})
	write(t, s, evs...)
	prune(t, s)
	got, err = s.Usage(ctx, svc.GroupByModel)
	w = svc.Usage{GroupBy: "model", Total: svc.UsageTotals{TokensUsed: 70, CachedTokens: 32, Invocations: 3},
		Groups: map[string]svc.UsageTotals{
			"openai:gpt-4o":  {TokensUsed: 40, CachedTokens: 32, Invocations: 1},
			svc.UnknownModel: {TokensUsed: 30, Invocations: 2}}}
	if err != nil || !reflect.DeepEqual(got, w) {
		t.Errorf("Usage(model) after pruning to 5 rows:\n got %+v, %v\nwant %+v", got, err, w)
	}
}
