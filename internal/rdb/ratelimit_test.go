package rdb

import (
	"testing"
	"time"
)

// TestTakeToken: a full bucket gives burst tokens at once, then reserves
// future ones up to the wait allowed. A call sent again after a lost reply
// takes one more token: the limit only gets stricter, never looser.
func TestTakeToken(t *testing.T) {
	t.Parallel()
	e := setup(t, Config{})
	key := e.k.Part("ratelimit")
	emptied := time.Now() // before the first call: the bucket is full until then
	for i := range 2 {
		took, wait, err := TakeToken(e.ctx, e.c, key, 1, 2, 0)
		if err != nil || !took || wait != 0 {
			t.Fatalf("token %d: %v, %d, %v", i, took, wait, err)
		}
	}
	// Empty: the next token is a second away, less the time that passed
	// since the bucket was emptied (a loaded machine may take a while
	// between two calls).
	lower := func(nominal int64) int64 { return nominal - time.Since(emptied).Milliseconds() - 5 }
	if took, wait, err := TakeToken(e.ctx, e.c, key, 1, 2, 0); err != nil || took || wait < lower(1000) || wait > 1000 {
		t.Fatalf("empty bucket without waiting: %v, %d, %v", took, wait, err)
	}
	if took, wait, err := TakeToken(e.ctx, e.c, key, 1, 2, 2000); err != nil || !took || wait < lower(1000) || wait > 1000 {
		t.Fatalf("reserving the next token: %v, %d, %v", took, wait, err)
	}
	// The same call again reserves the one after it.
	if took, wait, err := TakeToken(e.ctx, e.c, key, 1, 2, 2000); err != nil || !took || wait < lower(2000) || wait > 2000 || wait <= 1000 {
		t.Fatalf("a re-sent reservation: %v, %d, %v; want the token after", took, wait, err)
	}
	if ttl := e.c.PTTL(e.ctx, key).Val(); ttl <= 0 {
		t.Errorf("the bucket has no TTL (%s)", ttl)
	}
}
