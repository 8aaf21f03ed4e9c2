package supervisor

import (
	"context"
	"testing"

	"github.com/svc-dev/svc"
)

// A plain run writes no scope: reading the scopes of a bare context, or
// of one with only a request id, and entering a run there without a
// progress callback or a token cap allocates nothing.
func TestScopeOfPlainRunAllocatesNothing(t *testing.T) {
	rt := &Runtime{} // no max_tokens_per_run: withCap adds no cap
	task := svc.TaskSpec{}
	for name, ctx := range map[string]context.Context{
		"bare":       context.Background(),
		"request id": svc.WithRequestID(context.Background(), "req"),
	} {
		allocs := testing.AllocsPerRun(100, func() {
			c := rt.withCap(ctx, &task)
			c, _, rs := rt.enter(c)
			if c != ctx || rs != noRun || runOf(c).budget != nil {
				t.Fatalf("%s: a plain run changed its context", name)
			}
		})
		if allocs != 0 {
			t.Errorf("%s: %v allocations entering a plain run, want 0", name, allocs)
		}
	}
}

// The runtime's state survives a scope written over it by another
// package (an invocation's tool call writes svc.Scope afresh): it rides
// under its own key.
func TestRunScopeSurvivesScopeWrites(t *testing.T) {
	ctx := withSpawn(context.Background(), []string{"boss", "kid"})
	ctx = withRounds(ctx)
	ctx = svc.WithScope(ctx, svc.Scope{Depth: 3, ParentTrace: "p"})
	rs := runOf(ctx)
	if len(rs.path) != 2 || rs.path[1] != "kid" || !rs.nested || rs.rounds == nil {
		t.Fatalf("runScope after a scope write: %+v", rs)
	}
	if s := svc.ScopeFrom(ctx); s.Depth != 3 || s.ParentTrace != "p" {
		t.Errorf("scope %+v", s)
	}
}
