package writebehind_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/redistest"
	"github.com/streamq/streamq/writebehind"
)

func TestNewWriter_Config(t *testing.T) {
	t.Parallel()
	rdb := redistest.NewClient(t)
	q, err := streamq.NewQueue(rdb, redistest.Name(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		q     *streamq.Queue
		cfg   *writebehind.WriterConfig
		field string // "" means valid
	}{
		{name: "nil config", q: q},
		{name: "TTL", q: q, cfg: &writebehind.WriterConfig{TTL: time.Minute}},
		{name: "nil queue", field: "queue"},
		{name: "negative TTL", q: q, cfg: &writebehind.WriterConfig{TTL: -time.Second}, field: "WriterConfig.TTL"},
		{name: "TTL below 1ms", q: q, cfg: &writebehind.WriterConfig{TTL: time.Microsecond}, field: "WriterConfig.TTL"},
		{name: "nil hook", q: q, cfg: &writebehind.WriterConfig{Hooks: []streamq.EnqueueHook{nil}}, field: "WriterConfig.Hooks[0]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := writebehind.NewWriter(tc.q, tc.cfg)
			if tc.field == "" {
				if err != nil {
					t.Fatalf("NewWriter: %v", err)
				}
				return
			}
			var ce *streamq.ConfigError
			if !errors.As(err, &ce) || ce.Field != tc.field {
				t.Fatalf("NewWriter error = %v, want a *streamq.ConfigError for %s", err, tc.field)
			}
			t.Log(err)
		})
	}
}

// entryMessage turns a stream entry into the Message a consumer would hand to
// its handler (the fields the write-behind handler reads).
func entryMessage(t *testing.T, e redis.XMessage) *streamq.Message {
	t.Helper()
	if e.Values["v"] != "1" {
		t.Fatalf("entry %s: field v = %v, want 1 (wire format version)", e.ID, e.Values["v"])
	}
	if _, err := strconv.ParseInt(e.Values["enq"].(string), 10, 64); err != nil {
		t.Fatalf("entry %s: field enq = %v, want Unix ms", e.ID, e.Values["enq"])
	}
	m := &streamq.Message{ID: e.ID, Payload: []byte(e.Values["payload"].(string)), Headers: map[string]string{}}
	if err := json.Unmarshal([]byte(e.Values["headers"].(string)), &m.Headers); err != nil {
		t.Fatalf("entry %s: headers %v are not a JSON object of strings: %v", e.ID, e.Values["headers"], err)
	}
	return m
}

func TestWriter_SetGetDelete(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	q := newQueue(t, nil)
	w := newWriter(t, q, nil)

	v1, err := w.Set(ctx, "user:1", []byte("Ada"))
	if err != nil {
		t.Fatal(err)
	}
	v2, err := w.Set(ctx, "user:1", []byte("Ada Lovelace"))
	if err != nil {
		t.Fatal(err)
	}
	v3, err := w.Set(ctx, "user:2", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !(0 < v1 && v1 < v2 && v2 < v3) {
		t.Fatalf("versions %d, %d, %d: want strictly increasing from 1", v1, v2, v3)
	}
	if got, found, err := w.Get(ctx, "user:1"); err != nil || !found || string(got) != "Ada Lovelace" {
		t.Fatalf("Get(user:1) = %q, %v, %v; want the last value", got, found, err)
	}
	if got, found, err := w.Get(ctx, "user:2"); err != nil || !found || len(got) != 0 {
		t.Fatalf("Get(user:2) = %q, %v, %v; want an empty value", got, found, err)
	}
	// The cache is a plain string under the queue's hash tag.
	if !strings.Contains(w.CacheKey("user:1"), "{"+q.Name()+"}") {
		t.Fatalf("CacheKey %q does not carry the queue's hash tag", w.CacheKey("user:1"))
	}
	if got, err := q.Client().Get(ctx, w.CacheKey("user:1")).Result(); err != nil || got != "Ada Lovelace" {
		t.Fatalf("GET %s = %q, %v", w.CacheKey("user:1"), got, err)
	}

	vd, err := w.Delete(ctx, "user:1")
	if err != nil {
		t.Fatal(err)
	}
	if vd <= v3 {
		t.Fatalf("delete version %d, want > %d", vd, v3)
	}
	if _, found, err := w.Get(ctx, "user:1"); err != nil || found {
		t.Fatalf("Get after Delete: found %v, err %v; want a miss", found, err)
	}
	// Deleting a key that is not cached still queues the deletion.
	vn, err := w.Delete(ctx, "never-set")
	if err != nil {
		t.Fatal(err)
	}

	entries, err := q.Client().XRange(ctx, q.StreamKey(), "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	want := []writebehind.Change{
		{Key: "user:1", Value: []byte("Ada"), Version: v1},
		{Key: "user:1", Value: []byte("Ada Lovelace"), Version: v2},
		{Key: "user:2", Value: []byte{}, Version: v3},
		{Key: "user:1", Deleted: true, Version: vd},
		{Key: "never-set", Deleted: true, Version: vn},
	}
	if len(entries) != len(want) {
		t.Fatalf("stream holds %d entries, want %d", len(entries), len(want))
	}
	for i, e := range entries {
		m := entryMessage(t, e)
		got, err := writebehind.FromMessage(m)
		if err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		if got.Key != want[i].Key || string(got.Value) != string(want[i].Value) || got.Deleted != want[i].Deleted || got.Version != want[i].Version {
			t.Errorf("entry %d = %+v, want %+v", i, got, want[i])
		}
		if m.Headers[writebehind.HeaderVersion] != strconv.FormatInt(want[i].Version, 10) {
			t.Errorf("entry %d: header %s = %q", i, writebehind.HeaderVersion, m.Headers[writebehind.HeaderVersion])
		}
	}
}

func TestWriter_Version(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	q := newQueue(t, nil)
	w := newWriter(t, q, &writebehind.WriterConfig{TTL: time.Hour})
	short := newWriter(t, q, &writebehind.WriterConfig{TTL: 20 * time.Millisecond})

	var last int64
	for i := range 20 {
		key := "k" + strconv.Itoa(i%3)
		var (
			v   int64
			err error
		)
		if i%4 == 3 {
			v, err = w.Delete(ctx, key)
		} else {
			v, err = w.Set(ctx, key, []byte("x"))
		}
		if err != nil {
			t.Fatal(err)
		}
		if v <= last {
			t.Fatalf("change %d got version %d after %d: versions must strictly increase", i, v, last)
		}
		last = v
	}
	if ttl, err := q.Client().PTTL(ctx, w.CacheKey("k2")).Result(); err != nil || ttl <= 0 || ttl > time.Hour {
		t.Fatalf("PTTL of a cached key = %v, %v; want at most the configured hour", ttl, err)
	}
	// A cache entry expires; the version counter does not.
	last, err := short.Set(ctx, "k1", []byte("short-lived"))
	if err != nil {
		t.Fatal(err)
	}
	redistest.WaitFor(t, 5*time.Second, "the cache entry expired", func() bool {
		_, found, err := w.Get(ctx, "k1")
		return err == nil && !found
	})
	v, err := w.Set(ctx, "k1", []byte("y"))
	if err != nil {
		t.Fatal(err)
	}
	if v != last+1 {
		t.Fatalf("version after expiry = %d, want %d (the counter is never reset)", v, last+1)
	}
	if got, err := q.Client().Get(ctx, q.Key(writebehind.VersionKeyPart)).Int64(); err != nil || got != v {
		t.Fatalf("counter %s = %d, %v; want %d", q.Key(writebehind.VersionKeyPart), got, err, v)
	}
	if ttl, err := q.Client().PTTL(ctx, q.Key(writebehind.VersionKeyPart)).Result(); err != nil || ttl != -1 {
		t.Fatalf("counter PTTL = %v, %v; want no expiry", ttl, err)
	}
}

func TestWriter_Limits(t *testing.T) {
	t.Parallel()
	q := newQueue(t, nil)
	w := newWriter(t, q, nil)
	long := strings.Repeat("k", writebehind.MaxKeyBytes+1)
	for _, tc := range []struct {
		name  string
		op    func(ctx context.Context) error
		valid bool
	}{
		{name: "key at the limit", valid: true, op: func(ctx context.Context) error {
			_, err := w.Set(ctx, strings.Repeat("k", writebehind.MaxKeyBytes), []byte("v"))
			return err
		}},
		{name: "empty key", op: func(ctx context.Context) error { _, err := w.Set(ctx, "", []byte("v")); return err }},
		{name: "key too long", op: func(ctx context.Context) error { _, err := w.Set(ctx, long, []byte("v")); return err }},
		{name: "key not UTF-8", op: func(ctx context.Context) error { _, err := w.Set(ctx, "a\xffb", []byte("v")); return err }},
		{name: "key with NUL", op: func(ctx context.Context) error { _, err := w.Set(ctx, "a\x00b", []byte("v")); return err }},
		{name: "value too large", op: func(ctx context.Context) error {
			_, err := w.Set(ctx, "big", make([]byte, writebehind.MaxValueBytes+1))
			return err
		}},
		{name: "delete empty key", op: func(ctx context.Context) error { _, err := w.Delete(ctx, ""); return err }},
		{name: "get key too long", op: func(ctx context.Context) error { _, _, err := w.Get(ctx, long); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.op(t.Context())
			if tc.valid {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var ce *writebehind.ChangeError
			if !errors.As(err, &ce) || !errors.Is(err, writebehind.ErrInvalidChange) {
				t.Fatalf("error = %v, want a *ChangeError", err)
			}
			t.Log(err)
		})
	}
	// Only the valid change reached Redis.
	if n, err := q.Client().XLen(t.Context(), q.StreamKey()).Result(); err != nil || n != 1 {
		t.Fatalf("XLEN = %d, %v; want 1", n, err)
	}
	if v, err := q.Client().Get(t.Context(), q.Key(writebehind.VersionKeyPart)).Int64(); err != nil || v != 1 {
		t.Fatalf("version counter = %d, %v; want 1", v, err)
	}
}

func TestWriter_QueueFull(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	q := newQueue(t, &streamq.QueueConfig{MaxLen: 3})
	w := newWriter(t, q, nil)
	for i := range 3 {
		if _, err := w.Set(ctx, "k"+strconv.Itoa(i), []byte("old")); err != nil {
			t.Fatal(err)
		}
	}
	// Full: nothing changes, neither the cache nor the counter.
	if _, err := w.Set(ctx, "k0", []byte("new")); !errors.Is(err, streamq.ErrQueueFull) {
		t.Fatalf("Set on a full queue = %v, want ErrQueueFull", err)
	}
	if _, err := w.Set(ctx, "k9", []byte("new")); !errors.Is(err, streamq.ErrQueueFull) {
		t.Fatalf("Set on a full queue = %v, want ErrQueueFull", err)
	}
	if _, err := w.Delete(ctx, "k1"); !errors.Is(err, streamq.ErrQueueFull) {
		t.Fatalf("Delete on a full queue = %v, want ErrQueueFull", err)
	}
	for key, want := range map[string]string{"k0": "old", "k1": "old"} {
		if got, found, err := w.Get(ctx, key); err != nil || !found || string(got) != want {
			t.Fatalf("Get(%s) = %q, %v, %v after a refused change; want %q", key, got, found, err, want)
		}
	}
	if _, found, _ := w.Get(ctx, "k9"); found {
		t.Fatal("a refused Set reached the cache")
	}
	if v, err := q.Client().Get(ctx, q.Key(writebehind.VersionKeyPart)).Int64(); err != nil || v != 3 {
		t.Fatalf("version counter = %d, %v; want 3 (refused changes take no version)", v, err)
	}
	if n, _ := q.Client().XLen(ctx, q.StreamKey()).Result(); n != 3 {
		t.Fatalf("XLEN = %d, want 3", n)
	}

	// Once the changes are persisted and acknowledged, their history is
	// trimmed and writes go through again.
	sink := newSink(t, writebehind.DialectSQLite, "")
	h := newHandler(t, sink, &writebehind.HandlerConfig{MaxLatency: time.Millisecond})
	runConsumer(t, q, h, consumerConfig(streamq.ConsumerConfig{}))
	waitDrained(t, q)
	v, err := w.Set(ctx, "k0", []byte("new"))
	if err != nil {
		t.Fatalf("Set after the queue drained: %v", err)
	}
	if v != 4 {
		t.Fatalf("version = %d, want 4", v)
	}
}

func TestWriter_Hooks(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	q := newQueue(t, nil)
	w := newWriter(t, q, &writebehind.WriterConfig{Hooks: []streamq.EnqueueHook{
		func(_ context.Context, h map[string]string) {
			h["traceparent"] = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
			// A confused hook: the writer's own headers must win.
			h[writebehind.HeaderKey] = "other"
			h[writebehind.HeaderOp] = writebehind.OpDelete
			h[writebehind.HeaderVersion] = "999999"
		},
	}})
	v, err := w.Set(ctx, "user:7", []byte("Grace"))
	if err != nil {
		t.Fatal(err)
	}
	entries, err := q.Client().XRange(ctx, q.StreamKey(), "-", "+").Result()
	if err != nil || len(entries) != 1 {
		t.Fatalf("XRANGE = %d entries, %v; want 1", len(entries), err)
	}
	m := entryMessage(t, entries[0])
	if m.Headers["traceparent"] == "" {
		t.Errorf("headers %v: the hook's header is missing", m.Headers)
	}
	got, err := writebehind.FromMessage(m)
	if err != nil {
		t.Fatal(err)
	}
	if got.Key != "user:7" || got.Deleted || got.Version != v || string(got.Value) != "Grace" {
		t.Fatalf("change %+v, want user:7 = Grace at version %d", got, v)
	}
}
