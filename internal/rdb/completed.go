package rdb

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Completed jobs: the records of succeeded jobs that a queue keeps for a
// while when asked to (streamq.QueueConfig.CompletedRetention). A queue that
// keeps none never runs these scripts: its acknowledgement is the plain one.

// Fields of a completed job's record (a packed field/value array, see
// wire.Unpack), in the hash [Keys.CompletedJobs] under the job's stable ID.
const (
	CompletedEntry     = "e"  // the entry ID of the copy that succeeded
	CompletedKind      = "k"  // the job's kind ("": untyped)
	CompletedEnqueued  = "q"  // enqueue time, Unix ms (the job's enq field; "" when unknown)
	CompletedStarted   = "s"  // start of the successful run, Unix ms, server's clock
	CompletedFinished  = "f"  // acknowledgement, Unix ms, server's clock
	CompletedAttempt   = "a"  // the successful run's attempt number (1: first)
	CompletedSize      = "n"  // the payload's size in bytes
	CompletedPayload   = "p"  // the payload, when it is at most the record's payload bound
	completedPerRecord = 8    // arguments per record (see CompletedJob; per_rec in completedLib)
	completedSettings  = "cr" // the settings key's part (see Keys.CompletedSettings)
)

// CompletedTrimMin is the least number of expired or excess records one
// acknowledgement deletes (it deletes up to this plus twice the jobs it
// records, so the records converge on the retention and the cap while jobs
// complete, with bounded work per call). completedLib writes the same
// number (trim_min).
const CompletedTrimMin = 32

// completedLib records completed jobs. It expects ARGV to end with the
// records and their settings (see Queue.Ack): it takes them off, so the
// acknowledgement's own ARGV is what it would be without them, and takes
// the two completed keys off the end of KEYS. It needs timeLib.
const completedLib = `
local per_rec, trim_min = 8, 32
-- record_completed records the jobs of the call that are still pending in
-- the group (those this call acknowledges), then deletes expired and excess
-- records, at most trim_min plus twice the records written.
local function record_completed()
  local nrec = tonumber(table.remove(ARGV))
  local cap = tonumber(table.remove(ARGV))
  local keep = tonumber(table.remove(ARGV))
  local base = #ARGV - nrec * per_rec
  local recs = {unpack(ARGV, base + 1, #ARGV)}
  for _ = 1, #recs do table.remove(ARGV) end
  local jobs = table.remove(KEYS)
  local set = table.remove(KEYS)
  local stream, group = KEYS[1], ARGV[1]
  local now = now_ms()
  local written = 0
  for i = 0, nrec - 1 do
    local r = i * per_rec
    local entry = recs[r + 1]
    if #redis.call('XPENDING', stream, group, entry, entry, 1) > 0 then
      local jid = recs[r + 2]
      redis.call('HSET', jobs, jid, cmsgpack.pack({
        '` + CompletedEntry + `', entry, '` + CompletedKind + `', recs[r + 3], '` + CompletedEnqueued + `', recs[r + 4],
        '` + CompletedStarted + `', tostring(now - tonumber(recs[r + 5])), '` + CompletedFinished + `', tostring(now),
        '` + CompletedAttempt + `', recs[r + 6], '` + CompletedSize + `', recs[r + 7], '` + CompletedPayload + `', recs[r + 8]}))
      redis.call('ZADD', set, now, jid)
      written = written + 1
    end
  end
  local budget = trim_min + 2 * written
  local old = redis.call('ZRANGE', set, '-inf', '(' .. (now - keep), 'BYSCORE', 'LIMIT', 0, budget)
  if cap > 0 and #old < budget then
    local over = redis.call('ZCARD', set) - #old - cap
    if over > 0 then
      old = redis.call('ZRANGE', set, 0, #old + math.min(over, budget - #old) - 1)
    end
  end
  if #old > 0 then
    redis.call('ZREM', set, unpack(old))
    redis.call('HDEL', jobs, unpack(old))
  end
  if redis.call('EXISTS', set) == 1 then
    redis.call('PEXPIRE', set, keep)
    redis.call('PEXPIRE', jobs, keep)
  end
end
`

