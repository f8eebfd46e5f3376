package streamq

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq/internal/core"
	"github.com/streamq/streamq/internal/engine"
	"github.com/streamq/streamq/internal/rdb"
	"github.com/streamq/streamq/internal/wire"
)

const (
	// maxAdoptScan bounds the pages of one look for entries delivered by
	// a read whose reply was lost.
	maxAdoptScan = 20
	// adoptPage is the page size of that look.
	adoptPage = 100
)

// streamBackend is the engine's backend for a stream read by a consumer
// group (see engine.Backend). One exists per Run.
//
// Attempts: XREADGROUP counts a delivery when Redis sends the reply, and the
// engine starts what it read at once, so a read counts its jobs' starts
// (Charged). Jobs taken over from other consumers are claimed with
// XAUTOCLAIM ... JUSTID, which leaves the delivery counter alone: the
// counter is the count of handler starts of the entry, each cut short by a
// crash, and the engine counts the coming start (XCLAIM ... RETRYCOUNT)
// right before it runs the job.
type streamBackend struct {
	c *Consumer
	q *Queue

	// Owned by the fetch loop.
	boundary   string // the group's last delivered ID when the run started
	cursor     string // of the reclaim pass
	reclaimAt  time.Time
	scanAt     time.Time
	scanNow    bool
	scanEvery  time.Duration
	claimToken string // of a reclaim to send again after an error
	claims     uint64
	started    bool // Start ran once (it runs again when the stream was deleted)
	budget     *engine.FetchBudget
	reads      []engine.Delivery // the deliveries of the last read, reused
	flowAt     time.Time         // when to look for flow limits next

	// flow is set once the queue is under flow control (see flow.go); it
	// stays set for the run, so that every slot taken is given back.
	flow atomic.Bool

	// Owned by the finish loop (one Finish at a time).
	acks []string

	mu   sync.Mutex
	skip map[string]struct{} // entries the engine gave up on: left to the reaper
}

func newStreamBackend(c *Consumer) *streamBackend {
	return &streamBackend{
		c:         c,
		q:         c.q,
		cursor:    "0-0",
		scanEvery: min(max(c.cfg.MinIdle/4, 10*time.Millisecond), 2*time.Second),
		skip:      make(map[string]struct{}),
		budget:    engine.NewFetchBudget(c.cfg.MaxFetchBytes),
	}
}

// Start creates the group if needed and notes where the group's reads
// stand: every entry pending for this consumer with a higher ID was read
// by this run.
func (b *streamBackend) Start(ctx context.Context) error {
	setup := b.q.Setup // also registers the queue
	if b.started {
		// The stream was deleted while the consumer ran (an operator's
		// forced delete): make the stream and the group again, but leave
		// the queue out of the registry until the consumer restarts (see
		// inspect.DeleteQueueOptions.Force).
		setup = b.q.setupGroup
	} else {
		core.Of(b.q).WarnEvictionPolicy(ctx, b.c.run.Mon.Log)
		core.Of(b.q).WarnFailoverLoss(ctx, b.c.run.Mon.Log)
		noteCompleted(ctx, b.q, b.c.run.Mon.Log)
	}
	if err := setup(ctx); err != nil {
		rdb.Heal(ctx, b.q.client, err)
		return err
	}
	b.started = true
	groups, err := b.q.client.XInfoGroups(ctx, b.q.keys.Stream).Result()
	if err != nil {
		return fmt.Errorf("streamq: xinfo groups %s: %w", b.q.keys.Stream, err)
	}
	b.boundary = "0-0"
	for _, g := range groups {
		if g.Name == b.q.group {
			b.boundary = g.LastDeliveredID
		}
	}
	if err := b.checkFlow(ctx); err != nil {
		return err
	}
	now := b.q.db.Now()
	b.scanAt = now.Add(b.scanEvery)
	if b.c.cfg.ReclaimInterval > 0 {
		b.reclaimAt = now // take over what crashed consumers left at once
	}
	return nil
}

