package priority_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/redistest"
	"github.com/streamq/streamq/priority"
)

// privateClient returns a client of srv for user (with password "pw"; ""
// for the default user), closed when the test ends.
func privateClient(t *testing.T, srv *redistest.Server, user string) *redis.Client {
	t.Helper()
	opt := &redis.Options{Addr: srv.Addr()}
	if user != "" {
		opt.Username, opt.Password = user, "pw"
	}
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// sameQueue returns an env for e's queue (the same name and keys) on
// another client.
func sameQueue(t *testing.T, e *env, rdb *redis.Client) *env {
	t.Helper()
	q, err := streamq.NewQueue(rdb, e.q.Name(), nil)
	if err != nil {
		t.Fatal(err)
	}
	pq, err := priority.NewQueue(q, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &env{rdb: rdb, q: q, pq: pq, p: e.p}
}

// TestWorker_Run_ScriptPermissionDeniedIsFatal: a command denied by an ACL
// inside a script is reported by Redis 7 as "ERR The user executing the
// script can't run this command", not as NOPERM. Run must return it, as it
// returns NOPERM, instead of retrying forever.
func TestWorker_Run_ScriptPermissionDeniedIsFatal(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	ctx := context.Background()
	admin := privateClient(t, srv, "")
	if err := admin.Do(ctx, "ACL", "SETUSER", "nozadd", "on", ">pw", "~*", "+@all", "-zadd").Err(); err != nil {
		t.Fatal(err)
	}
	e := setupClient(t, admin, nil)
	e.push(t, 1, 2)
	w := sameQueue(t, e, privateClient(t, srv, "nozadd")).newWorker(t,
		streamq.HandlerFunc(func(context.Context, *streamq.Message) error { return nil }), priority.WorkerConfig{})

	errc := make(chan error, 1)
	redistest.Background(t, "Worker.Run", waitTimeout, func(ctx context.Context) error {
		errc <- w.Run(ctx)
		return nil
	})
	select {
	case err := <-errc:
		if err == nil || !strings.Contains(err.Error(), "can't run this command") {
			t.Fatalf("Run returned %v, want the permission error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10s: it retries a permission error that retrying cannot fix")
	}
	if s := e.stats(t); s.Ready != 2 || s.Leased != 0 {
		t.Errorf("stats %s, want both jobs ready", stringify(s))
	}
}
