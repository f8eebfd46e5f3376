package priority

import (
	"context"
	"fmt"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/rdb"
	"github.com/streamq/streamq/internal/wire"
)

// Forward returns a [streamq.Handler] for a [streamq.Consumer] of pq's stream
// queue that moves every stream job into pq's priority set, at the priority
// of its [HeaderPriority] header (see [WithPriority]; without the header,
// QueueConfig.DefaultPriority). The job keeps its payload, headers, enqueue
// time, attempts, last error and ID ([streamq.Message.ID]); its job ID in
// the priority set is its stream entry ID (Message.EntryID).
//
// The move is one Lua script that adds the job to the priority set and
// acknowledges (XACK) its stream entry, and does nothing if the entry is no
// longer pending: it was forwarded before. So a crash between reading the
// entry and forwarding it leaves the entry pending (the stream consumer's
// reaper hands it over, and it is forwarded then), a crash after the script
// leaves nothing to redo, and no retry can forward a job twice (neither the
// consumer retrying after a lost reply nor another consumer that took the
// entry over). The consumer's own acknowledgement of the handled entry
// follows and is a harmless second XACK.
//
// The consumer must read pq's queue (same queue name and group); a job of
// another queue fails with [ErrWrongQueue], and a job whose priority header
// is not a priority fails with [ErrInvalidPriority], both wrapped in
// [streamq.Permanent], so the consumer dead-letters them with the reason.
func Forward(pq *Queue) streamq.Handler {
	return streamq.HandlerFunc(func(ctx context.Context, msg *streamq.Message) error {
		return pq.forward(ctx, msg)
	})
}

func (pq *Queue) forward(ctx context.Context, msg *streamq.Message) error {
	if msg.Queue != pq.core.Name {
		return streamq.Permanent(fmt.Errorf("%w: job %s of queue %q cannot be forwarded into the priority set of queue %q: run priority.Forward on a consumer of its own queue",
			ErrWrongQueue, msg.ID, msg.Queue, pq.core.Name))
	}
	p := pq.cfg.DefaultPriority
	if s, ok := msg.Headers[HeaderPriority]; ok {
		var err error
		if p, err = parsePriority(s); err != nil {
			return streamq.Permanent(fmt.Errorf("job %s: header %s: %w", msg.ID, HeaderPriority, err))
		}
	}
	// The job's fields as enqueued: this run is not an attempt of the job
	// (the forwarder ran, not the job's handler), so it is not charged;
	// earlier attempts and the last error are kept. The priority is kept in
	// the job's score.
	wj := wire.Job{
		Payload:   msg.Payload,
		Headers:   msg.Headers,
		EnqMillis: wire.Millis(msg.EnqueuedAt),
		Attempt:   max(msg.Attempt-1, 0),
		FirstFail: wire.Millis(msg.FirstFailedAt),
		LastError: msg.LastError,
		Opts:      pq.core.MessageOpts(msg),
	}
	entry := msg.EntryID
	if entry == "" { // a Message made by hand: one ID for both
		entry = msg.ID
	}
	if msg.ID != entry {
		wj.JobID = msg.ID // the job keeps its ID (see streamq.Message.ID)
	}
	if err := pq.db.Forward(ctx, rdb.ForwardParams{ID: entry, JobID: wj.JobID, Score: pq.score(p), Data: wire.Pack(wj.Args())}); err != nil {
		return fmt.Errorf("priority: forward %s into %s: %w", msg.ID, pq.keys.Ready, err)
	}
	return nil
}