// Fetch takes over abandoned entries when the reaper is due, takes back
// entries of lost read replies when a look is due, and otherwise reads new
// entries, blocking no longer than until the next of those is due. It asks
// for fewer than n entries after large ones (see ConsumerConfig.MaxFetchBytes).
func (b *streamBackend) Fetch(ctx context.Context, n int, wait time.Duration, owns func(string) bool) (_ []engine.Delivery, err error) {
	defer func() { rdb.Heal(ctx, b.q.client, err) }() // on Cluster, find a failed-over master at once
	ds, err := b.fetch(ctx, b.budget.Count(n), wait, owns)
	if len(ds) > 0 {
		var largest int64
		for i := range ds {
			largest = max(largest, engine.FieldsSize(ds[i].Fields))
		}
		b.budget.Observe(largest)
	}
	return ds, err
}

func (b *streamBackend) fetch(ctx context.Context, n int, wait time.Duration, owns func(string) bool) ([]engine.Delivery, error) {
	now := b.q.db.Now()
	if b.c.cfg.ReclaimInterval > 0 && !now.Before(b.reclaimAt) {
		ds, done, err := b.reclaim(ctx, n, owns)
		if err != nil {
			return nil, err
		}
		if done {
			b.reclaimAt = now.Add(b.c.cfg.ReclaimInterval)
		}
		if len(ds) > 0 {
			return b.admit(ctx, ds)
		}
	}
	if !b.flow.Load() && !now.Before(b.flowAt) {
		if err := b.checkFlow(ctx); err != nil {
			return nil, err
		}
	}
	if b.scanNow || !now.Before(b.scanAt) {
		b.scanNow = false
		b.scanAt = now.Add(b.scanEvery)
		ds, err := b.adopt(ctx, n, owns)
		if err != nil {
			b.scanNow = true
			return nil, err
		}
		if len(ds) > 0 {
			return b.admit(ctx, ds)
		}
	}
	block := time.Duration(-1) // wait 0: do not block (a worker's engine waits with WaitForWork)
	if wait > 0 {
		block = max(b.blockFor(wait), time.Millisecond) // 0 would block forever
	}
	if b.flow.Load() {
		return b.flowRead(ctx, n, block)
	}
	return b.read(ctx, n, block)
}

// read reads up to n new entries. While the consumer holds a start lease
// (see rdb.StartLease: a pause waits until every consumer gave its lease
// back or the lease ran out), that is one XREADGROUP, with BLOCK up to block
// (block < 0: without), whose jobs start if the lease still lasts once it
// returned (engine.Monitor.HoldLease). Without a lease, see readChecked.
func (b *streamBackend) read(ctx context.Context, n int, block time.Duration) ([]engine.Delivery, error) {
	mon := b.c.run.Mon
	if !mon.Leased() {
		return b.readChecked(ctx, n, block)
	}
	args := b.readArgs(n)
	args.Block = block
	streams, err := b.q.client.XReadGroup(ctx, args).Result()
	if err != nil {
		return nil, b.readFailed(ctx, err)
	}
	ds := b.deliveries(streams)
	if len(ds) == 0 || mon.HoldLease() {
		return ds, nil
	}
	// The lease ran out during the read: look at the flag (also if the run
	// ended meanwhile, see handBackContext).
	fctx, cancel := handBackContext(ctx)
	paused, err := b.q.client.Exists(fctx, b.q.keys.Paused).Result()
	cancel()
	return b.startable(ctx, ds, paused, err)
}

// readChecked reads up to n new entries without a start lease: first
// without blocking, pipelined with a look at the pause flag (EXISTS), which
// Redis runs right after the read; if there was nothing to read, with BLOCK
// up to block, then the flag. Entries read while the queue is paused do not
// start (rdb.ErrPaused): their deliveries are taken back and they stay
// pending for this consumer, which takes them back after the resume (see
// adopt). So a consumer started, restarted or blocked in a read during a
// pause starts nothing.
func (b *streamBackend) readChecked(ctx context.Context, n int, block time.Duration) ([]engine.Delivery, error) {
	args := b.readArgs(n)
	pipe := b.q.client.Pipeline()
	rd := pipe.XReadGroup(ctx, args)
	paused := pipe.Exists(ctx, b.q.keys.Paused)
	_, _ = pipe.Exec(ctx) // the errors are in the commands
	streams, err := rd.Result()
	if errors.Is(err, redis.Nil) {
		if paused.Val() > 0 {
			return nil, rdb.ErrPaused
		}
		if block < 0 { // a worker's engine waits with WaitForWork
			return nil, nil
		}
		args.Block = block
		if streams, err = b.q.client.XReadGroup(ctx, args).Result(); err == nil {
			// Redis counted the deliveries: look at the flag even when the
			// run ended meanwhile (the entries start or are put back
			// uncharged, never left counted as a crashed start).
			fctx, cancel := handBackContext(ctx)
			paused = b.q.client.Exists(fctx, b.q.keys.Paused)
			cancel()
		}
	}
	if err != nil {
		return nil, b.readFailed(ctx, err)
	}
	return b.startable(ctx, b.deliveries(streams), paused.Val(), paused.Err())
}

