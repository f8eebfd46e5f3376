package rdb

import (
	"testing"
)

// TestTakeToken: a full bucket gives burst tokens at once, then reserves
// future ones up to the wait allowed. A call sent again after a lost reply
// takes one more token: the limit only gets stricter, never looser.
func TestTakeToken(t *testing.T) {
	t.Parallel()
	e := setup(t, Config{})
	key := e.k.Part("ratelimit")
	for i := range 2 {
		took, wait, err := TakeToken(e.ctx, e.c, key, 1, 2, 0)
		if err != nil || !took || wait != 0 {
			t.Fatalf("token %d: %v, %d, %v", i, took, wait, err)
		}
	}
	// Empty: the next token is a second away.
	if took, wait, err := TakeToken(e.ctx, e.c, key, 1, 2, 0); err != nil || took || wait < 900 || wait > 1000 {
		t.Fatalf("empty bucket without waiting: %v, %d, %v", took, wait, err)
	}
	if took, wait, err := TakeToken(e.ctx, e.c, key, 1, 2, 2000); err != nil || !took || wait < 900 || wait > 1000 {
		t.Fatalf("reserving the next token: %v, %d, %v", took, wait, err)
	}
	// The same call again reserves the one after it.
	if took, wait, err := TakeToken(e.ctx, e.c, key, 1, 2, 2000); err != nil || !took || wait < 1900 || wait > 2000 {
		t.Fatalf("a re-sent reservation: %v, %d, %v; want the token after", took, wait, err)
	}
	if ttl := e.c.PTTL(e.ctx, key).Val(); ttl <= 0 {
		t.Errorf("the bucket has no TTL (%s)", ttl)
	}
}
