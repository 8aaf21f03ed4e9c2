package group_test

import (
	"encoding/json"
	"testing"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/group"
)

func BenchmarkFires(b *testing.B) {
	e := compileEdge(&testing.T{}, svc.GroupEdge{When: `output.category == "billing" && metadata.tier == "gold"`})
	v := svcVars()
	b.ReportAllocs()
	for b.Loop() {
		if ok, err := e.Fires(v); err != nil || !ok {
			b.Fatal(ok, err)
		}
	}
}

func BenchmarkBuildInput(b *testing.B) {
	e := compileEdge(&testing.T{}, svc.GroupEdge{Input: `{"ticket": output.ticket, "tier": metadata.tier}`})
	v := svcVars()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := e.BuildInput(v); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkItems1000(b *testing.B) {
	e := compileEdge(&testing.T{}, svc.GroupEdge{FanOut: `lists.range(1000)`})
	b.ReportAllocs()
	for b.Loop() {
		if items, err := e.Items(svcVars()); err != nil || len(items) != 1000 {
			b.Fatal(len(items), err)
		}
	}
}

func svcVars() group.Vars {
	return group.Vars{
		Output:   json.RawMessage(`{"category":"billing","ticket":{"id":42,"text":"refund please"}}`),
		Metadata: map[string]string{"tier": "gold"},
	}
}