// readArgs returns the arguments of a read of up to n new entries, without
// BLOCK.
func (b *streamBackend) readArgs(n int) *redis.XReadGroupArgs {
	return &redis.XReadGroupArgs{
		Group:    b.q.group,
		Consumer: b.c.cfg.Name,
		Streams:  []string{b.q.keys.Stream, ">"},
		Count:    int64(n),
		Block:    -1, // no BLOCK
	}
}

// readFailed returns what a read that failed with err returns: nothing for
// no entries; after the stream was deleted, the error of starting over.
func (b *streamBackend) readFailed(ctx context.Context, err error) error {
	if errors.Is(err, redis.Nil) {
		return nil
	}
	if rdb.IsNoGroup(err) { // the stream was deleted: start over
		return b.Start(ctx)
	}
	// The reply may have been lost after Redis delivered entries.
	b.scanNow = true
	return fmt.Errorf("streamq: xreadgroup %s: %w", b.q.keys.Stream, err)
}

// deliveries returns the entries of a read's reply, in b.reads (the engine
// copies the deliveries before the next fetch).
func (b *streamBackend) deliveries(streams []redis.XStream) []engine.Delivery {
	ds := b.reads[:0]
	for _, s := range streams {
		for _, m := range s.Messages {
			ds = append(ds, engine.Delivery{Key: m.ID, ID: m.ID, Fields: m.Values, Charged: true, Suspect: wire.Crashed(m.Values)})
		}
	}
	b.reads = ds
	return ds
}

// startable returns ds, read before a look at the pause flag that gave
// paused (EXISTS) or err; if the queue is paused or the look failed, their
// jobs do not start (see putBack).
func (b *streamBackend) startable(ctx context.Context, ds []engine.Delivery, paused int64, err error) ([]engine.Delivery, error) {
	if err == nil && paused == 0 {
		return ds, nil
	}
	b.putBack(ctx, ds)
	if err != nil {
		return nil, fmt.Errorf("streamq: read the pause flag of %s: %w", b.q.keys.Stream, err)
	}
	return nil, rdb.ErrPaused
}

// putBack leaves entries just read, which must not start, pending for this
// consumer with their deliveries taken back (one script, which takes
// nothing back while the queue is paused), and makes the next fetch look
// for them: adopt takes them back uncharged once the queue runs.
func (b *streamBackend) putBack(ctx context.Context, ds []engine.Delivery) {
	b.scanNow = true
	if len(ds) == 0 {
		return
	}
	ids := make([]string, len(ds))
	for i := range ds {
		ids[i] = ds[i].ID
	}
	ctx, cancel := handBackContext(ctx)
	defer cancel()
	if _, _, err := b.q.db.Adopt(ctx, rdb.AdoptParams{Consumer: b.c.cfg.Name, IDs: ids}); err != nil && !errors.Is(err, rdb.ErrPaused) {
		b.c.run.Mon.Log.WarnContext(ctx, "streamq: cannot take back the deliveries of jobs read during a pause; they run later, counted as crashed once", "count", len(ids), "error", err)
	}
}

// handBackTimeout bounds the calls that settle what a read delivered after
// the run's context may have ended (see handBackContext).
const handBackTimeout = 5 * time.Second

// handBackContext returns a context for a call that must still be made
// once Redis delivered entries, even if ctx ended meanwhile (a worker that
// stops or quiesces): without it the entries stay counted as started by a
// worker that never started them, and an attempt is charged without a
// start (guarantee 6). It keeps ctx's values, not its cancellation, and
// ends after handBackTimeout.
func handBackContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), handBackTimeout)
}

// blockFor returns how long a read may wait for new entries: at most wait,
// and no longer than until the reaper or the look for entries of lost
// read replies is due.
func (b *streamBackend) blockFor(wait time.Duration) time.Duration {
	now := b.q.db.Now()
	block := min(wait, b.scanAt.Sub(now))
	if b.c.cfg.ReclaimInterval > 0 {
		block = min(block, b.reclaimAt.Sub(now))
	}
	return block
}