// scriptAckCompleted is scriptAck that first records the jobs it
// acknowledges as completed (see completedLib).
//
// KEYS as scriptAck's, then the completed set and the completed records
// (Keys.Completed, Keys.CompletedJobs)
// ARGV as scriptAck's, then completedArgs arguments per record (entry ID,
// stable ID, kind, enqueue time, run time in ms, attempt, payload size,
// payload or ""), the retention (ms), the cap (0: none) and the number of
// records.
// Returns the number of entries acknowledged.
var scriptAckCompleted = redis.NewScript(streamLib + completedLib + `
record_completed()
local function ack()
` + ackBody + `
end
return ack()
`)

// scriptRecordCompleted records completed jobs without acknowledging them,
// for a queue under flow control, whose acknowledgement (scriptFlowAck)
// follows in a second call: a job recorded whose acknowledgement then
// failed runs again and is recorded again under its stable ID.
//
// KEYS[1] stream, then as scriptAckCompleted's
// ARGV[1] group, then as scriptAckCompleted's after scriptAck's.
// Returns 0.
var scriptRecordCompleted = redis.NewScript(timeLib + completedLib + `
record_completed()
return 0
`)

// CompletedJob is what a consumer knows of a job that succeeded, for its
// record.
type CompletedJob struct {
	Entry   string        // the entry acknowledged
	JobID   string        // the job's stable ID
	Kind    string        // "" for an untyped job
	Enq     string        // the enq field (Unix ms), "" when absent
	Ran     time.Duration // since the handler started, measured by the consumer
	Attempt int           // the successful run's number
	Size    int           // the payload's size
	Payload string        // the payload, or "" when larger than the bound
}

// CompletedConfig is the retention of a queue's completed jobs.
type CompletedConfig struct {
	Retention time.Duration // 0: records none
	Max       int64         // the most records kept (0: no cap)
}

// Completed returns the key of the queue's completed jobs: a sorted set of
// stable IDs scored by the time they finished (Unix ms, server's clock).
func (k Keys) Completed() string { return k.base + "completed" }

// CompletedJobs returns the key of the records of the queue's completed
// jobs: a hash stable ID -> packed record (see CompletedEntry and the
// other fields).
func (k Keys) CompletedJobs() string { return k.base + "completed:jobs" }

// CompletedSettings returns the key where consumers that keep completed
// jobs note the retention, for the inspector: "<retention ms> <cap>".
func (k Keys) CompletedSettings() string { return k.base + completedSettings }

// KeepsCompleted reports whether the queue records completed jobs.
func (q *Queue) KeepsCompleted() bool { return q.completedTTL > 0 }

// completedArgs appends the records of p.Completed and their settings to
// args and the completed keys to keys.
func (q *Queue) completedArgs(keys []string, args []any, p *AckParams) ([]string, []any) {
	args = slices.Grow(args, completedPerRecord*len(p.Completed)+3)
	for i := range p.Completed {
		c := &p.Completed[i]
		args = append(args, c.Entry, c.JobID, c.Kind, c.Enq, c.Ran.Milliseconds(), c.Attempt, c.Size, c.Payload)
	}
	args = append(args, q.completedTTL, q.completedMax, len(p.Completed))
	return append(keys, q.keys.Completed(), q.keys.CompletedJobs()), args
}

// NoteCompleted records the queue's completed-job retention for the
// inspector, or deletes the note when the queue keeps none.
func (q *Queue) NoteCompleted(ctx context.Context) error {
	k := q.keys.CompletedSettings()
	if q.completedTTL <= 0 {
		return q.client.Del(ctx, k).Err()
	}
	return q.client.Set(ctx, k, strconv.FormatInt(q.completedTTL, 10)+" "+strconv.FormatInt(q.completedMax, 10), 0).Err()
}

// ReadCompletedConfig reads the note NoteCompleted left: the zero config
// when there is none (no consumer that keeps completed jobs started).
func ReadCompletedConfig(ctx context.Context, c redis.Cmdable, k Keys) (CompletedConfig, error) {
	s, err := c.Get(ctx, k.CompletedSettings()).Result()
	if errors.Is(err, redis.Nil) {
		return CompletedConfig{}, nil
	}
	if err != nil {
		return CompletedConfig{}, err
	}
	var cc CompletedConfig
	ms, limit, _ := strings.Cut(s, " ")
	n, _ := strconv.ParseInt(ms, 10, 64)
	cc.Retention = time.Duration(n) * time.Millisecond
	cc.Max, _ = strconv.ParseInt(limit, 10, 64)
	return cc, nil
}
