package redistest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// newTestClient returns a client for opt, closed in t.Cleanup.
func newTestClient(t *testing.T, opt *redis.Options) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

func TestStartReplica(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), TopologyTimeout)
	defer cancel()
	start := time.Now()
	master := StartServer(t)
	replica := StartReplica(t, master)
	t.Logf("master and replica in sync after %v", time.Since(start).Round(time.Millisecond))

	m := newTestClient(t, &redis.Options{Addr: master.Addr()})
	r := newTestClient(t, &redis.Options{Addr: replica.Addr()})
	if err := m.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET on the master: %v", err)
	}
	// WAIT returns once the replica acknowledged the write.
	if n, err := m.Wait(ctx, 1, testTimeout).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT 1 = %d, %v; want 1 replica", n, err)
	}
	if got, err := r.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("GET on the replica = %q, %v; want \"v\"", got, err)
	}
	if err := r.Set(ctx, "k2", "v", 0).Err(); err == nil || !strings.HasPrefix(err.Error(), "READONLY") {
		t.Errorf("SET on the replica: err = %v, want READONLY", err)
	}

	// A restarted replica syncs again, and gets the data back from the master.
	replica.Restart()
	if err := replica.WaitInSync(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := r.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("GET on the restarted replica = %q, %v; want \"v\"", got, err)
	}
}

func TestServer_WaitInSync_NotAReplica(t *testing.T) {
	t.Parallel()
	s := StartServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err := s.WaitInSync(ctx)
	if err == nil {
		t.Fatal("WaitInSync on a master returned nil, want an error")
	}
	for _, want := range []string{s.Addr(), "not in sync", "role:master", "deadline exceeded"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %q: %v", want, err)
		}
	}
}

func TestParseInfo(t *testing.T) {
	t.Parallel()
	got := parseInfo("# Replication\r\nrole:slave\r\nmaster_host:127.0.0.1\r\n\r\n# Other\r\nodd_line\r\nkv:a:b\r\n")
	want := map[string]string{"role": "slave", "master_host": "127.0.0.1", "kv": "a:b"}
	if len(got) != len(want) {
		t.Fatalf("parseInfo = %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("parseInfo[%q] = %q, want %q", k, got[k], v)
		}
	}
}
