// Package outbox enqueues jobs inside the caller's SQL transaction: a
// transactional outbox from PostgreSQL or SQLite to streamq.
//
// Enqueueing writes a row to an outbox table through the caller's
// transaction and nothing else, so the job exists exactly when the
// transaction commits: committed means enqueued exactly once, rolled back
// means never. A [Relay] moves committed rows to Redis: each row becomes
// one job, enqueued through the producer of its queue with the job ID
// [JobID](row ID) (or the caller's [streamq.WithJobID]) as its idempotency
// key, and the row is deleted only after Redis accepted the job. A relay
// that dies between the two, or a reply lost on the way, cannot enqueue a
// row twice: the next relay to claim the row finds the job ID taken.
//
// The drivers are packages of their own, so that only programs that use
// them link them: outbox/postgres (database/sql and pgx transactions,
// claims with FOR UPDATE SKIP LOCKED, wake-ups on LISTEN/NOTIFY) and
// outbox/sqlite (claims as leases with a token and an expiry, taken in one
// UPDATE).
//
//	ob, err := postgres.New(db, nil) // table "streamq_outbox"
//	err = ob.Migrate(ctx)            // idempotent
//
//	tx, err := db.BeginTx(ctx, nil)
//	... // the caller's own writes
//	id, err := ob.Enqueue(ctx, tx, queue, payload, streamq.ProcessIn(time.Minute))
//	err = tx.Commit()
//
//	relay, err := outbox.NewRelay(ob, &outbox.RelayConfig{Producers: []*streamq.Producer{producer}})
//	go relay.Run(ctx) // beside the consumers, or stand-alone: streamq outbox relay
//
// See docs/outbox.md for the table, the guarantees and the operation.
package outbox
