package rdb

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/streamq/streamq/internal/wire"
)

// change returns the params of a write-behind change of key.
func (e *env) change(op, key, value string, hash []any) *WriteParams {
	j := wire.Job{Payload: []byte(value), Headers: map[string]string{"wb-key": key, "wb-op": op}, EnqMillis: 1}
	return &WriteParams{CacheKey: e.k.Part("cache:" + key), VersionKey: e.k.Part("wb:version"), Op: op, TTL: time.Minute, Fields: j.Args(), Hash: hash}
}

// TestQueue_Write writes the cache and the stream in one step, with a new
// version each; a call sent again answers its version and changes nothing.
func TestQueue_Write(t *testing.T) {
	t.Parallel()
	e := setup(t, Config{})
	p := e.change("set", "k", "v1", nil)
	p.Memo = e.q.NewMemo()
	v, err := e.q.Write(e.ctx, p)
	if err != nil || v != "1" {
		t.Fatalf("Write: %q, %v", v, err)
	}
	if got, _ := e.c.Get(e.ctx, p.CacheKey).Result(); got != "v1" {
		t.Errorf("cache holds %q", got)
	}
	es, _ := e.c.XRange(e.ctx, e.k.Stream, "-", "+").Result()
	var h map[string]string
	if len(es) != 1 || json.Unmarshal([]byte(es[0].Values["headers"].(string)), &h) != nil || h["wb-version"] != "1" || h["wb-issued"] == "" {
		t.Fatalf("stream %v", es)
	}
	before := e.snapshot()
	if again, err := e.q.Write(e.ctx, p); again != "1" || err != nil {
		t.Errorf("re-sent Write: %q, %v; want version 1", again, err)
	}
	e.unchanged("a re-sent write", before)

	// A hash of more than 500 pairs goes in several HSETs (Lua's unpack
	// is bounded), in one call.
	var pairs []any
	for i := range 1200 {
		pairs = append(pairs, fmt.Sprint("f", i), "x")
	}
	hp := e.change("hset", "h", "{}", pairs)
	if v, err := e.q.Write(e.ctx, hp); err != nil || v != "2" {
		t.Fatalf("Write hset: %q, %v", v, err)
	}
	if n := e.card(hp.CacheKey); n != 1200 {
		t.Errorf("cached hash has %d fields, want 1200", n)
	}
	if v, err := e.q.Write(e.ctx, e.change("del", "k", "", nil)); err != nil || v != "3" {
		t.Fatalf("Write del: %q, %v", v, err)
	}
	if n, _ := e.c.Exists(e.ctx, p.CacheKey).Result(); n != 0 {
		t.Error("the deleted key is still cached")
	}
}

func TestQueue_Write_Refusals(t *testing.T) {
	t.Parallel()
	e := setup(t, Config{MaxLen: 1})
	e.add("a")
	if _, err := e.q.Write(e.ctx, e.change("set", "k", "v", nil)); !errors.Is(err, ErrQueueFull) {
		t.Errorf("Write over the cap: %v, want ErrQueueFull", err)
	}
	e2 := setup(t, Config{})
	e2.c.Set(e2.ctx, e2.k.Part("wb:version"), "x", 0)
	_, err := e2.q.Write(e2.ctx, e2.change("set", "k", "v", nil))
	if reason, ok := IsVersionCounter(err); !ok || reason == "" {
		t.Errorf("Write with a broken counter: %v, want VERSIONCOUNTER", err)
	}
	if n, _ := e2.c.Exists(e2.ctx, e2.k.Part("cache:k"), e2.k.Stream).Result(); n != 0 {
		t.Error("a refused write changed the cache or the stream")
	}
}

// TestQueue_WriteInTx queues the write in MULTI.
func TestQueue_WriteInTx(t *testing.T) {
	t.Parallel()
	e := setup(t, Config{})
	p := e.change("set", "k", "v", nil)
	pipe := e.c.TxPipeline()
	cmd := e.q.WriteInTx(e.ctx, pipe, p)
	if _, err := pipe.Exec(e.ctx); err != nil {
		t.Fatal(err)
	}
	if v, err := cmd.Text(); v != "1" || err != nil {
		t.Errorf("WriteInTx: %q, %v", v, err)
	}
}

// TestQueue_EnsureVersion raises the counter, never lowers it, compares as
// decimal strings beyond 2^53, and a call sent again changes nothing.
func TestQueue_EnsureVersion(t *testing.T) {
	t.Parallel()
	e := setup(t, Config{})
	key := e.k.Part("wb:version")
	for _, tc := range []struct {
		floor, before int64
		after         string
	}{
		{0, 0, "0"},
		{10, 0, "10"},
		{10, 10, "10"}, // sent again
		{5, 10, "10"},
		{1<<53 + 1, 10, "9007199254740993"},
	} {
		before, err := e.q.EnsureVersion(e.ctx, EnsureVersionParams{Key: key, Floor: tc.floor})
		after, _ := e.c.Get(e.ctx, key).Result()
		if err != nil || before != tc.before || after != tc.after {
			t.Errorf("EnsureVersion(%d): before %d (%v), counter %s; want %d and %s", tc.floor, before, err, after, tc.before, tc.after)
		}
	}
	e.c.Set(e.ctx, key, "x", 0)
	if _, err := e.q.EnsureVersion(e.ctx, EnsureVersionParams{Key: key, Floor: 1}); err == nil || !strings.Contains(err.Error(), "integer") {
		t.Errorf("EnsureVersion of a broken counter: %v", err)
	}
}
