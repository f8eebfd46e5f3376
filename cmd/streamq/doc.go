// Command streamq operates the job queues of github.com/streamq/streamq on
// Redis from a terminal: it lists queues and jobs in every state, pauses and
// resumes queues, cancels, deletes and runs jobs, requeues and purges dead
// letters, lists consumers and schedules, enqueues jobs and runs the
// benchmark.
//
// Install it with
//
//	go install github.com/streamq/streamq/cmd/streamq@latest
//
// Subcommands (each has -h with examples):
//
//	queues                           every queue: kind, jobs by state, oldest waiting, paused
//	queues prune                     remove ghost queues (registry entries without keys)
//	queue delete <queue>             delete a queue and every key of it (--force while consumers are live)
//	stats <queue>                    one queue: counters, throughput per minute, priority levels, write-behind
//	stats <queue> --history 2h|7d    processed and failed per minute (2 hours) or per hour (7 days)
//	stats --rollup                   keep the 7-day history (cron, at least every 2 hours)
//	watch [queue]                    refreshing view of counts and rates (plain or JSON lines off a terminal)
//	jobs <queue> --state S           jobs in one state, a page at a time (--limit --cursor --header --grep)
//	job <queue> <id>                 one job wherever it is: payload, headers, attempts, errors, progress, result
//	pause|resume <queue>             stop and restart taking jobs
//	cancel|delete|run-now <queue> <id>...
//	cancel|delete|run-now <queue> --all [--state S]   every job of a state, after a confirmation
//	dead ls|show|requeue|purge       dead letters, with the filters --reason --error --since --until
//	consumers <queue>                consumers/workers; consumers prune <queue> --idle D
//	schedules [queue]                periodic schedules with their last and next tick
//	enqueue <queue> [payload|-]      one job (--header --in --at --unique --ttl --priority), or many (--jsonl FILE|-)
//	outbox status|relay|migrate      the SQL outbox (--postgres DSN | --sqlite FILE): backlog, a stand-alone relay (--queue), the table
//	redis                            the Redis server: version, memory, eviction policy, ops/s, clients, persistence
//	dash                             interactive terminal view: queues, jobs by state, one job; pause, retry, delete
//	dashboard                        the web dashboard (--listen --tls-cert --tls-key --allowed-host --hide-payloads ...)
//	bench                            the benchmark of docs/performance.md (also cmd/streamq-bench)
//	version                          the streamq version
//
// Connection: --url or REDIS_URL (redis://, rediss:// with TLS, unix://),
// --cluster host:port,..., --sentinel master@host:port,..., --user and
// --password (or STREAMQ_REDIS_USER and STREAMQ_REDIS_PASSWORD), --prefix
// (STREAMQ_PREFIX) and --group (STREAMQ_GROUP). REDIS_ADDR (host:port) is
// read when REDIS_URL is not set; the default is redis://127.0.0.1:6379.
//
// Output is an aligned table, or with --json one JSON document whose shape
// each subcommand's -h documents (watch prints JSON lines). Times are RFC
// 3339 in UTC, durations whole milliseconds in fields ending in _ms.
//
// Exit codes: 0 ok; 1 failure (Redis unreachable, a job in the wrong state,
// an action not confirmed); 2 usage (bad flag, argument or filter, or a
// destructive action without --yes when stdin is not a terminal); 3 queue or
// job not found.
package main