// WaitForWork waits, without reading anything for the group, until the
// stream holds an entry after the group's last delivered one (one the
// group has not read), for at most wait and no longer than until the
// reaper or the look for entries of lost read replies is due (see
// engine.Waiter). The group's position only moves forward, and only past
// entries that were delivered, so an entry added since the last read is
// never missed.
func (b *streamBackend) WaitForWork(ctx context.Context, wait time.Duration) error {
	block := b.blockFor(wait)
	if block < time.Millisecond {
		return nil
	}
	groups, err := b.q.client.XInfoGroups(ctx, b.q.keys.Stream).Result()
	if err != nil {
		if ctx.Err() != nil || rdb.IsNoSuchKey(err) {
			return nil // the next read recreates the stream and its group
		}
		return fmt.Errorf("streamq: xinfo groups %s: %w", b.q.keys.Stream, err)
	}
	from := ""
	for _, g := range groups {
		if g.Name == b.q.group {
			from = g.LastDeliveredID
		}
	}
	if from == "" {
		return nil // the group is gone: the next read recreates it
	}
	err = b.q.client.XRead(ctx, &redis.XReadArgs{Streams: []string{b.q.keys.Stream, from}, Count: 1, Block: block}).Err()
	if err == nil || errors.Is(err, redis.Nil) || ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("streamq: wait for entries of %s: %w", b.q.keys.Stream, err)
}

// reclaim runs one step of the reaper's pass over the pending list: it
// takes over up to n entries idle for MinIdle (their consumer crashed, hung
// or lost its connection) without counting a delivery, and settles entries
// whose data was deleted. It reports done when the pass reached the end.
// A call whose reply was lost is sent again with the same token, which
// returns the same entries.
func (b *streamBackend) reclaim(ctx context.Context, n int, owns func(string) bool) ([]engine.Delivery, bool, error) {
	c := b.c
	tok := b.claimToken
	if tok == "" {
		b.claims++
		tok = strconv.FormatUint(b.claims, 36)
	}
	memo := max(2*c.cfg.MinIdle, time.Minute)
	next, jobs, deleted, err := b.q.db.Reclaim(ctx, rdb.ReclaimParams{Consumer: c.cfg.Name,
		MinIdle: c.cfg.MinIdle, Cursor: b.cursor, Count: min(n, reclaimBatch), Token: tok, MemoTTL: memo})
	if err != nil {
		if rdb.IsNoGroup(err) {
			b.cursor = "0-0"
			return nil, true, nil // the fetch recreates the group
		}
		b.claimToken = tok
		return nil, false, fmt.Errorf("streamq: reclaim from %s: %w", b.q.keys.Stream, err)
	}
	b.claimToken = ""
	b.cursor = next
	if len(deleted) > 0 {
		b.settleDeleted(ctx, deleted)
	}
	var ds []engine.Delivery
	for _, j := range jobs {
		if owns(j.ID) {
			// Our own job whose claim went stale (for example Redis was
			// unreachable for MinIdle); it is still held here.
			continue
		}
		c.run.Mon.Event(ctx, engine.Event{Kind: engine.EventReclaimed, ID: j.ID})
		c.run.Mon.Log.InfoContext(ctx, "streamq: took over an abandoned job", "msg_id", j.ID, "crashed_runs", j.Count)
		ds = append(ds, engine.Delivery{Key: j.ID, ID: j.ID, Fields: j.Fields, Prior: j.Count,
			Suspect: j.Count > 0 || wire.Crashed(j.Fields)})
	}
	return ds, next == "0-0", nil
}

