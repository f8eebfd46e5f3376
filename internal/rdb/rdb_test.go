package rdb

// Direct tests of the scripts against a real Redis (internal/redistest):
// each script's happy path, a call sent again after a lost reply, and the
// bound on the work of one call. Every test has a key prefix of its own.

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq/internal/keyaudit"
	"github.com/streamq/streamq/internal/redistest"
	"github.com/streamq/streamq/internal/wire"
)

// TestMain runs the tests with the key audit (package keyaudit): no script
// without a slot probe may touch a key it does not declare.
func TestMain(m *testing.M) { os.Exit(redistest.RunAround(m, keyaudit.Around(Scripts()))) }

// env is one test's queue.
type env struct {
	t   *testing.T
	ctx context.Context
	c   *redis.Client
	q   *Queue
	k   Keys
	pk  PriorityKeys
}

// setup returns a queue "q" of group "g" under a key prefix of the test's
// own, configured by cfg (its Prefix, Name and Group are set here), whose
// keys are deleted when the test ends.
func setup(t *testing.T, cfg Config) *env {
	t.Helper()
	c := redistest.NewClient(t)
	cfg.Prefix, cfg.Name, cfg.Group = redistest.Name(t), "q", "g"
	redistest.DeleteKeysAtCleanup(t, c, cfg.Prefix+":*")
	q := New(c, cfg)
	return &env{t: t, ctx: context.Background(), c: c, q: q, k: q.Keys(), pk: q.Priority().Keys()}
}

// group creates the stream and its group, reading from the start.
func (e *env) group() {
	e.t.Helper()
	if err := e.c.XGroupCreateMkStream(e.ctx, e.k.Stream, "g", "0").Err(); err != nil && !IsBusyGroup(err) {
		e.t.Fatal(err)
	}
}

// job returns the wire fields of a job with payload p.
func job(p string) []any { return (&wire.Job{Payload: []byte(p), EnqMillis: 1}).Args() }

// add appends jobs with payloads ps to the stream and returns their IDs.
func (e *env) add(ps ...string) []string {
	e.t.Helper()
	ids := make([]string, len(ps))
	for i, p := range ps {
		id, err := e.c.XAdd(e.ctx, &redis.XAddArgs{Stream: e.k.Stream, Values: job(p)}).Result()
		if err != nil {
			e.t.Fatal(err)
		}
		ids[i] = id
	}
	return ids
}

// read delivers up to n entries to consumer and returns their IDs.
//
// It reads at most 1,000 entries per call: a reply of tens of thousands
// can outlast the client's read timeout on a loaded machine, and the
// client's retry then finds the entries delivered already (an empty read).
func (e *env) read(consumer string, n int64) []string {
	e.t.Helper()
	var ids []string
	for int64(len(ids)) < n {
		res, err := e.c.XReadGroup(e.ctx, &redis.XReadGroupArgs{Group: "g", Consumer: consumer, Streams: []string{e.k.Stream, ">"}, Count: min(n-int64(len(ids)), 1000), Block: -1}).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			e.t.Fatal(err)
		}
		got := len(ids)
		for _, s := range res {
			for _, m := range s.Messages {
				ids = append(ids, m.ID)
			}
		}
		if len(ids) == got {
			break // nothing more to read
		}
	}
	return ids
}

// entries returns the IDs of the entries of stream key.
func (e *env) entries(key string) []string { return e.column(key, "") }

// payloads returns the payloads of the entries of stream key.
func (e *env) payloads(key string) []string { return e.column(key, "payload") }

// column returns field of every entry of stream key, or its ID for "".
func (e *env) column(key, field string) []string {
	e.t.Helper()
	es, err := e.c.XRange(e.ctx, key, "-", "+").Result()
	if err != nil {
		e.t.Fatal(err)
	}
	out := make([]string, len(es))
	for i, m := range es {
		if field == "" {
			out[i] = m.ID
		} else {
			out[i], _ = m.Values[field].(string)
		}
	}
	return out
}

// fill appends n entries to stream key in one script call.
func (e *env) fill(key string, n int) {
	e.t.Helper()
	fill := redis.NewScript(`for i = 1, tonumber(ARGV[1]) do redis.call('XADD', KEYS[1], '*', 'v', '1', 'payload', 'x') end`)
	if err := fill.Run(e.ctx, e.c, []string{key}, n).Err(); err != nil && !errors.Is(err, redis.Nil) {
		e.t.Fatal(err)
	}
}

// pending returns the IDs pending in the group (for consumer, or for all
// with "").
func (e *env) pending(consumer string) []string {
	e.t.Helper()
	ps, err := e.c.XPendingExt(e.ctx, &redis.XPendingExtArgs{Stream: e.k.Stream, Group: "g", Start: "-", End: "+", Count: 1000, Consumer: consumer}).Result()
	if err != nil && !IsNoGroup(err) {
		e.t.Fatal(err)
	}
	ids := make([]string, len(ps))
	for i, p := range ps {
		ids[i] = p.ID
	}
	return ids
}

// card returns the number of members of a set or sorted set, fields of a
// hash, or entries of a stream at key.
func (e *env) card(key string) int64 {
	e.t.Helper()
	typ, err := e.c.Type(e.ctx, key).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	switch typ {
	case "zset":
		return e.c.ZCard(e.ctx, key).Val()
	case "set":
		return e.c.SCard(e.ctx, key).Val()
	case "hash":
		return e.c.HLen(e.ctx, key).Val()
	case "stream":
		return e.c.XLen(e.ctx, key).Val()
	case "none":
		return 0
	}
	e.t.Fatalf("%s is a %s", key, typ)
	return 0
}

// snapshot returns the keys of the test with their type and a digest of
// their content (DUMP, without TTLs), to check that a call changed nothing.
func (e *env) snapshot(except ...string) map[string]string {
	e.t.Helper()
	out := make(map[string]string)
	for _, k := range redistest.ScanKeys(e.t, e.c, e.k.base+"*") {
		if slices.Contains(except, k) {
			continue
		}
		d, err := e.c.Dump(e.ctx, k).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			e.t.Fatal(err)
		}
		out[k] = d
	}
	return out
}

// unchanged fails the test when the keys differ from before (see
// snapshot), but for the memo hashes, which a send that finds its token
// writes again.
func (e *env) unchanged(what string, before map[string]string) {
	e.t.Helper()
	after := e.snapshot()
	for k, v := range before {
		if after[k] != v && !e.isMemo(k) {
			e.t.Errorf("%s changed key %s", what, k)
		}
	}
	for k := range after {
		if _, ok := before[k]; !ok && !e.isMemo(k) {
			e.t.Errorf("%s made key %s", what, k)
		}
	}
}

func (e *env) isMemo(k string) bool {
	return len(k) > len(e.k.base)+5 && k[:len(e.k.base)+5] == e.k.base+"memo:"
}

// offsetClock is the system clock moved by its duration.
type offsetClock time.Duration

func (c offsetClock) Now() time.Time { return time.Now().Add(time.Duration(c)) }

// serverMillis returns the Redis server's time in Unix milliseconds.
func (e *env) serverMillis() int64 {
	e.t.Helper()
	tm, err := e.c.Time(e.ctx).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	return tm.UnixMilli()
}

func redisZ(score float64, member string) redis.Z { return redis.Z{Score: score, Member: member} }

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }
