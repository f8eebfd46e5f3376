package writebehind_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/core"
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
	if got, err := core.Of(q).RDB.Get(ctx, w.CacheKey("user:1")).Result(); err != nil || got != "Ada Lovelace" {
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

	entries, err := core.Of(q).RDB.XRange(ctx, core.Of(q).Keys.Stream, "-", "+").Result()
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
	if ttl, err := core.Of(q).RDB.PTTL(ctx, w.CacheKey("k2")).Result(); err != nil || ttl <= 0 || ttl > time.Hour {
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
	if got, err := core.Of(q).RDB.Get(ctx, core.Of(q).Keys.Part(writebehind.VersionKeyPart)).Int64(); err != nil || got != v {
		t.Fatalf("counter %s = %d, %v; want %d", core.Of(q).Keys.Part(writebehind.VersionKeyPart), got, err, v)
	}
	if ttl, err := core.Of(q).RDB.PTTL(ctx, core.Of(q).Keys.Part(writebehind.VersionKeyPart)).Result(); err != nil || ttl != -1 {
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
	if n, err := core.Of(q).RDB.XLen(t.Context(), core.Of(q).Keys.Stream).Result(); err != nil || n != 1 {
		t.Fatalf("XLEN = %d, %v; want 1", n, err)
	}
	if v, err := core.Of(q).RDB.Get(t.Context(), core.Of(q).Keys.Part(writebehind.VersionKeyPart)).Int64(); err != nil || v != 1 {
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
	if v, err := core.Of(q).RDB.Get(ctx, core.Of(q).Keys.Part(writebehind.VersionKeyPart)).Int64(); err != nil || v != 3 {
		t.Fatalf("version counter = %d, %v; want 3 (refused changes take no version)", v, err)
	}
	if n, _ := core.Of(q).RDB.XLen(ctx, core.Of(q).Keys.Stream).Result(); n != 3 {
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
	entries, err := core.Of(q).RDB.XRange(ctx, core.Of(q).Keys.Stream, "-", "+").Result()
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

// lastChanges decodes the stream of q and returns the newest change of each
// key, and the number of entries.
func lastChanges(t *testing.T, q *streamq.Queue) (map[string]writebehind.Change, int) {
	t.Helper()
	entries, err := core.Of(q).RDB.XRange(t.Context(), core.Of(q).Keys.Stream, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	last := make(map[string]writebehind.Change)
	for _, e := range entries {
		ch, err := writebehind.FromMessage(entryMessage(t, e))
		if err != nil {
			t.Fatalf("entry %s: %v", e.ID, err)
		}
		if ch.Version <= last[ch.Key].Version {
			t.Fatalf("entry %s: version %d of %q after version %d: stream order and versions disagree", e.ID, ch.Version, ch.Key, last[ch.Key].Version)
		}
		last[ch.Key] = ch
	}
	return last, len(entries)
}

func TestWriter_SetFields(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	q := newQueue(t, nil)
	w := newWriter(t, q, nil)
	rdb := core.Of(q).RDB

	ada := map[string]string{"name": "Ada", "born": "1815", "note": `<"math">`}
	v1, err := w.SetFields(ctx, "user:1", ada)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := rdb.HGetAll(ctx, w.CacheKey("user:1")).Result(); err != nil || !maps.Equal(got, ada) {
		t.Fatalf("HGETALL = %v, %v; want %v", got, err, ada)
	}
	if got, found, err := w.GetFields(ctx, "user:1"); err != nil || !found || !maps.Equal(got, ada) {
		t.Fatalf("GetFields = %v, %v, %v; want %v", got, found, err, ada)
	}

	// SetFields replaces the whole hash: "note" and "born" are gone.
	lovelace := map[string]string{"name": "Ada Lovelace"}
	v2, err := w.SetFields(ctx, "user:1", lovelace)
	if err != nil {
		t.Fatal(err)
	}
	if got, _, err := w.GetFields(ctx, "user:1"); err != nil || !maps.Equal(got, lovelace) {
		t.Fatalf("GetFields after a second SetFields = %v, %v; want exactly %v", got, err, lovelace)
	}

	// A key switches from hash to string and back; the type follows.
	v3, err := w.Set(ctx, "user:1", []byte("plain"))
	if err != nil {
		t.Fatal(err)
	}
	if typ, _ := rdb.Type(ctx, w.CacheKey("user:1")).Result(); typ != "string" {
		t.Fatalf("TYPE after Set = %q, want string", typ)
	}
	if _, _, err := w.GetFields(ctx, "user:1"); err == nil || !strings.Contains(err.Error(), "read it with Get") {
		t.Fatalf("GetFields of a string = %v, want an error that says to use Get", err)
	}
	v4, err := w.SetFields(ctx, "user:1", ada)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.Get(ctx, "user:1"); err == nil || !strings.Contains(err.Error(), "read it with GetFields") {
		t.Fatalf("Get of a hash = %v, want an error that says to use GetFields", err)
	}
	v5, err := w.Delete(ctx, "user:1")
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := rdb.Exists(ctx, w.CacheKey("user:1")).Result(); n != 0 {
		t.Fatal("the hash is still cached after Delete")
	}
	if _, found, err := w.GetFields(ctx, "user:1"); err != nil || found {
		t.Fatalf("GetFields after Delete: found %v, err %v; want a miss", found, err)
	}
	if !(0 < v1 && v1 < v2 && v2 < v3 && v3 < v4 && v4 < v5) {
		t.Fatalf("versions %d %d %d %d %d: want strictly increasing", v1, v2, v3, v4, v5)
	}

	entries, err := rdb.XRange(ctx, core.Of(q).Keys.Stream, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	want := []writebehind.Change{
		{Key: "user:1", Value: []byte(`{"born":"1815","name":"Ada","note":"<\"math\">"}`), Hash: true, Version: v1},
		{Key: "user:1", Value: []byte(`{"name":"Ada Lovelace"}`), Hash: true, Version: v2},
		{Key: "user:1", Value: []byte("plain"), Version: v3},
		{Key: "user:1", Value: []byte(`{"born":"1815","name":"Ada","note":"<\"math\">"}`), Hash: true, Version: v4},
		{Key: "user:1", Deleted: true, Version: v5},
	}
	if len(entries) != len(want) {
		t.Fatalf("stream holds %d entries, want %d", len(entries), len(want))
	}
	for i, e := range entries {
		m := entryMessage(t, e)
		wantOp := map[bool]string{true: writebehind.OpSetFields, false: writebehind.OpSet}[want[i].Hash]
		if want[i].Deleted {
			wantOp = writebehind.OpDelete
		}
		if m.Headers[writebehind.HeaderOp] != wantOp {
			t.Errorf("entry %d: header %s = %q, want %q", i, writebehind.HeaderOp, m.Headers[writebehind.HeaderOp], wantOp)
		}
		got, err := writebehind.FromMessage(m)
		if err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		if got.Key != want[i].Key || string(got.Value) != string(want[i].Value) || got.Hash != want[i].Hash ||
			got.Deleted != want[i].Deleted || got.Version != want[i].Version {
			t.Errorf("entry %d = %+v (value %s), want %+v (value %s)", i, got, got.Value, want[i], want[i].Value)
		}
	}
}

// TestWriter_SetFields_TTL checks that a hash gets the writer's TTL, that
// every SetFields sets it again, and that the counter outlives the entry.
func TestWriter_SetFields_TTL(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	q := newQueue(t, nil)
	rdb := core.Of(q).RDB
	long := newWriter(t, q, &writebehind.WriterConfig{TTL: time.Hour})
	short := newWriter(t, q, &writebehind.WriterConfig{TTL: 20 * time.Millisecond})
	never := newWriter(t, q, nil)

	if _, err := long.SetFields(ctx, "k", map[string]string{"a": "1"}); err != nil {
		t.Fatal(err)
	}
	if ttl, err := rdb.PTTL(ctx, long.CacheKey("k")).Result(); err != nil || ttl <= 0 || ttl > time.Hour {
		t.Fatalf("PTTL of a hash = %v, %v; want at most the configured hour", ttl, err)
	}
	// Without a TTL, SetFields replaces the entry, and its expiry with it.
	if _, err := never.SetFields(ctx, "k", map[string]string{"a": "2"}); err != nil {
		t.Fatal(err)
	}
	if ttl, err := rdb.PTTL(ctx, never.CacheKey("k")).Result(); err != nil || ttl != -1 {
		t.Fatalf("PTTL after SetFields without TTL = %v, %v; want -1 (no expiry)", ttl, err)
	}
	last, err := short.SetFields(ctx, "k", map[string]string{"a": "3"})
	if err != nil {
		t.Fatal(err)
	}
	redistest.WaitFor(t, 5*time.Second, "the cached hash expired", func() bool {
		_, found, err := never.GetFields(ctx, "k")
		return err == nil && !found
	})
	v, err := never.SetFields(ctx, "k", map[string]string{"a": "4"})
	if err != nil {
		t.Fatal(err)
	}
	if v != last+1 {
		t.Fatalf("version after expiry = %d, want %d", v, last+1)
	}
}

// TestWriter_SetFields_Atomic checks that cache and stream agree: concurrent
// writers switching keys between hashes, strings and deletions leave every
// cache entry equal to the newest change of its key in the stream; and a
// SetFields refused at the queue's cap changes neither.
func TestWriter_SetFields_Atomic(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	q := newQueue(t, nil)
	w := newWriter(t, q, nil)
	expect := hashWorkload(t, w, 2000, 50, 8, 15, 60)

	last, n := lastChanges(t, q)
	if n != 2000 {
		t.Fatalf("stream holds %d entries, want 2000", n)
	}
	if len(last) != len(expect) {
		t.Fatalf("stream has changes of %d keys, want %d", len(last), len(expect))
	}
	for k, e := range expect {
		ch := last[k]
		if ch.Version != e.version || ch.Deleted != e.deleted || ch.Hash != e.hash || !bytes.Equal(ch.Value, e.value) {
			t.Errorf("key %q: newest change in the stream %+v, want %+v", k, ch, e)
		}
		var (
			cached []byte
			found  bool
			err    error
		)
		if e.hash {
			var fields map[string]string
			fields, found, err = w.GetFields(ctx, k)
			if found {
				cached = encodeFields(t, fields)
			}
		} else {
			cached, found, err = w.Get(ctx, k)
		}
		if err != nil {
			t.Fatalf("read %q: %v", k, err)
		}
		if found == e.deleted || !bytes.Equal(cached, e.value) {
			t.Errorf("key %q: cache %q (found %v), want the newest change in the stream %+v", k, cached, found, ch)
		}
	}

	// At the cap nothing changes: not the cache, not the stream, not the counter.
	full := newQueue(t, &streamq.QueueConfig{MaxLen: 1})
	fw := newWriter(t, full, nil)
	old := map[string]string{"v": "old"}
	if _, err := fw.SetFields(ctx, "k", old); err != nil {
		t.Fatal(err)
	}
	if _, err := fw.SetFields(ctx, "k", map[string]string{"v": "new", "extra": "x"}); !errors.Is(err, streamq.ErrQueueFull) {
		t.Fatalf("SetFields on a full queue = %v, want ErrQueueFull", err)
	}
	if got, _, err := fw.GetFields(ctx, "k"); err != nil || !maps.Equal(got, old) {
		t.Fatalf("GetFields after a refused SetFields = %v, %v; want %v", got, err, old)
	}
	if n, _ := core.Of(full).RDB.XLen(ctx, core.Of(full).Keys.Stream).Result(); n != 1 {
		t.Fatalf("XLEN = %d, want 1", n)
	}
	if v, _ := core.Of(full).RDB.Get(ctx, core.Of(full).Keys.Part(writebehind.VersionKeyPart)).Int64(); v != 1 {
		t.Fatalf("version counter = %d, want 1", v)
	}
}

// TestWriter_SetFields_ManyFields writes a hash with more fields than one
// HSET call of the script takes.
func TestWriter_SetFields_ManyFields(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	q := newQueue(t, &streamq.QueueConfig{})
	w := newWriter(t, q, &writebehind.WriterConfig{TTL: time.Hour})
	fields := make(map[string]string, 5000)
	for i := range 5000 {
		fields[fmt.Sprintf("field-%05d", i)] = strconv.Itoa(i * i)
	}
	if _, err := w.SetFields(ctx, "big", fields); err != nil {
		t.Fatal(err)
	}
	got, found, err := w.GetFields(ctx, "big")
	if err != nil || !found || !maps.Equal(got, fields) {
		t.Fatalf("GetFields: %d fields, found %v, err %v; want the 5000 fields", len(got), found, err)
	}
	if ttl, _ := core.Of(q).RDB.PTTL(ctx, w.CacheKey("big")).Result(); ttl <= 0 {
		t.Fatalf("PTTL = %v, want the TTL", ttl)
	}
	last, _ := lastChanges(t, q)
	if !bytes.Equal(last["big"].Value, encodeFields(t, fields)) {
		t.Fatal("the change in the stream does not hold the 5000 fields")
	}
}

func TestWriter_SetFields_Limits(t *testing.T) {
	t.Parallel()
	q := newQueue(t, nil)
	w := newWriter(t, q, nil)
	// Each field encodes to about 1 KiB: "fNNNNN":"xxx...",
	huge := make(map[string]string)
	for i := range writebehind.MaxValueBytes/1024 + 1 {
		huge[fmt.Sprintf("f%06d", i)] = strings.Repeat("x", 1024)
	}
	for _, tc := range []struct {
		name   string
		key    string
		fields map[string]string
		reason string // part of the error message
	}{
		{name: "nil fields", key: "k", fields: nil, reason: "use Delete"},
		{name: "no fields", key: "k", fields: map[string]string{}, reason: "no fields"},
		{name: "field name not UTF-8", key: "k", fields: map[string]string{"a\xff": "v"}, reason: "field name"},
		{name: "field value not UTF-8", key: "k", fields: map[string]string{"a": "v\xff"}, reason: "base64"},
		{name: "too large", key: "k", fields: huge, reason: "MaxValueBytes"},
		{name: "empty key", key: "", fields: map[string]string{"a": "v"}, reason: "key is empty"},
		{name: "key too long", key: strings.Repeat("k", writebehind.MaxKeyBytes+1), fields: map[string]string{"a": "v"}, reason: "MaxKeyBytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := w.SetFields(t.Context(), tc.key, tc.fields)
			var ce *writebehind.ChangeError
			if !errors.As(err, &ce) || !errors.Is(err, writebehind.ErrInvalidChange) || !strings.Contains(err.Error(), tc.reason) {
				t.Fatalf("SetFields error = %v, want a *ChangeError mentioning %q", err, tc.reason)
			}
			if len(err.Error()) > 400 {
				t.Fatalf("error message is %d bytes long", len(err.Error()))
			}
			t.Log(err)
		})
	}
	// Nothing reached Redis.
	if n, err := core.Of(q).RDB.XLen(t.Context(), core.Of(q).Keys.Stream).Result(); err != nil || n != 0 {
		t.Fatalf("XLEN = %d, %v; want 0", n, err)
	}
	if n, err := core.Of(q).RDB.Exists(t.Context(), core.Of(q).Keys.Part(writebehind.VersionKeyPart), w.CacheKey("k")).Result(); err != nil || n != 0 {
		t.Fatalf("EXISTS counter, cache = %d, %v; want neither", n, err)
	}
	if _, _, err := w.GetFields(t.Context(), strings.Repeat("k", writebehind.MaxKeyBytes+1)); !errors.Is(err, writebehind.ErrInvalidChange) {
		t.Fatalf("GetFields with a key too long = %v, want ErrInvalidChange", err)
	}
}

func TestEncodeFields(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		fields map[string]string
		want   string
	}{
		{name: "nil", fields: nil, want: `{}`},
		{name: "sorted", fields: map[string]string{"b": "2", "a": "1", "B": "3", "": "empty name"}, want: `{"":"empty name","B":"3","a":"1","b":"2"}`},
		{name: "no HTML escaping", fields: map[string]string{"html": "<a href=\"x\">&</a>"}, want: `{"html":"<a href=\"x\">&</a>"}`},
		{name: "control characters", fields: map[string]string{"c": "tab\tnl\nnul\x00"}, want: `{"c":"tab\tnl\nnul\u0000"}`},
		{name: "non-ASCII", fields: map[string]string{"größe": "世界 🚀"}, want: `{"größe":"世界 🚀"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := writebehind.EncodeFields(tc.fields)
			if err != nil || string(got) != tc.want {
				t.Fatalf("EncodeFields = %s, %v; want %s", got, err, tc.want)
			}
			back, err := writebehind.DecodeFields(got)
			if err != nil || len(back) != len(tc.fields) || (len(back) > 0 && !maps.Equal(back, tc.fields)) {
				t.Fatalf("DecodeFields(%s) = %v, %v; want %v", got, back, err, tc.fields)
			}
		})
	}
	if _, err := writebehind.EncodeFields(map[string]string{"k": "\xff"}); !errors.Is(err, writebehind.ErrInvalidChange) {
		t.Fatalf("EncodeFields of invalid UTF-8 = %v, want ErrInvalidChange", err)
	}
}

func TestDecodeFields(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		value string
		ok    bool
	}{
		{name: "canonical", value: `{"a":"1"}`, ok: true},
		{name: "not canonical", value: ` { "b" : "2", "a" : "1" } `, ok: true},
		{name: "empty object", value: `{}`, ok: true},
		{name: "empty", value: ``},
		{name: "null", value: `null`},
		{name: "array", value: `["a"]`},
		{name: "string", value: `"a"`},
		{name: "number value", value: `{"a":1}`},
		{name: "nested", value: `{"a":{"b":"c"}}`},
		{name: "broken", value: `{"a":"1"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := writebehind.DecodeFields([]byte(tc.value))
			if tc.ok != (err == nil) {
				t.Fatalf("DecodeFields(%s) error = %v, want ok %v", tc.value, err, tc.ok)
			}
			if err != nil && !errors.Is(err, writebehind.ErrInvalidChange) {
				t.Fatalf("error %v does not wrap ErrInvalidChange", err)
			}
		})
	}
}

// seedCounter sets the version counter of q, as an operator would.
func seedCounter(t *testing.T, q *streamq.Queue, value string) {
	t.Helper()
	if err := core.Of(q).RDB.Set(t.Context(), core.Of(q).Keys.Part(writebehind.VersionKeyPart), value, 0).Err(); err != nil {
		t.Fatal(err)
	}
}

func TestWriter_Version_Large(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		seed int64 // the counter before the write
	}{
		{"1e14", 1e14 - 1},              // Lua formats 1e14 as "1e+14"
		{"2^53", 1<<53 - 1},             // the largest integer a Lua number holds exactly
		{"2^53+1", 1 << 53},             // a Lua number would round it to 2^53
		{"2^62+1", 1 << 62},             //
		{"MaxInt64", math.MaxInt64 - 1}, // the last version
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			q := newQueue(t, nil)
			w := newWriter(t, q, nil)
			seedCounter(t, q, strconv.FormatInt(tc.seed, 10))
			want := tc.seed + 1
			before := time.Now().UnixMicro()
			v, err := w.Set(ctx, "k", []byte("x"))
			if err != nil || v != want {
				t.Fatalf("Set = %d, %v; want version %d", v, err, want)
			}
			entries, err := core.Of(q).RDB.XRange(ctx, core.Of(q).Keys.Stream, "-", "+").Result()
			if err != nil || len(entries) != 1 {
				t.Fatalf("stream: %d entries, %v; want 1", len(entries), err)
			}
			m := entryMessage(t, entries[0])
			if got := m.Headers[writebehind.HeaderVersion]; got != strconv.FormatInt(want, 10) {
				t.Fatalf("header %s = %q, want %d written exactly", writebehind.HeaderVersion, got, want)
			}
			ch, err := writebehind.FromMessage(m)
			if err != nil || ch.Version != want {
				t.Fatalf("FromMessage = %+v, %v; want version %d", ch, err, want)
			}
			// The test's Redis runs on this machine, on the same clock.
			if ch.Issued < before-time.Minute.Microseconds() || ch.Issued > time.Now().UnixMicro()+time.Minute.Microseconds() {
				t.Fatalf("issued %d, want about %d (the Redis clock in microseconds)", ch.Issued, before)
			}
		})
	}

	t.Run("beyond MaxInt64", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		q := newQueue(t, nil)
		w := newWriter(t, q, nil)
		if _, err := w.Set(ctx, "k", []byte("before")); err != nil {
			t.Fatal(err)
		}
		seedCounter(t, q, strconv.FormatInt(math.MaxInt64, 10))
		_, err := w.Set(ctx, "k", []byte("after"))
		if err == nil || !strings.Contains(err.Error(), "overflow") || !strings.Contains(err.Error(), "versions range from 1 to 9223372036854775807") {
			t.Fatalf("Set with the counter at MaxInt64 = %v, want an overflow error that names the range", err)
		}
		t.Log(err)
		if n, _ := core.Of(q).RDB.XLen(ctx, core.Of(q).Keys.Stream).Result(); n != 1 {
			t.Fatalf("stream holds %d entries, want only the first change", n)
		}
		if v, _, _ := w.Get(ctx, "k"); string(v) != "before" {
			t.Fatalf("cache holds %q, want the value before the failed Set", v)
		}
	})

	t.Run("negative counter", func(t *testing.T) {
		t.Parallel()
		q := newQueue(t, nil)
		w := newWriter(t, q, nil)
		seedCounter(t, q, "-5")
		if _, err := w.Delete(t.Context(), "k"); err == nil || !strings.Contains(err.Error(), "not positive") {
			t.Fatalf("Delete with a negative counter = %v, want an error", err)
		}
		if n, _ := core.Of(q).RDB.XLen(t.Context(), core.Of(q).Keys.Stream).Result(); n != 0 {
			t.Fatalf("stream holds %d entries, want none", n)
		}
	})
}

func TestWriter_EnsureVersionAtLeast(t *testing.T) {
	t.Parallel()
	const p53 = int64(1) << 53
	for _, tc := range []struct {
		name     string
		counter  string // "" means missing
		floor    int64
		previous int64
		after    string // the counter afterwards
	}{
		{name: "missing", floor: 10, previous: 0, after: "10"},
		{name: "lower", counter: "7", floor: 10, previous: 7, after: "10"},
		{name: "higher", counter: "12", floor: 10, previous: 12, after: "12"},
		{name: "equal", counter: "10", floor: 10, previous: 10, after: "10"},
		{name: "read only", counter: "12", floor: 0, previous: 12, after: "12"},
		{name: "read a missing counter", floor: 0, previous: 0, after: "0"},
		{name: "negative", counter: "-7", floor: 3, previous: -7, after: "3"},
		{name: "more digits", counter: "999", floor: 1000, previous: 999, after: "1000"},
		// Equal as Lua numbers (doubles), different as integers.
		{name: "above 2^53, raised", counter: strconv.FormatInt(p53, 10), floor: p53 + 1, previous: p53, after: strconv.FormatInt(p53+1, 10)},
		{name: "above 2^53, kept", counter: strconv.FormatInt(p53+1, 10), floor: p53, previous: p53 + 1, after: strconv.FormatInt(p53+1, 10)},
		{name: "MaxInt64", counter: "5", floor: math.MaxInt64, previous: 5, after: strconv.FormatInt(math.MaxInt64, 10)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			q := newQueue(t, nil)
			w := newWriter(t, q, nil)
			if tc.counter != "" {
				seedCounter(t, q, tc.counter)
			}
			previous, err := w.EnsureVersionAtLeast(ctx, tc.floor)
			if err != nil || previous != tc.previous {
				t.Fatalf("EnsureVersionAtLeast(%d) = %d, %v; want %d", tc.floor, previous, err, tc.previous)
			}
			if got, err := core.Of(q).RDB.Get(ctx, core.Of(q).Keys.Part(writebehind.VersionKeyPart)).Result(); err != nil || got != tc.after {
				t.Fatalf("counter = %q, %v; want %q", got, err, tc.after)
			}
			if tc.after == strconv.FormatInt(math.MaxInt64, 10) {
				return
			}
			after, _ := strconv.ParseInt(tc.after, 10, 64)
			if v, err := w.Set(ctx, "k", []byte("x")); err != nil || v != after+1 {
				t.Fatalf("Set after EnsureVersionAtLeast = %d, %v; want version %d", v, err, after+1)
			}
		})
	}

	t.Run("errors", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		q := newQueue(t, nil)
		w := newWriter(t, q, nil)
		if _, err := w.EnsureVersionAtLeast(ctx, -1); err == nil {
			t.Fatal("EnsureVersionAtLeast(-1) succeeded")
		}
		seedCounter(t, q, "not a number")
		if _, err := w.EnsureVersionAtLeast(ctx, 5); err == nil || !strings.Contains(err.Error(), "not an integer") {
			t.Fatalf("EnsureVersionAtLeast of a non-integer counter = %v, want an error", err)
		}
		if got, _ := core.Of(q).RDB.Get(ctx, core.Of(q).Keys.Part(writebehind.VersionKeyPart)).Result(); got != "not a number" {
			t.Fatalf("counter = %q, want it left as it was", got)
		}
	})
}

func TestWriter_Resync(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	q := newQueue(t, nil)
	w := newWriter(t, q, &writebehind.WriterConfig{TTL: time.Hour})
	if _, err := w.Set(ctx, "s", []byte("string value")); err != nil {
		t.Fatal(err)
	}
	fields := map[string]string{"name": "Ada", "bio": "<math>"}
	if _, err := w.SetFields(ctx, "h", fields); err != nil {
		t.Fatal(err)
	}
	last, err := w.Delete(ctx, "gone")
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		key   string
		op    string
		value []byte
	}{
		{"s", writebehind.OpSet, []byte("string value")},
		{"h", writebehind.OpSetFields, encodeFields(t, fields)},
	} {
		v, found, err := w.Resync(ctx, tc.key)
		if err != nil || !found || v != last+1 {
			t.Fatalf("Resync(%q) = %d, %v, %v; want version %d", tc.key, v, found, err, last+1)
		}
		last = v
		entries, err := core.Of(q).RDB.XRevRangeN(ctx, core.Of(q).Keys.Stream, "+", "-", 1).Result()
		if err != nil || len(entries) != 1 {
			t.Fatal(entries, err)
		}
		m := entryMessage(t, entries[0])
		ch, err := writebehind.FromMessage(m)
		if err != nil || ch.Key != tc.key || ch.Version != v || !bytes.Equal(ch.Value, tc.value) || m.Headers[writebehind.HeaderOp] != tc.op {
			t.Fatalf("queued change %+v (op %s), %v; want %q = %q at version %d (op %s)", ch, m.Headers[writebehind.HeaderOp], err, tc.key, tc.value, v, tc.op)
		}
		if ttl, err := core.Of(q).RDB.PTTL(ctx, w.CacheKey(tc.key)).Result(); err != nil || ttl <= 0 {
			t.Fatalf("PTTL of %q after Resync = %v, %v; want the writer's TTL", tc.key, ttl, err)
		}
	}
	if got, _, err := w.GetFields(ctx, "h"); err != nil || !maps.Equal(got, fields) {
		t.Fatalf("cache of h = %v, %v; want it unchanged", got, err)
	}

	n, _ := core.Of(q).RDB.XLen(ctx, core.Of(q).Keys.Stream).Result()
	if v, found, err := w.Resync(ctx, "gone"); err != nil || found || v != 0 {
		t.Fatalf("Resync of a key that is not cached = %d, %v, %v; want not found", v, found, err)
	}
	if err := core.Of(q).RDB.RPush(ctx, w.CacheKey("list"), "x").Err(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.Resync(ctx, "list"); err == nil || !strings.Contains(err.Error(), "holds a list") {
		t.Fatalf("Resync of a list = %v, want an error", err)
	}
	if m, _ := core.Of(q).RDB.XLen(ctx, core.Of(q).Keys.Stream).Result(); m != n {
		t.Fatalf("stream grew from %d to %d entries, want nothing queued", n, m)
	}
}

