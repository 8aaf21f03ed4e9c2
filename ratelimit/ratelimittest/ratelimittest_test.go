package ratelimittest_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/svc-dev/svc/ratelimit"
	"github.com/svc-dev/svc/ratelimit/ratelimittest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestMemory(t *testing.T) {
	m := ratelimittest.NewMemory()
	ratelimittest.Run(t, ratelimittest.Store{
		Open: func(*testing.T) ratelimit.Shared { return m },
		Kill: func(*testing.T) { m.Failing.Store(true) },
	})
}
