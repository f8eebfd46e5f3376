package rdb

import (
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"time"
)

// Idempotent writes. go-redis sends a command again when the connection
// broke or timed out after it was written (MaxRetries, 3 by default), also
// an EVALSHA that Redis already ran: without care, the job is then stored
// twice although the caller got one ID. Every write script of the library
// therefore carries a token that the client makes for the call (the same
// for every send of it), and remembers its reply under that token in the
// same atomic step; a send that finds its token returns the remembered
// reply and changes nothing (the model is Redis 8.6's XADD ... IDMP).
//
// Where: one hash per queue and time bucket, <prefix>:{<queue>}:memo:<bucket
// start, Unix ms>, field token, value the reply. The client names the
// bucket from its clock when it makes the token, so every send of a call
// checks the same hash. The hash expires as a whole: a process asks its
// calls to set the TTL (PEXPIRE) until one that did so succeeded in that
// bucket, so retention costs no work per call beyond the write of the
// token; and the control loop of every consumer and worker gives a TTL to
// the hashes of the current and previous bucket that have none (a hash
// deleted while producers run is made again by later calls without one;
// see [Control]).
//
// Two ways to use it: the enqueue script writes first and remembers its
// reply with HSETNX; a send that finds the token taken is a re-send of a
// call that ran, and deletes the entries it has just added before it
// answers with the first send's reply (one hash command per call, the
// cheapest on the hot path). Other scripts are wrapped by [idempotent]: they
// look up the token first (HGET), and write it with their reply.
//
// Retention: a token is kept between MemoWindow and MemoWindow plus one
// bucket after its bucket started (and at least MemoWindow after it was
// written, with clocks of the writers within one bucket of each other):
// MemoWindow covers go-redis's retries with its defaults (3 retries after 3 s
// read timeouts and up to 512 ms of backoff, about 10.5 s) and the library's
// own retries during Cluster failovers (redoFor).
//
// Memory: about 90 bytes per remembered call on a 64-bit server (a hash
// field of 16 bytes, a reply of 20 to 40, and the hash table entry), so
// each write call per second costs about 2 KB of Redis memory (90 bytes
// times the 22.5 s an entry lives on average). A batch is one call, whatever
// its size: its reply is the first ID.

const (
	// MemoWindow is the shortest time a write call's reply is remembered.
	MemoWindow = 15 * time.Second
	// memoBucket is the span of one memo hash.
	memoBucket = 5 * time.Second
	// memoTTL is how long a memo hash lives after its TTL is set: the
	// window, plus one bucket (the last token of a bucket is written up to
	// one bucket after the first), plus one more for skewed clocks.
	memoTTL = MemoWindow + 2*memoBucket
)

// Memo is where one write call remembers its reply: the bucket hash and the
// call's token. A call makes one with [Queue.NewMemo] (a call whose params
// hold a zero Memo gets a fresh one) and uses it for every send of the call
// (the library's own retries included): a send that finds the token answers
// the first send's reply and changes nothing.
type Memo struct {
	Key   string
	Token string
	// TTL is the TTL (ms) the call sets on the hash, 0 when a call of this
	// process has set it already.
	TTL int64

	bucket int64
	state  *memoState
}

// memoState is a queue's memo state in this process: the key of the
// current bucket (made once per bucket, not per call) and the last bucket
// whose hash got its TTL from a call that succeeded.
type memoState struct {
	cur    atomic.Pointer[memoBucketKey]
	ttlSet atomic.Int64
}

type memoBucketKey struct {
	start int64
	key   string
}

// NewMemo returns a fresh memo of the queue for a call made now (by the
// queue's clock).
func (q *Queue) NewMemo() Memo {
	b := q.clock.Now().UnixMilli()
	b -= b % memoBucket.Milliseconds()
	st := &q.memo
	m := Memo{Token: NewToken(), TTL: memoTTL.Milliseconds(), bucket: b, state: st}
	cur := st.cur.Load()
	if cur == nil || cur.start != b {
		cur = &memoBucketKey{start: b, key: memoKey(q.keys.base, b)}
		st.cur.Store(cur)
	}
	m.Key = cur.key
	if st.ttlSet.Load() == b {
		m.TTL = 0
	}
	return m
}

// memoOr returns m, or a fresh memo when m is zero.
func (q *Queue) memoOr(m Memo) Memo {
	if m.Token == "" {
		return q.NewMemo()
	}
	return m
}

func memoKey(base string, bucket int64) string {
	return base + "memo:" + strconv.FormatInt(bucket, 10)
}

// done records that a call with m was run by Redis (it answered with a
// reply, not an error): the hash has its TTL if m asked for it.
func (m Memo) done() {
	if m.TTL > 0 && m.state != nil {
		m.state.ttlSet.Store(m.bucket)
	}
}

// NewToken returns 96 random bits as 16 URL-safe characters. The bits come
// from the runtime's random generator (ChaCha8, seeded by the operating
// system per process): unique across producers, without a system call.
func NewToken() string {
	const chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	var b [16]byte
	for i, r := 0, rand.Uint64(); i < len(b); i++ {
		if i == 10 {
			r = rand.Uint64() // 10 characters use 60 of its bits
		}
		b[i] = chars[r&63]
		r >>= 6
	}
	return string(b[:])
}

// keys returns keys with the memo hash appended.
func (m Memo) keys(keys ...string) []string { return append(keys, m.Key) }

// args returns args with the token and the memo TTL appended.
func (m Memo) args(args ...any) []any {
	return append(args, m.Token, m.TTL)
}

// idempotent returns the source of a write script that remembers its reply:
// lib, then body run as a function, inside a check of the call's token.
// The script takes the memo hash as its last key and the token and the memo
// TTL (ms; 0: leave the TTL alone) as its last two arguments, and removes
// them from KEYS and ARGV before body runs, so body sees the KEYS and ARGV
// its header documents.
//
// A send that finds its token returns the reply remembered by the first and
// writes nothing but the same token again: a write, so that a WAIT after it
// on the same connection also waits for the first send's writes (WAIT waits
// for a connection's last write). Error replies are not remembered: scripts
// refuse before they write. A reply is remembered as 's' and a string, 'n'
// and a number, or 'm' and MessagePack (a table, false).
func idempotent(lib, body string) string {
	return lib + `
local memo_key, memo_tok, memo_ttl = KEYS[#KEYS], ARGV[#ARGV - 1], ARGV[#ARGV]
KEYS[#KEYS] = nil
ARGV[#ARGV] = nil
ARGV[#ARGV] = nil
local memo_seen = redis.call('HGET', memo_key, memo_tok)
if memo_seen then
  redis.call('HSET', memo_key, memo_tok, memo_seen)
  local kind, v = string.sub(memo_seen, 1, 1), string.sub(memo_seen, 2)
  if kind == 's' then return v end
  if kind == 'n' then return tonumber(v) end
  return cmsgpack.unpack(v)
end
local function body()
` + body + `
end
local reply = body()
if type(reply) ~= 'table' or not reply.err then
  local v
  if type(reply) == 'string' then v = 's' .. reply
  elseif type(reply) == 'number' then v = 'n' .. reply
  else v = 'm' .. cmsgpack.pack(reply) end
  redis.call('HSET', memo_key, memo_tok, v)
  if memo_ttl ~= '0' then redis.call('PEXPIRE', memo_key, memo_ttl) end
end
return reply
`
}
