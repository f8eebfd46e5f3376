package rdb

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq/internal/wire"
)

// Jobs enqueued once per mark (Keys.OutboxMark) written with the job: the
// workflow package's node releases. (The SQL outbox's relay used it before
// it enqueued rows under job IDs; see enqueueids.go.)

// scriptOutbox enqueues the jobs of outbox rows, each unless its mark
// exists: a job whose mark exists was enqueued by an earlier call (a relay
// that did not remove the row, or a re-send), and is left alone. Due jobs
// go into the stream under the queue's cap (nothing is written when the
// new ones do not fit), the others into the delayed set. Every mark, new or
// found, gets its TTL again: a write, so that a WAIT after a call that
// found every mark also waits for the calls that wrote them (WAIT waits for
// a connection's last write). A mark is a string, the job's ID: a new job
// costs three commands (GET, XADD, SET ... PX).
//
// KEYS[1] stream, KEYS[2] delayed sorted set, KEYS[3] delayed job hash,
// KEYS[3+j] the mark of job j
// ARGV[1] cap (0 or less: none), ARGV[2] mark TTL (ms), ARGV[3] number of
// jobs n; then per job: its due time (Unix ms; "0": now), its delayed-set
// ID ("" when due now), its field/value count c and c field/value
// arguments.
// Returns {added, id_1, ..., id_n}: how many jobs the call enqueued, and
// each job's ID (the earlier call's for a marked one). Or an error reply
// starting with "QUEUEFULL" when the new due jobs do not fit under the cap.
var scriptOutbox = redis.NewScript(streamLib + `
local cap, ttl, n = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
local pos, found, due_now = {}, {}, 0
local i = 4
for j = 1, n do
  pos[j] = i
  found[j] = redis.call('GET', KEYS[3 + j])
  if not found[j] and ARGV[i] == '0' then due_now = due_now + 1 end
  i = i + 3 + tonumber(ARGV[i + 2])
end
if due_now > 0 then
  local full = no_room(KEYS[1], cap, due_now)
  if full then return redis.error_reply(full) end
end
local out = {0}
for j = 1, n do
  local mark, p = KEYS[3 + j], pos[j]
  local id = found[j]
  if id then
    redis.call('PEXPIRE', mark, ttl)
  else
    local c = tonumber(ARGV[p + 2])
    if ARGV[p] == '0' then
      id = redis.call('XADD', KEYS[1], '*', unpack(ARGV, p + 3, p + 2 + c))
    else
      id = ARGV[p + 1]
      redis.call('HSET', KEYS[3], id, cmsgpack.pack({unpack(ARGV, p + 3, p + 2 + c)}))
      redis.call('ZADD', KEYS[2], ARGV[p], id)
    end
    redis.call('SET', mark, id, 'PX', ttl)
    out[1] = out[1] + 1
  end
  out[j + 1] = id
end
return out
`)

// OutboxParams are one call of scriptOutbox: at most MaxBatchChunk jobs,
// added with Add.
type OutboxParams struct {
	// MarkTTL is how long the marks live.
	MarkTTL time.Duration
	// Replicas is what the write waits for (zero: none).
	Replicas Replicas
	// IDs receives the job IDs, in the order of Add; Added how many jobs
	// the call enqueued.
	IDs   []string
	Added int

	marks []string
	args  []any
}

// Add adds job j of outbox row row, due at due (zero: now). A delayed job's
// JobID must be set: it is its delayed-set ID.
func (p *OutboxParams) Add(keys Keys, row string, j *wire.Job, due time.Time) {
	if p.args == nil {
		p.args = make([]any, 3, 3+16*8)
	}
	p.marks = append(p.marks, keys.OutboxMark(row))
	if due.IsZero() {
		p.args = append(p.args, 0, "")
	} else {
		p.args = append(p.args, DueMillis(due), j.JobID)
	}
	fields := j.Args()
	p.args = append(append(p.args, len(fields)), fields...)
}

// Len returns the number of jobs added.
func (p *OutboxParams) Len() int { return len(p.marks) }

// Outbox runs scriptOutbox for the jobs of p and sets p.IDs and p.Added. A
// refusal wraps [ErrQueueFull]; a write that p.Replicas did not
// acknowledge sets them and returns a [*streamqtype.NotReplicatedError].
func (q *Queue) Outbox(ctx context.Context, p *OutboxParams) error {
	if len(p.marks) == 0 {
		return nil
	}
	args := p.args
	args[0], args[1], args[2] = q.maxLen, p.MarkTTL.Milliseconds(), len(p.marks)
	keys := append([]string{q.keys.Stream, q.keys.Delayed, q.keys.DelayedJobs}, p.marks...)
	cmd, werr := q.runScript(ctx, scriptOutbox, Memo{}, p.Replicas, keys, args)
	res, err := cmd.Slice()
	if err != nil {
		return Translate(err)
	}
	if len(res) != len(p.marks)+1 {
		return fmt.Errorf("outbox replied %d elements for %d jobs", len(res), len(p.marks))
	}
	added, _ := res[0].(int64)
	p.Added = int(added)
	p.IDs = make([]string, len(p.marks))
	for i, v := range res[1:] {
		p.IDs[i], _ = v.(string)
	}
	return werr
}
