package rdb

import (
	"crypto/rand"
	"encoding/base64"
	"strconv"
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
// start, Unix ms>, field token, value the packed reply. The client names the
// bucket from its clock when it makes the token, so every send of a call
// checks the same hash. The hash expires as a whole: the script that creates
// it sets its TTL (one PEXPIRE per bucket, not per call) and a marker field
// "#", which the check reads along with the token (HMGET), so retention
// costs no work per call beyond HMGET and HSET.
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
// its size: its reply is the first ID and the count.

const (
	// MemoWindow is the shortest time a write call's reply is remembered.
	MemoWindow = 15 * time.Second
	// memoBucket is the span of one memo hash.
	memoBucket = 5 * time.Second
	// memoTTL is how long a memo hash lives after its first write: the
	// window, plus one bucket (the last token of a bucket is written up to
	// one bucket after the first), plus one more for skewed clocks.
	memoTTL = MemoWindow + 2*memoBucket
)

// Memo is where one write call remembers its reply: the bucket hash and the
// call's token. Make one per call with [Keys.NewMemo] and use it for every
// send of the call (the library's own retries included).
type Memo struct {
	Key   string
	Token string
}

// NewMemo returns a fresh memo of the queue for a call made now.
func (k Keys) NewMemo() Memo { return newMemo(k.base) }

// NewMemo returns a fresh memo of the queue for a call made now.
func (k PriorityKeys) NewMemo() Memo { return newMemo(k.base) }

func newMemo(base string) Memo {
	b := time.Now().UnixMilli()
	b -= b % memoBucket.Milliseconds()
	return Memo{Key: base + "memo:" + strconv.FormatInt(b, 10), Token: NewToken()}
}

// NewToken returns 96 random bits as 16 URL-safe characters.
func NewToken() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// keys returns keys with the memo hash appended.
func (m Memo) keys(keys ...string) []string { return append(keys, m.Key) }

// args returns args with the token and the memo TTL appended.
func (m Memo) args(args ...any) []any {
	return append(args, m.Token, memoTTL.Milliseconds())
}

// idempotent returns the source of a write script that remembers its reply:
// lib, then body run as a function, inside a check of the call's token.
// The script takes the memo hash as its last key and the token and the memo
// TTL (ms) as its last two arguments, and removes them from KEYS and ARGV
// before body runs, so body sees the KEYS and ARGV its header documents.
//
// A send that finds its token returns the reply remembered by the first and
// writes nothing but the same token again: a write, so that a WAIT after it
// on the same connection also waits for the first send's writes (WAIT waits
// for a connection's last write). Error replies are not remembered: scripts
// refuse before they write.
func idempotent(lib, body string) string {
	return lib + `
local memo_key, memo_tok, memo_ttl = KEYS[#KEYS], ARGV[#ARGV - 1], ARGV[#ARGV]
KEYS[#KEYS] = nil
ARGV[#ARGV] = nil
ARGV[#ARGV] = nil
local memo_seen = redis.call('HMGET', memo_key, memo_tok, '#')
if memo_seen[1] then
  redis.call('HSET', memo_key, memo_tok, memo_seen[1])
  return cmsgpack.unpack(memo_seen[1])
end
local function body()
` + body + `
end
local reply = body()
if type(reply) ~= 'table' or not reply.err then
  if memo_seen[2] then
    redis.call('HSET', memo_key, memo_tok, cmsgpack.pack(reply))
  else
    redis.call('HSET', memo_key, memo_tok, cmsgpack.pack(reply), '#', 1)
    redis.call('PEXPIRE', memo_key, memo_ttl)
  end
end
return reply
`
}
