package streamq

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/streamq/streamq/internal/core"
)

func TestNewQueue_Limits(t *testing.T) {
	t.Parallel()
	q, err := NewQueue(offlineClient(t), "q", nil)
	if err != nil {
		t.Fatal(err)
	}
	if cq := core.Of(q); cq.MaxPayloadBytes != DefaultMaxPayloadBytes || cq.MaxHeaderBytes != DefaultMaxHeaderBytes {
		t.Errorf("default limits %d, %d", cq.MaxPayloadBytes, cq.MaxHeaderBytes)
	}
	q, err = NewQueue(offlineClient(t), "q", &QueueConfig{MaxPayloadBytes: -1, MaxHeaderBytes: 10})
	if err != nil {
		t.Fatal(err)
	}
	if cq := core.Of(q); cq.MaxPayloadBytes != -1 || cq.MaxHeaderBytes != 10 {
		t.Errorf("limits %d, %d", cq.MaxPayloadBytes, cq.MaxHeaderBytes)
	}
	for _, tc := range []struct {
		cfg   QueueConfig
		field string
	}{
		{QueueConfig{MaxPayloadBytes: -2}, "QueueConfig.MaxPayloadBytes"},
		{QueueConfig{MaxHeaderBytes: -5}, "QueueConfig.MaxHeaderBytes"},
	} {
		_, err := NewQueue(offlineClient(t), "q", &tc.cfg)
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != tc.field {
			t.Errorf("%+v: err = %v, want a ConfigError for %s", tc.cfg, err, tc.field)
		}
	}
}

// TestProducer_Enqueue_RejectsBadJobs: a payload or headers above the
// queue's limits, and headers that are not valid UTF-8 (which encoding/json
// would silently turn into U+FFFD), are refused with a clear error before
// anything is written (the offline client would fail with a connection
// error).
func TestProducer_Enqueue_RejectsBadJobs(t *testing.T) {
	t.Parallel()
	q, err := NewQueue(offlineClient(t), "q", &QueueConfig{MaxPayloadBytes: 8, MaxHeaderBytes: 16})
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewProducer(q, nil)
	if err != nil {
		t.Fatal(err)
	}
	badHook, err := NewProducer(q, &ProducerConfig{Hooks: []EnqueueHook{func(_ context.Context, h map[string]string) { h["trace"] = "\xc3\x28" }}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		call func() error
		want error
		says string
	}{
		{"payload", func() error { _, err := p.Enqueue(ctx, []byte("123456789")); return err }, ErrTooLarge, "MaxPayloadBytes"},
		{"headers", func() error {
			_, err := p.Enqueue(ctx, nil, WithHeader("key", strings.Repeat("v", 14)))
			return err
		}, ErrTooLarge, "MaxHeaderBytes"},
		{"header key", func() error { _, err := p.Enqueue(ctx, nil, WithHeader("k\xff", "v")); return err }, ErrInvalidHeader, "UTF-8"},
		{"header value", func() error { _, err := p.Enqueue(ctx, nil, WithHeader("k", "\xff")); return err }, ErrInvalidHeader, "UTF-8"},
		{"header from a hook", func() error { _, err := badHook.Enqueue(ctx, nil); return err }, ErrInvalidHeader, `"trace"`},
		{"delayed", func() error { _, err := p.Enqueue(ctx, nil, WithHeader("k", "\xff"), ProcessIn(time.Hour)); return err }, ErrInvalidHeader, "UTF-8"},
		{"unique", func() error {
			_, err := p.Enqueue(ctx, []byte("123456789"), Unique("u", time.Hour))
			return err
		}, ErrTooLarge, "MaxPayloadBytes"},
		{"in a batch", func() error {
			_, err := p.EnqueueBatch(ctx, []Job{{Payload: []byte("ok")}, {Headers: map[string]string{"k": "\xfe"}}})
			return err
		}, ErrInvalidHeader, "job 1 of 2"},
	} {
		err := tc.call()
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: err = %v, want %v saying %q", tc.name, err, tc.want, tc.says)
		}
	}
}

func TestNewConsumer_MaxFetchBytes(t *testing.T) {
	t.Parallel()
	q, err := NewQueue(offlineClient(t), "q", nil)
	if err != nil {
		t.Fatal(err)
	}
	h := HandlerFunc(func(context.Context, *Message) error { return nil })
	c, err := NewConsumer(q, h, nil)
	if err != nil || c.cfg.MaxFetchBytes != DefaultMaxFetchBytes {
		t.Errorf("default: %v, %v", c, err)
	}
	if c, err := NewConsumer(q, h, &ConsumerConfig{MaxFetchBytes: -1}); err != nil || c.cfg.MaxFetchBytes != -1 {
		t.Errorf("-1: %v", err)
	}
	_, err = NewConsumer(q, h, &ConsumerConfig{MaxFetchBytes: -2})
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Field != "ConsumerConfig.MaxFetchBytes" {
		t.Errorf("-2: err = %v, want a ConfigError", err)
	}
}