// adopt takes back entries that a read delivered to this consumer whose
// reply never arrived: the connection broke after Redis sent it, and the
// client sent the read again (go-redis does so by default). They are
// pending for this consumer, were read during this run (their IDs are past
// the boundary), and the engine does not hold them. Their handlers never
// started, so they are taken back uncharged.
func (b *streamBackend) adopt(ctx context.Context, n int, owns func(string) bool) ([]engine.Delivery, error) {
	var orphans []string
	seen := make(map[string]struct{})
	start := "(" + b.boundary
	for range maxAdoptScan {
		page, err := b.q.client.XPendingExt(ctx, &redis.XPendingExtArgs{
			Stream: b.q.keys.Stream, Group: b.q.group, Start: start, End: "+", Count: adoptPage, Consumer: b.c.cfg.Name,
		}).Result()
		if err != nil {
			if rdb.IsNoGroup(err) {
				return nil, nil
			}
			return nil, fmt.Errorf("streamq: xpending %s: %w", b.q.keys.Stream, err)
		}
		for _, p := range page {
			seen[p.ID] = struct{}{}
			if !owns(p.ID) && !b.skipped(p.ID) && len(orphans) < n {
				orphans = append(orphans, p.ID)
			}
		}
		if len(page) < adoptPage {
			b.forgetSkipped(seen)
			break
		}
		start = "(" + page[len(page)-1].ID
	}
	if len(orphans) == 0 {
		return nil, nil
	}
	jobs, deleted, err := b.q.db.Adopt(ctx, rdb.AdoptParams{Consumer: b.c.cfg.Name, IDs: orphans})
	if errors.Is(err, rdb.ErrPaused) {
		return nil, err // the caller looks again after the resume
	}
	if err != nil {
		return nil, fmt.Errorf("streamq: take back unseen entries of %s: %w", b.q.keys.Stream, err)
	}
	if len(deleted) > 0 {
		b.settleDeleted(ctx, deleted)
	}
	ds := make([]engine.Delivery, 0, len(jobs))
	for _, j := range jobs {
		ds = append(ds, engine.Delivery{Key: j.ID, ID: j.ID, Fields: j.Fields, Suspect: wire.Crashed(j.Fields)})
	}
	if len(ds) > 0 {
		b.c.run.Mon.Log.InfoContext(ctx, "streamq: took back jobs delivered by a read whose reply was lost", "count", len(ds))
	}
	return ds, nil
}

func (b *streamBackend) skipped(id string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.skip[id]
	return ok
}

// forgetSkipped drops given-up entries that are no longer pending for this
// consumer (taken over or settled), once a look saw all of them.
func (b *streamBackend) forgetSkipped(pending map[string]struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for id := range b.skip {
		if _, ok := pending[id]; !ok {
			delete(b.skip, id)
		}
	}
}

// Abandon leaves an entry the engine gave up on to the reaper.
func (b *streamBackend) Abandon(key string) {
	b.mu.Lock()
	b.skip[key] = struct{}{}
	b.mu.Unlock()
}

// settleDeleted acknowledges pending entries whose data is gone, so they
// leave the pending list, and reports them: a job was lost by someone
// deleting or trimming unacknowledged entries, which must never pass
// silently. (XAUTOCLAIM already drops them from the pending list.)
func (b *streamBackend) settleDeleted(ctx context.Context, ids []string) {
	c := b.c
	c.run.Mon.Log.ErrorContext(ctx, "streamq: pending entries were deleted from the stream before they were processed; their jobs are lost",
		"count", len(ids), "msg_ids", ids)
	for _, id := range ids {
		c.run.Mon.Event(ctx, engine.Event{Kind: engine.EventDeleted, ID: id})
	}
	if err := b.q.client.XAck(ctx, b.q.keys.Stream, b.q.group, ids...).Err(); err != nil {
		c.run.Mon.Log.WarnContext(ctx, "streamq: cannot acknowledge deleted entries", "error", err)
	}
}

// Charge sets the entry's delivery counter to its handler starts: Prior,
// plus the coming one when charge is true.
func (b *streamBackend) Charge(ctx context.Context, d *engine.Delivery, charge bool) (bool, error) {
	count := d.Prior
	if charge {
		count++
	}
	return b.q.db.Charge(ctx, rdb.ChargeParams{Consumer: b.c.cfg.Name, ID: d.Key, Count: count})
}

// Touch keeps the claims of held entries fresh.
func (b *streamBackend) Touch(ctx context.Context, keys []string) ([]string, error) {
	return b.q.db.Touch(ctx, rdb.TouchParams{Consumer: b.c.cfg.Name, IDs: keys})
}

