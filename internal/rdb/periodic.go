package rdb

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// scriptTick enqueues the job of one tick of one schedule, at most once per
// (schedule, tick) however many schedulers call it, and without a leader: the
// check, the XADD and both bookkeeping writes are one atomic script, so a
// scheduler that dies at any instruction leaves either nothing or everything.
//
// KEYS[1] the queue's stream
// KEYS[2] the tick key, <prefix>:{<queue>}:periodic:<name>:<tick Unix ms>
// KEYS[3] the schedule's last-tick key, <prefix>:{<queue>}:periodic-last:<name>
// ARGV[1] tick (Unix ms)
// ARGV[2] TTL of the tick key (ms)
// ARGV[3] "1" for a catch-up of a tick missed while no scheduler ran (it is
// enqueued only if the schedule has fired before), "0" for a tick on time
// ARGV[4] stream cap (0 or less: none), the cap rule of Enqueue (no_room in
// streamLib): at most cap jobs that the group has not acknowledged
// ARGV[5..] field/value arguments of the stream entry (wire format v1)
//
// Returns {0, "early", server time (Unix ms)} when the tick is later than
// the server's clock (the caller's clock runs ahead: nothing is written, so
// a fast scheduler can neither enqueue a tick early nor make the ticks
// before it stale); {1, entry ID} when it enqueued the job; {0, "dup", entry ID} when
// this tick was already enqueued; {0, "stale", last tick} when a later tick of
// the schedule was already enqueued (ticks fire in order, so an older one is
// never enqueued after a newer one); {0, "new"} for a catch-up of a schedule
// that never fired. Errors with "QUEUEFULL ..." when the queue is at its cap.
// Writes other than the trimming of acknowledged history happen only after
// the XADD succeeded, so a failed XADD changes no job.
var scriptTick = redis.NewScript(streamLib + `
local tick = tonumber(ARGV[1])
local now = now_ms()
if tick > now then return {0, 'early', tostring(now)} end
local last = redis.call('GET', KEYS[3])
if last and tonumber(last) >= tick then
  local id = redis.call('GET', KEYS[2])
  if id then return {0, 'dup', id} end
  return {0, 'stale', last}
end
if not last and ARGV[3] == '1' then return {0, 'new'} end
local id = redis.call('GET', KEYS[2])
if id then return {0, 'dup', id} end
local full = no_room(KEYS[1], tonumber(ARGV[4]), 1)
if full then return redis.error_reply(full) end
id = redis.call('XADD', KEYS[1], '*', unpack(ARGV, 5))
redis.call('SET', KEYS[2], id, 'NX', 'PX', ARGV[2])
redis.call('SET', KEYS[3], ARGV[1])
return {1, id}
`)

// TickParams are one call of scriptTick.
type TickParams struct {
	Schedule string        // the schedule's name
	Tick     time.Time     // the tick (to the millisecond)
	TTL      time.Duration // how long the tick key is kept
	CatchUp  bool          // a tick missed while no scheduler ran
	Fields   []any         // the job's wire fields
}

// Tick runs scriptTick for tick p.Tick of schedule p.Schedule under the
// queue's cap and returns its reply. A refusal wraps [ErrQueueFull]. A call
// sent again finds its tick enqueued and answers "dup" with the same ID.
func (q *Queue) Tick(ctx context.Context, p TickParams) ([]any, error) {
	tick := p.Tick.UnixMilli()
	keys := []string{
		q.keys.Stream,
		q.keys.Part("periodic:" + p.Schedule + ":" + strconv.FormatInt(tick, 10)),
		q.keys.Part(PartLastTick + p.Schedule),
	}
	flag := "0"
	if p.CatchUp {
		flag = "1"
	}
	args := append([]any{tick, p.TTL.Milliseconds(), flag, q.maxLen}, p.Fields...)
	var res []any
	err := q.redo(ctx, func() (err error) {
		res, err = scriptTick.Run(ctx, q.client, keys, args...).Slice()
		return err
	})
	return res, Translate(err)
}
