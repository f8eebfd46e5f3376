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
// # Daylight saving time
//
// A crontab spec reads the wall clock of its zone: it runs once for every
// local date and time it matches, also on the days the clocks change.
//
//   - A wall time that does not exist, because the clocks go forward over it,
//     runs at the first instant after it, the moment of the change:
//     "CRON_TZ=Europe/Paris 0 2 * * *" runs at 03:00 CEST on 29 March 2026
//     (and "30 2 * * *" at 03:00 too, not 03:30). Several skipped wall times
//     of one spec ("*/15 2 * * *"), and the wall time right after the gap
//     ("0 * * * *" at 03:00), share that instant and so run once.
//   - A wall time that occurs twice, because the clocks go back, runs once,
//     at its first occurrence: the same spec runs at 02:00 CEST on 25 October
//     2026 and not again at 02:00 CET. "0 * * * *" runs 24 times on that
//     25-hour day, two hours apart from 02:00 CEST to 03:00 CET;
//     "*/15 2 * * *" runs at 02:00, 02:15, 02:30 and 02:45 CEST only.
//
// This holds whether the change is at 02:00, at midnight (America/Santiago,
// America/Havana) or by 30 minutes (Australia/Lord_Howe). Intervals
// ([Scheduler.RegisterInterval], "@every") are absolute durations and ignore
// zones: "@every 1h" runs 25 times on that day. A tick is identified by the
// instant chosen this way (its tick key and [HeaderTick]), so all schedulers
// agree on it, as long as they share the time zone database's version (Go
// reads the system's, or the one embedded by importing time/tzdata).
//
// # Failures
//
// When a tick cannot be enqueued (Redis unreachable or out of memory, the
// queue's stream at its cap with [streamq.ErrQueueFull]), the scheduler logs
// a warning and tries that tick again after a backoff: 50 ms, doubling up to
// 5 s, with jitter (each delay is between half its ceiling and the ceiling).
// A lasting failure thus costs each schedule one attempt and one warning per
// 5 s at most. The backoff is per schedule and starts over after a success.
// The failed tick stays due: the retry enqueues it, unless a later tick of
// the schedule has fallen due by then, in which case only the latest due tick
// is enqueued, as whenever the scheduler falls behind. Errors that retrying
// cannot fix (a wrong key type, a missing permission) make [Scheduler.Run]
// return.
//
// # Redis keys
//
// All keys share the queue's hash tag, "<prefix>:{<queue>}:":
//
//   - <prefix>:{<queue>}:periodic:<name>:<tick Unix ms> holds the entry ID of
//     the tick's job. It expires twice the gap to the following tick plus one
//     minute after it is written.
//   - <prefix>:{<queue>}:periodic-last:<name> holds the latest enqueued tick
//     (Unix ms) of the schedule. It has no expiry (a few bytes per schedule
//     name); delete it when you retire a schedule for good.
package periodic