// TestWriter_Resync_Concurrent resyncs a key while another goroutine keeps
// setting it: a resync may only queue the value the key had right before it,
// never one that a newer Set replaced.
func TestWriter_Resync_Concurrent(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	q := newQueue(t, nil)
	w := newWriter(t, q, nil)
	if _, err := w.Set(ctx, "k", []byte("v0")); err != nil {
		t.Fatal(err)
	}
	const sets = 300
	done := make(chan error, 1)
	go func() {
		for i := 1; i <= sets; i++ {
			if _, err := w.Set(ctx, "k", []byte("v"+strconv.Itoa(i))); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	queued, superseded := 0, 0 // resyncs that queued the key, or found it queued by a Set
	deadline := time.Now().Add(time.Minute)
	for finished := false; !finished; {
		if time.Now().After(deadline) {
			t.Fatalf("the %d sets did not finish within a minute", sets)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			finished = true
		default:
		}
		v, found, err := w.Resync(ctx, "k")
		if err != nil || !found {
			t.Fatalf("Resync = %v, %v", found, err)
		}
		if v > 0 {
			queued++
		} else {
			superseded++
		}
	}
	entries, err := core.Of(q).RDB.XRange(ctx, core.Of(q).Keys.Stream, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1+sets+queued {
		t.Fatalf("stream holds %d entries, want %d", len(entries), 1+sets+queued)
	}
	var prev []byte
	next := 1
	for _, e := range entries {
		ch, err := writebehind.FromMessage(entryMessage(t, e))
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case prev == nil || bytes.Equal(ch.Value, prev): // the first, or a resync
		case string(ch.Value) == "v"+strconv.Itoa(next):
			next++
		default:
			t.Fatalf("entry %s queues %q after %q: a resync queued a stale value", e.ID, ch.Value, prev)
		}
		prev = ch.Value
	}
	t.Logf("%d resyncs queued the key and %d found it queued by a Set meanwhile, interleaved with %d sets", queued, superseded, sets)
}

// TestWriter_Registers records the queue in the write-behind registry of its
// key prefix on the first write (read by the inspect package).
func TestWriter_Registers(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	q := newQueue(t, nil)
	cq := core.Of(q)
	t.Cleanup(func() {
		cq.RDB.HDel(context.Background(), cq.Prefix+":writebehind", q.Name())
		cq.RDB.HDel(context.Background(), cq.Prefix+":queues", q.Name())
	})
	w := newWriter(t, q, nil)
	if n, _ := cq.RDB.HExists(ctx, cq.Prefix+":writebehind", q.Name()).Result(); n {
		t.Fatal("registered before any write")
	}
	if _, err := w.Set(ctx, "user:1", []byte("Ada")); err != nil {
		t.Fatal(err)
	}
	if v, err := cq.RDB.HGet(ctx, cq.Prefix+":writebehind", q.Name()).Result(); err != nil || v != "1" {
		t.Fatalf("write-behind registry: %q, %v", v, err)
	}
	if v, _ := cq.RDB.HGet(ctx, cq.Prefix+":queues", q.Name()).Result(); v != "stream" {
		t.Fatalf("queue registry: %q", v)
	}
}
