package storetest

import (
	"fmt"
	"testing"

	"github.com/svc-dev/svc"
)

// testTenant: a run keeps the tenant it was created with (RunRecord.Tenant,
// "" for the default tenant) through every change of state, and ListRuns
// with a Tenant lists that tenant's runs alone, page by page and with a
// state filter too; without one it lists every tenant's.
func testTenant(t *testing.T, s svc.RunStore) {
	ctx := t.Context()
	tenants := []string{"team-a", "team-b", ""}
	byTenant := map[string][]listed{}
	running := map[string][]listed{}
	var all []listed
	for i := range 12 {
		tenant := tenants[i%3]
		r := listed{fmt.Sprintf("run-%02d", i), ts(i / 2)}
		mustOK(t, "Create", s.Create(ctx, svc.RunRecord{RunID: r.id, Target: "echo", Kind: "agent", TraceID: traceOf(r.id), Tenant: tenant, CreatedAt: r.at}))
		if i%4 != 0 {
			mustOK(t, "SetState", s.SetState(ctx, r.id, svc.RunRunning, "", nil))
			running[tenant] = append(running[tenant], r)
		}
		if i%4 == 1 {
			mustOK(t, "SetProgress", s.SetProgress(ctx, r.id, svc.RunProgress{Total: 1}))
			mustOK(t, "Finish", s.Finish(ctx, r.id, svc.RunCompleted, "", []byte(`{"ok":true}`), nil))
			running[tenant] = running[tenant][:len(running[tenant])-1]
		}
		byTenant[tenant] = append(byTenant[tenant], r)
		all = append(all, r)
	}
	for i, r := range all {
		rec := get(t, s, r.id)
		if want := tenants[i%3]; rec.Tenant != want || rec.Status().Tenant != want {
			t.Errorf("run %s: tenant %q (status %q), want %q", r.id, rec.Tenant, rec.Status().Tenant, want)
		}
	}
	for _, tenant := range tenants[:2] {
		for _, limit := range []int{1, 3, 50} {
			checkListing(t, "tenant "+tenant, s, svc.RunFilter{Tenant: tenant, Limit: limit}, newestFirst(byTenant[tenant]))
			checkListing(t, "running of tenant "+tenant, s, svc.RunFilter{Tenant: tenant, State: svc.RunRunning, Limit: limit}, newestFirst(running[tenant]))
		}
	}
	checkListing(t, "every tenant", s, svc.RunFilter{Limit: 5}, newestFirst(all))
	checkListing(t, "an unknown tenant", s, svc.RunFilter{Tenant: "nobody"}, []string{})
}
