// Package writebehind keeps a Redis cache and a database in step without
// writing to the database on the request path (write-behind, also called
// write-back).
//
// A [Writer] updates the cache and appends the change to a streamq queue in
// one atomic Lua script ([Writer.Set] for a string, [Writer.SetFields] for a
// hash, [Writer.Delete]). A [streamq.Consumer]
// running a [Handler] reads the changes, collects them in batches, coalesces
// them by key (newest version wins), writes each batch to a [Sink] in one
// transaction, and acknowledges the changes only after the sink committed.
// [SQLSink] is the Sink for SQLite and PostgreSQL. The drivers live in
// their own packages, so that importing writebehind links no SQL driver:
// writebehind/sqlite (sqlite.Open, sqlite.NewSink; the pure-Go
// modernc.org/sqlite) and writebehind/postgres (postgres.Open,
// postgres.NewSink; pgx). [NewSQLSink] takes a database opened with any
// other driver of either dialect.
//
//	w, _ := writebehind.NewWriter(q, nil)
//	version, err := w.Set(ctx, "user:42", []byte(`{"name":"Ada"}`))
//	version, err = w.SetFields(ctx, "user:43", map[string]string{"name": "Grace"})
//
//	db, _ := sqlite.Open("users.db") // package writebehind/sqlite
//	sink, _ := sqlite.NewSink(db, nil)
//	h, _ := writebehind.NewHandler(sink, nil) // batches of up to 500, 50 ms
//	defer h.Close()
//	c, _ := streamq.NewConsumer(q, h, &streamq.ConsumerConfig{Concurrency: 1000})
//	err = c.Run(ctx)
//
// # Guarantees
//
//   - Cache and queue never disagree: a Set or Delete either updated the cache
//     and queued the change, or did neither (a script is atomic in Redis, and
//     a crash of the caller cannot split it). When the queue is at its cap
//     ([streamq.ErrQueueFull]) nothing is changed.
//   - Every queued change reaches the sink at least once, or ends in the
//     queue's dead-letter stream with the reason: the streamq consumer
//     retries failed batches with backoff, and takes over the changes of a
//     crashed worker after MinIdle.
//   - Replays are harmless. Every change carries a version from one counter
//     per queue, strictly increasing per key; a sink applies a change only if
//     it is newer than the stored row, and keeps deletions as tombstones. So
//     duplicates, retries and changes applied out of order all end with the
//     newest version of every key in the database: once the queue is drained,
//     the database holds exactly what the cache holds (for keys whose cache
//     entry did not expire), and deleted keys are absent from both. Versions
//     range from 1 to math.MaxInt64 and are exact over the whole range.
//   - A version counter that goes backwards (deleted, evicted, or a failover
//     to a replica that missed increments) drops nothing silently. Each
//     change also records the Redis clock when it got its version
//     ([HeaderIssued]); a sink refuses a change whose version and issue
//     time contradict the stored row's with [ErrVersionRegressed] instead of
//     ignoring it, while replays of old changes are still ignored. A
//     [Handler] with HandlerConfig.Writer repairs it by itself: it raises the
//     counter ([Writer.EnsureVersionAtLeast]) and queues the refused keys'
//     cached values again ([Writer.Resync]).
//   - A sink that stays down loses nothing either: each change is retried
//     until streamq.ConsumerConfig.MaxDeliveries attempts failed, then
//     dead-lettered with reason [streamq.ReasonMaxDeliveries] and the sink's
//     error, while the cache keeps the value. Dead letters keep the change's
//     key, value and version, so once the sink works again
//     [streamq.DeadLetters.RequeueAll] persists them, and a requeued change
//     that a newer one overtook meanwhile is ignored.
//
// # Redis keys and wire format
//
// All keys share the queue's hash tag, "<prefix>:{<queue>}:", so the
// script runs on Redis Cluster:
//
//   - <prefix>:{<queue>}:cache:<key> is the cached value: a plain string
//     (Set) or a hash (SetFields), with the optional WriterConfig.TTL.
//   - <prefix>:{<queue>}:wb:version is the version counter. It never expires;
//     keep it out of eviction (a maxmemory policy that evicts only keys with
//     a TTL, or none). Losing it is detected and repaired (see above), but
//     changes written meanwhile may need the repair.
//   - <prefix>:{<queue>}:stream is the queue's stream: each change is a job in
//     wire format version 1 whose payload is the value (empty for a
//     deletion; for a hash, its fields as a canonical JSON object, see
//     [EncodeFields]) and whose headers hold [HeaderKey], [HeaderOp]
//     ([OpSet], [OpSetFields] or [OpDelete]), [HeaderVersion] and
//     [HeaderIssued]. Decode one with [FromMessage].
//
// # Hashes
//
// [Writer.SetFields] caches a key as a Redis hash: it replaces the whole
// entry (DEL, HSET, PEXPIRE with the TTL) in the same script that queues the
// change. The change's value is the fields' canonical JSON object (members
// sorted by name, compact, no HTML escaping: {"age":"36","name":"Ada"}),
// which [SQLSink] stores in its value column like a string value, so a hash
// is versioned, coalesced, replayed and deleted exactly like a string. Read
// the cache with [Writer.GetFields] and a stored row with [DecodeFields].
//
// # Tuning
//
// Give the changes a queue of their own (one queue per cache and table): the
// Handler dead-letters any other job as malformed.
//
// A batch can hold only as many changes as the consumer runs handlers at
// once: set streamq.ConsumerConfig.Concurrency to at least
// HandlerConfig.MaxBatch, ideally twice as much so the next batch fills while
// one is written. One Handler writes one batch at a time. Batching is what
// makes write-behind cheap: a batch of 500 rows costs about one commit, where
// 500 single-row transactions cost 500. HandlerConfig.MaxBatchBytes (64 MiB)
// bounds a batch by size too, so that large values make smaller batches.
package writebehind
