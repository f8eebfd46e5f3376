package streamq

import (
	"errors"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq/internal/core"
)

// offlineClient never connects: these tests check validation and key layout
// without a server.
func offlineClient(t *testing.T) redis.UniversalClient {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestNewQueue_Validation(t *testing.T) {
	t.Parallel()
	rdb := offlineClient(t)
	tests := []struct {
		name      string
		rdb       redis.UniversalClient
		queue     string
		cfg       *QueueConfig
		wantField string
	}{
		{"nil client", nil, "q", nil, "client"},
		{"empty name", rdb, "", nil, "queue name"},
		{"brace in name", rdb, "a{b}", nil, "queue name"},
		{"space in name", rdb, "a b", nil, "queue name"},
		{"newline in name", rdb, "a\nb", nil, "queue name"},
		{"too long", rdb, strings.Repeat("x", MaxNameLen+1), nil, "queue name"},
		{"bad group", rdb, "q", &QueueConfig{Group: "g }"}, "QueueConfig.Group"},
		{"bad prefix", rdb, "q", &QueueConfig{KeyPrefix: "{p}"}, "QueueConfig.KeyPrefix"},
		{"negative cap", rdb, "q", &QueueConfig{MaxLen: -2}, "QueueConfig.MaxLen"},
		{"negative dead cap", rdb, "q", &QueueConfig{DeadLetterMaxLen: -1}, "QueueConfig.DeadLetterMaxLen"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := NewQueue(tt.rdb, tt.queue, tt.cfg)
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("err = %v, want *ConfigError", err)
			}
			if ce.Field != tt.wantField {
				t.Errorf("field = %q, want %q (err %v)", ce.Field, tt.wantField, err)
			}
			if !strings.Contains(err.Error(), "use") && !strings.Contains(err.Error(), "pass") {
				t.Errorf("error %q does not say how to fix it", err)
			}
		})
	}
}

func TestNewQueue_DefaultsAndKeys(t *testing.T) {
	t.Parallel()
	cfg := &QueueConfig{}
	q, err := NewQueue(offlineClient(t), "orders", cfg)
	if err != nil {
		t.Fatal(err)
	}
	if *cfg != (QueueConfig{}) {
		t.Errorf("NewQueue changed the caller's config: %+v", cfg)
	}
	cq := core.Of(q)
	if q.Group() != DefaultGroup || cq.MaxLen != DefaultMaxLen || q.Name() != "orders" || cq.Group != DefaultGroup || cq.Name != "orders" {
		t.Errorf("defaults: group %q, maxlen %d", q.Group(), cq.MaxLen)
	}
	for _, tc := range []struct{ got, want string }{
		{cq.Keys.Stream, "streamq:{orders}:stream"},
		{cq.Keys.Dead, "streamq:{orders}:dead"},
		{cq.Keys.Delayed, "streamq:{orders}:delayed"},
		{cq.Keys.DelayedJobs, "streamq:{orders}:delayed:jobs"},
		{cq.Keys.Unique("a:b"), "streamq:{orders}:unique:a:b"},
		{cq.Keys.Priority().Leases, "streamq:{orders}:leases"},
		{cq.Keys.Priority().Ready, "streamq:{orders}:priority"},
	} {
		if tc.got != tc.want {
			t.Errorf("key = %q, want %q", tc.got, tc.want)
		}
	}
	q2, err := NewQueue(offlineClient(t), "o", &QueueConfig{MaxLen: -1, KeyPrefix: "app", Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	if c2 := core.Of(q2); c2.MaxLen != -1 || c2.Keys.Stream != "app:{o}:stream" || q2.Group() != "g" {
		t.Errorf("custom config not applied: %d %q", c2.MaxLen, c2.Keys.Stream)
	}
}

// TestMaxNameLen: the name rule of internal/core enforces the bound the
// root package documents.
func TestMaxNameLen(t *testing.T) {
	t.Parallel()
	if MaxNameLen != core.MaxNameLen {
		t.Errorf("MaxNameLen is %d, core.MaxNameLen %d: keep them equal", MaxNameLen, core.MaxNameLen)
	}
}
