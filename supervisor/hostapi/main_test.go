package hostapi_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/svc-dev/svc"
)

// The message API is tested through the runtime that serves it
// (supervisor.Runtime.PID), as a host's actors use it.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func echo(name string, settings map[string]any) svc.Agent {
	return svc.Agent{Name: name, Model: "test:echo", ModelSettings: settings}
}
