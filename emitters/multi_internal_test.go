package emitters

import (
	"testing"

	"github.com/svc-dev/svc"
)

func TestMultiFlattens(t *testing.T) {
	a, b, c := svc.NopEmitter{}, svc.EmitterFunc(func(svc.RuntimeEvent) {}), svc.NopEmitter{}
	m := Multi(a, Multi(b, Multi(c, nil)), nil, Multi()).(multi)
	if len(m) != 3 {
		t.Fatalf("Multi kept %d entries, want 3 (nested flattened, nils dropped)", len(m))
	}
	for i, e := range m {
		if _, nested := e.(multi); nested || e == nil {
			t.Fatalf("entry %d is %T", i, e)
		}
	}
}
