package streamq

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestNewProducer_Validation(t *testing.T) {
	t.Parallel()
	if _, err := NewProducer(nil, nil); err == nil {
		t.Error("nil queue accepted")
	}
	q, err := NewQueue(offlineClient(t), "q", nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = NewProducer(q, &ProducerConfig{Hooks: []EnqueueHook{nil}})
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Field != "ProducerConfig.Hooks[0]" {
		t.Errorf("nil hook: err = %v", err)
	}
}

func TestProducer_RejectsBeforeTalkingToRedis(t *testing.T) {
	t.Parallel()
	q, err := NewQueue(offlineClient(t), "q", nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewProducer(q, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// The offline client would fail with a connection error; these must fail
	// earlier with a configuration error.
	_, err = p.Enqueue(ctx, nil, ProcessIn(-1))
	var ce *ConfigError
	if !errors.As(err, &ce) {
		t.Errorf("Enqueue with a bad option: %v", err)
	}
	_, err = p.EnqueueBatch(ctx, []Job{{}, {}}, Unique("k", time.Second))
	if !errors.As(err, &ce) || ce.Field != "Unique" {
		t.Errorf("EnqueueBatch with Unique: %v", err)
	}
	ids, err := p.EnqueueBatch(ctx, nil)
	if err != nil || len(ids) != 0 {
		t.Errorf("empty batch: %v %v", ids, err)
	}
}

func TestProducer_HooksSeeMergedHeaders(t *testing.T) {
	t.Parallel()
	q, err := NewQueue(offlineClient(t), "q", nil)
	if err != nil {
		t.Fatal(err)
	}
	var seen map[string]string
	p, err := NewProducer(q, &ProducerConfig{Hooks: []EnqueueHook{
		func(_ context.Context, h map[string]string) { h["traceparent"] = "x" },
		func(_ context.Context, h map[string]string) { seen = h },
	}})
	if err != nil {
		t.Fatal(err)
	}
	h := p.headers(context.Background(), map[string]string{"a": "batch", "b": "batch"}, map[string]string{"b": "job"})
	if h["a"] != "batch" || h["b"] != "job" || h["traceparent"] != "x" || seen["traceparent"] != "x" {
		t.Errorf("headers = %v, seen by later hook = %v", h, seen)
	}
	plain, err := NewProducer(q, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := plain.headers(context.Background(), nil, nil); got != nil {
		t.Errorf("no headers and no hooks must give nil (small entries), got %v", got)
	}
}
