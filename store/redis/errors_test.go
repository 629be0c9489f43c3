package redis_test

import (
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/store/redis"
	"github.com/sluicehq/sluice/store/storetest"
)

// The Redis store says a bad call in the words every store uses, under
// its own prefix (storetest.ErrorTexts), and refuses each before it sends
// anything: no key is stored.
func TestErrorTexts(t *testing.T) {
	srv := redistest.Start(t)
	storetest.ErrorTexts(t, redis.New(newClient(t, srv.Addr()), redis.Options{}), "redis store: ")
	if got := srv.MustDo("DBSIZE"); got != "0" {
		t.Errorf("bad calls stored %s keys, want 0", got)
	}
}