// Finish acknowledges finished jobs and releases their unique-key locks.
func (b *streamBackend) Finish(ctx context.Context, done []engine.Finished) error {
	p := rdb.AckParams{IDs: append(b.acks[:0], make([]string, len(done))...)}
	defer func() { clear(p.IDs); b.acks = p.IDs[:0] }()
	for i, f := range done {
		p.IDs[i] = f.Key
		if f.Moved != "" {
			p.JobIDs = append(p.JobIDs, f.Moved)
		}
		if f.Lock != "" {
			p.Keys = append(p.Keys, f.Lock)
			p.Tokens = append(p.Tokens, f.Token)
		}
	}
	if b.flow.Load() {
		p.Flow = b.c.cfg.Name
	}
	if b.q.db.KeepsCompleted() {
		p.Completed = completedJobs(done)
	}
	return b.q.db.Ack(ctx, &p)
}

// Move writes the job again: into the delayed set when delay > 0, else at
// the end of the stream.
func (b *streamBackend) Move(ctx context.Context, d *engine.Delivery, fields []any, delay time.Duration, st rdb.Settle) (bool, error) {
	return b.q.db.Move(ctx, rdb.MoveParams{Consumer: b.c.cfg.Name, ID: d.Key, Delay: delay, Settle: st, Fields: fields, Flow: b.flow.Load()})
}

// DeadLetter moves the entry to the dead-letter stream.
func (b *streamBackend) DeadLetter(ctx context.Context, d *engine.Delivery, lock, token string, st rdb.Settle, fields []any) (string, error) {
	return b.q.db.DeadLetter(ctx, rdb.DeadLetterParams{Consumer: b.c.cfg.Name, ID: d.Key, Key: lock, Token: token, Settle: st, Fields: fields, Flow: b.flow.Load()})
}

// DropCancels removes cancel requests of jobs no longer pending in the
// group.
func (b *streamBackend) DropCancels(ctx context.Context, ids []string) error {
	_, err := b.q.db.DropCancels(ctx, ids)
	return err
}

// Loops are the scheduler of delayed jobs and the pruning of departed
// consumers.
func (b *streamBackend) Loops() []engine.Loop {
	var loops []engine.Loop
	if b.c.cfg.SchedulerInterval > 0 {
		loops = append(loops, engine.Loop{Name: "move due jobs", Every: b.c.cfg.SchedulerInterval, Do: func(ctx context.Context) (bool, error) {
			n, dead, err := b.q.promote(ctx, schedulerBatch)
			for _, id := range dead {
				b.c.run.Mon.Log.WarnContext(ctx, "streamq: a delayed job's data is corrupt; it was dead-lettered instead of moved into the stream",
					"msg_id", id, "reason", ReasonMalformed)
				b.c.run.Mon.Event(ctx, engine.Event{Kind: engine.EventDeadLettered, ID: id, Reason: ReasonMalformed, Err: ErrMalformed})
			}
			return n == schedulerBatch, err
		}})
	}
	if every := b.flowSweepEvery(); every > 0 {
		loops = append(loops, engine.Loop{Name: "sweep flow slots", Every: every, Do: b.sweepFlow})
	}
	if b.c.cfg.ReclaimInterval > 0 && b.c.cfg.PruneIdle > 0 {
		loops = append(loops, engine.Loop{Name: "prune consumers", Every: b.c.cfg.ReclaimInterval, Do: func(ctx context.Context) (bool, error) {
			return false, b.prune(ctx)
		}})
	}
	return loops
}

// prune deletes consumers of the group that have been idle for PruneIdle
// and own no pending entry (their processes are gone), in one script that
// checks and deletes atomically. This consumer is never deleted.
func (b *streamBackend) prune(ctx context.Context) error {
	gone, err := b.q.db.Prune(ctx, rdb.PruneParams{Idle: b.c.cfg.PruneIdle, Self: b.c.cfg.Name})
	if err != nil {
		if rdb.IsNoGroup(err) {
			return nil
		}
		return err
	}
	if len(gone) > 0 {
		b.c.run.Mon.Log.InfoContext(ctx, "streamq: removed departed consumers from the group", "count", len(gone), "consumers", gone)
	}
	return nil
}

// Wake does nothing: a blocked read ends within Block.
func (b *streamBackend) Wake() {}

// promote moves up to limit jobs due now (by the queue's clock) from the
// delayed set into the stream and returns how many due jobs it handled,
// and the delayed-set IDs of those it dead-lettered because their data was
// corrupt. Any number of consumers may run it; the script moves each job
// exactly once.
func (q *Queue) promote(ctx context.Context, limit int) (int, []string, error) {
	return q.db.Promote(ctx, rdb.PromoteParams{Limit: limit, Reason: ReasonMalformed})
}
