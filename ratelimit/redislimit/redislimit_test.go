package redislimit_test

import (
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/svc-dev/svc/internal/servertest"
	"github.com/svc-dev/svc/ratelimit"
	"github.com/svc-dev/svc/ratelimit/ratelimittest"
	"github.com/svc-dev/svc/ratelimit/redislimit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformance(t *testing.T) {
	srv := servertest.StartRedis(t)
	opt, err := redis.ParseURL(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	ratelimittest.Run(t, ratelimittest.Store{
		Open: func(t *testing.T) ratelimit.Shared {
			rdb := redis.NewClient(opt)
			t.Cleanup(func() { _ = rdb.Close() })
			return redislimit.New(rdb, "")
		},
		Kill: func(*testing.T) { srv.Stop() },
	})
}
