// Package periodic enqueues jobs on a schedule: crontab expressions (with an
// optional seconds field, descriptors such as @hourly and @every 10s, and time
// zones) parsed by github.com/robfig/cron/v3, or fixed intervals.
//
// Run a [Scheduler] in every worker process, next to the consumers: there is
// no leader and no lock that can die with its holder. At each tick T of a
// schedule, every scheduler runs one Lua script that enqueues the job only
// if no scheduler did so for (schedule, T) yet, and records T, in one atomic
// step. The job lands in the queue's stream like any other job (wire format
// version 1) with two headers, [HeaderName] and [HeaderTick]; read them with
// [FromMessage].
//
// Ticks are absolute instants computed from the schedule alone (crontab specs
// in their zone, UTC by default; intervals as multiples since the Unix epoch),
// so every process computes the same ticks. Ticks that passed while no
// scheduler ran are skipped, or, with [MissedRunOnce], the latest of them is
// enqueued once when a scheduler starts again.
//
// # Redis keys
//
// All keys share the queue's hash tag (see [streamq.Queue.Key]):
//
//   - <prefix>:{<queue>}:periodic:<name>:<tick Unix ms> holds the entry ID of
//     the tick's job. It expires twice the gap to the following tick plus one
//     minute after it is written.
//   - <prefix>:{<queue>}:periodic-last:<name> holds the latest enqueued tick
//     (Unix ms) of the schedule. It has no expiry (a few bytes per schedule
//     name); delete it when you retire a schedule for good.
package periodic
