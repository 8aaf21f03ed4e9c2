package settingval_test

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/svc-dev/svc/internal/settingval"
)

func TestNumberIntegerCount(t *testing.T) {
	for _, v := range []any{3, int8(3), uint64(3), float32(3), 3.0, json.Number("3")} {
		if f, ok := settingval.Number(v); !ok || f != 3 {
			t.Errorf("Number(%T %v) = %v, %v", v, v, f, ok)
		}
		if n, ok := settingval.Count(v); !ok || n != 3 {
			t.Errorf("Count(%T %v) = %v, %v", v, v, n, ok)
		}
	}
	for _, v := range []any{"3", nil, true, math.NaN(), math.Inf(1), json.Number("x")} {
		if _, ok := settingval.Number(v); ok {
			t.Errorf("Number(%T %v) accepted", v, v)
		}
	}
	for _, v := range []any{-1, 2.5, uint64(math.MaxUint64), 1e300} {
		if _, ok := settingval.Count(v); ok {
			t.Errorf("Count(%T %v) accepted", v, v)
		}
	}
	if n, ok := settingval.Integer(-4.0); !ok || n != -4 {
		t.Errorf("Integer(-4.0) = %v, %v", n, ok)
	}
}
