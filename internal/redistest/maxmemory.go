package redistest

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// AtMaxmemory sets the maxmemory of a test's own server (see [StartServer];
// never the shared one) to half of what it uses, so that with the default
// policy, noeviction, Redis refuses every command that may add memory with
// OOM, as a server that filled up does. It fails the test unless a SET is
// then refused.
func AtMaxmemory(t testing.TB, c *redis.Client) {
	t.Helper()
	ctx := context.Background()
	info, err := c.Info(ctx, "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	var used int64
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			used, _ = strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	if used <= 0 {
		t.Fatalf("redistest: no used_memory in INFO memory:\n%s", info)
	}
	if err := c.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used/2, 10)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, "redistest:probe", "x", 0).Err(); err == nil || !strings.HasPrefix(err.Error(), "OOM") {
		t.Fatalf("redistest: a SET at maxmemory: %v, want OOM", err)
	}
}
