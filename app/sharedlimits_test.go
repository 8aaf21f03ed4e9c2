package app

import (
	"testing"

	"go.uber.org/zap"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/internal/servertest"
)

// With a Redis or NATS broker the named limits are the fleet's, drawn
// from the broker's store; with a memory broker (or none) they are the
// process's. /runtime/stats says which.
func TestNamedLimitsSharedThroughTheBroker(t *testing.T) {
	for _, tc := range []struct{ name, broker, want string }{
		{"none", "", ""},
		{"memory", "memory://app-shared-limits", ""},
		{"redis", "redis", "redis"},
		{"embedded", "embedded", "nats"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := Options{SpecsDir: exampleSpecs, DataDir: t.TempDir(), Store: "memory", Events: "none",
				Broker: tc.broker, Logger: zap.NewNop(), NoListen: true,
				RuntimeOptions: func(o svc.Options) svc.Options {
					o.RateLimits = map[string]svc.RateLimit{"api": {RequestsPerMinute: 600}, "conc": {MaxConcurrent: 2}}
					return o
				}}
			switch tc.broker {
			case "embedded":
				o.NATSListen = freeAddr(t)
			case "redis":
				o.Broker = servertest.Redis(t)
			}
			a, err := New(o)
			if err != nil {
				t.Fatal(err)
			}
			if err := a.Start(); err != nil {
				t.Fatal(err)
			}
			defer shutdown(t, a)
			got := map[string]string{}
			for _, st := range a.Runtime().RateLimits() {
				got[st.Name] = st.Shared
			}
			if got["api"] != tc.want || got["conc"] != "" {
				t.Errorf("shared = %v: want api %q, conc (max_concurrent only) \"\"", got, tc.want)
			}
		})
	}
}
