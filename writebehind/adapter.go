package writebehind

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/streamq/streamq"
)

// Handler defaults. A zero HandlerConfig field takes these values.
const (
	// DefaultMaxBatch is the number of changes that makes a batch full.
	DefaultMaxBatch = 500
	// DefaultMaxBatchBytes is the size, in key and value bytes, that makes a
	// batch full (64 MiB): far below PostgreSQL's 1 GB limit on a message,
	// and a bound on the memory a batch holds.
	DefaultMaxBatchBytes = 64 << 20
	// DefaultMaxLatency is how long a batch waits for more changes after its
	// first one before it is written.
	DefaultMaxLatency = 50 * time.Millisecond
	// DefaultWriteTimeout bounds one Sink.Write call.
	DefaultWriteTimeout = 30 * time.Second
)

var (
	// ErrMalformedChange marks a stream entry whose write-behind headers
	// (see [HeaderKey], [HeaderOp], [HeaderVersion]) are missing or invalid.
	// [Handler.Handle] returns it wrapped in [streamq.Permanent], so the entry
	// is dead-lettered with the reason.
	ErrMalformedChange = errors.New("streamq: malformed write-behind change")

	// ErrClosed is returned by [Handler.Handle] after [Handler.Close]. It is
	// an ordinary error, so the consumer retries the change later (with
	// another Handler, for example after a restart).
	ErrClosed = errors.New("streamq: write-behind handler is closed")
)

// HandlerConfig configures a [Handler]. The zero value is valid.
type HandlerConfig struct {
	// MaxBatch is the number of changes at which a batch is written at once,
	// without waiting for MaxLatency. A batch holds at most as many changes
	// as the consumer runs handlers at once, so set
	// streamq.ConsumerConfig.Concurrency to at least MaxBatch (twice MaxBatch
	// lets the next batch fill while one is written). 1 writes every change
	// in its own Sink.Write call. Defaults to DefaultMaxBatch.
	MaxBatch int

	// MaxBatchBytes bounds a batch by size: the sum of its changes' key and
	// value lengths. A change that would take the batch past it goes into
	// the next batch, and a batch is written at once when it reaches it, so
	// one Sink.Write gets at most MaxBatchBytes, or a single change that is
	// larger on its own. It bounds the memory of a batch and the size of a
	// transaction (500 changes of MaxValueBytes would be 8 GiB; PostgreSQL
	// refuses messages over 1 GB, though [SQLSink] splits its statements
	// anyway). Defaults to DefaultMaxBatchBytes.
	MaxBatchBytes int

	// MaxLatency is how long a batch collects changes after its first one
	// before it is written, if it does not fill up first. It bounds the delay
	// that batching adds to persisting a change. Defaults to
	// DefaultMaxLatency.
	MaxLatency time.Duration

	// WriteTimeout bounds one Sink.Write call: its context is cancelled after
	// this long and the batch counts as failed (and is retried by the
	// consumer). Defaults to DefaultWriteTimeout.
	WriteTimeout time.Duration

	// OnFlush, if set, is called by the flusher goroutine after each batch
	// was written or failed, once the batch's Handle calls have their result
	// and [Handler.Stats] counts the batch. Use it for metrics, logs, or to
	// wait for persistence in tests. It must be quick and must not panic: the
	// next batch waits for it. Defaults to nil.
	OnFlush func(FlushInfo)

	// Writer, if set, is the Writer whose changes the Handler persists (on
	// the same queue), and the sink must be a [VersionedSink] such as
	// [SQLSink]. When the sink refuses changes with [ErrVersionRegressed]
	// because the version counter went backwards, the Handler then repairs
	// it at once instead of dead-lettering them: it raises the counter to
	// the sink's highest version ([Writer.EnsureVersionAtLeast] with
	// MaxVersion), then queues each refused key's cached value again with a
	// new version ([Writer.Resync]), and returns nil for the refused changes,
	// which the resynced value supersedes. A refused key that is no longer
	// cached cannot be resynced: its changes are dead-lettered with the
	// reason. When raising or resyncing fails, the changes return the error
	// and are retried. Repairs are logged with Logger and counted in
	// HandlerStats.Resynced. Defaults to nil: refused changes are
	// dead-lettered (see docs/writebehind.md for the repair by hand).
	Writer *Writer

	// Logger logs the repairs of a counter that went backwards (see Writer),
	// at level Warn. Defaults to slog.Default().
	Logger *slog.Logger
}

// FlushInfo describes one batch written by a [Handler], for
// HandlerConfig.OnFlush.
type FlushInfo struct {
	// Changes is the number of changes in the batch (those whose Handle
	// context ended before the write are not counted).
	Changes int
	// Rows is the number of changes passed to the sink after coalescing by
	// key, minus those the sink refused.
	Rows int
	// Rejected is the number of changes the sink refused with a
	// [*ChangeError]; they fail permanently.
	Rejected int
	// Resynced is the number of changes the sink refused with
	// [ErrVersionRegressed] whose keys the Handler resynced from the cache
	// (see HandlerConfig.Writer); they succeeded.
	Resynced int
	// Bytes is the size of the rows passed to the sink: the sum of their key
	// and value lengths (see HandlerConfig.MaxBatchBytes).
	Bytes int
	// Duration is the time spent in Sink.Write.
	Duration time.Duration
	// Err is the error of the write, nil when the batch was committed.
	Err error
}

// HandlerStats are a [Handler]'s counters since it was created.
type HandlerStats struct {
	// Changes is the number of changes in committed batches, coalesced ones
	// included: their Handle calls returned nil (unless their context ended
	// while the batch was being written).
	Changes int64
	// Rows is the number of changes passed to successful Sink.Write calls,
	// after coalescing by key. Changes - Rows changes were coalesced away.
	Rows int64
	// Batches is the number of successful Sink.Write calls.
	Batches int64
	// WriteErrors is the number of failed Sink.Write calls. Their changes
	// returned the error, so the consumer retries them.
	WriteErrors int64
	// Rejected is the number of changes refused for good: malformed entries
	// and changes the sink refused with a [*ChangeError] (unless they were
	// resynced, see Resynced). They returned a [streamq.Permanent] error, so
	// the consumer dead-lettered them.
	Rejected int64
	// Withdrawn is the number of changes whose Handle context ended before
	// their batch was written; they were taken out of the batch unwritten.
	Withdrawn int64
	// Resynced is the number of changes refused with [ErrVersionRegressed]
	// that the Handler repaired by resyncing their keys from the cache (see
	// HandlerConfig.Writer). They returned nil.
	Resynced int64
	// Waiting is the number of Handle calls waiting for their batch to be
	// written right now (a gauge, not a counter).
	Waiting int64
}

// Handler is a [streamq.Handler] that persists the changes queued by a
// [Writer] into a [Sink] in batches.
//
// Each Handle call decodes the change of its message, adds it to the batch
// being collected and blocks until that batch has been written. A batch is
// written, by one flusher goroutine owned by the Handler, when it holds
// MaxBatch changes or MaxLatency after its first change, whichever comes
// first. Changes of one key in a batch are coalesced: only the one with the
// newest version is passed to Sink.Write. When Sink.Write commits, every Handle
// call of the batch (coalesced ones too) returns nil and the consumer
// acknowledges their entries; when it fails, they all return the error and
// the consumer retries them with backoff, dead-lettering them after
// MaxDeliveries attempts.
//
// Batches can only be as large as the number of Handle calls running at once,
// so run the consumer with Concurrency >= MaxBatch (see HandlerConfig). Give
// write-behind changes a queue of their own: to a Handler, any other job is
// malformed and is dead-lettered.
// Malformed entries and changes the sink refuses with a [*ChangeError] return
// a [streamq.Permanent] error and are dead-lettered; the rest of their batch is
// written. A refusal wrapping [ErrVersionRegressed] (the version counter went
// backwards) is repaired instead when HandlerConfig.Writer is set. Changes of
// one key that contradict each other in a batch (see [VersionRegressed]) are
// refused in the same way, rather than coalesced.
//
// When the context of a Handle call ends (job timeout, shutdown deadline,
// claim lost) before its batch is written, its change is taken out of the
// batch and Handle returns the context's cause: the change is not written and
// the consumer retries it. When the context ends while its batch is being
// written, Handle returns at once with the cause; the write may still commit.
// That change is then written and also retried, which is harmless: a sink
// never lets a change overwrite a row of the same or a newer version.
//
// The flusher goroutine starts with the first Handle call. Call
// [Handler.Close] after the consumer's Run has returned to write what is left
// and stop it.
type Handler struct {
	sink Sink
	cfg  HandlerConfig

	mu      sync.Mutex
	cur     *batch   // batch collecting changes, or nil
	sealed  []*batch // full or due batches waiting for the flusher, oldest first
	started bool     // the flusher goroutine was started
	closed  bool

	wake chan struct{} // capacity 1: something changed for the flusher
	done chan struct{} // closed when the flusher returns

	changes, rows, batches, writeErrors, rejected, withdrawn, resynced, waiting atomic.Int64
}

// batch is a group of changes written by one Sink.Write call. Its fields are
// guarded by Handler.mu until it is sealed; after that only the flusher
// touches it, until it closes done.
type batch struct {
	items    []*item
	live     int       // items not withdrawn
	bytes    int       // size of the items not withdrawn (Change.size)
	deadline time.Time // first change + MaxLatency
	sealed   bool
	done     chan struct{} // closed when every item's err is final
}

// item is one Handle call's change.
type item struct {
	ch        Change
	withdrawn bool
	err       error // the Handle call's result, set before batch.done closes
}

// NewHandler returns a handler that writes changes to sink. cfg may be nil.
// It copies cfg, applies defaults and validates it.
func NewHandler(sink Sink, cfg *HandlerConfig) (*Handler, error) {
	if sink == nil {
		return nil, &streamq.ConfigError{Field: "sink", Reason: "sink is nil: pass a writebehind.Sink such as the *SQLSink of sqlite.NewSink or postgres.NewSink"}
	}
	var c HandlerConfig
	if cfg != nil {
		c = *cfg
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = DefaultMaxBatch
	}
	if c.MaxBatch < 0 {
		return nil, &streamq.ConfigError{Field: "HandlerConfig.MaxBatch", Reason: fmt.Sprintf("%d is negative: use a positive number of changes per batch, or 0 for %d", c.MaxBatch, DefaultMaxBatch)}
	}
	if c.MaxBatchBytes == 0 {
		c.MaxBatchBytes = DefaultMaxBatchBytes
	}
	if c.MaxBatchBytes < 0 {
		return nil, &streamq.ConfigError{Field: "HandlerConfig.MaxBatchBytes", Reason: fmt.Sprintf("%d is negative: use a positive number of bytes per batch, or 0 for %d (64 MiB)", c.MaxBatchBytes, DefaultMaxBatchBytes)}
	}
	if c.MaxLatency == 0 {
		c.MaxLatency = DefaultMaxLatency
	}
	if c.MaxLatency < 0 {
		return nil, &streamq.ConfigError{Field: "HandlerConfig.MaxLatency", Reason: fmt.Sprintf("%s is negative: use a positive duration, or 0 for %s", c.MaxLatency, DefaultMaxLatency)}
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = DefaultWriteTimeout
	}
	if c.WriteTimeout < 0 {
		return nil, &streamq.ConfigError{Field: "HandlerConfig.WriteTimeout", Reason: fmt.Sprintf("%s is negative: use a positive duration, or 0 for %s", c.WriteTimeout, DefaultWriteTimeout)}
	}
	if _, ok := sink.(VersionedSink); c.Writer != nil && !ok {
		return nil, &streamq.ConfigError{Field: "HandlerConfig.Writer", Reason: fmt.Sprintf("the sink (%T) is not a writebehind.VersionedSink: raising the version counter needs its MaxVersion; use an *SQLSink, add MaxVersion to the sink, or leave Writer nil", sink)}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return &Handler{
		sink: sink,
		cfg:  c,
		wake: make(chan struct{}, 1),
		done: make(chan struct{}),
	}, nil
}

// Stats returns the handler's counters.
func (h *Handler) Stats() HandlerStats {
	return HandlerStats{
		Changes:     h.changes.Load(),
		Rows:        h.rows.Load(),
		Batches:     h.batches.Load(),
		WriteErrors: h.writeErrors.Load(),
		Rejected:    h.rejected.Load(),
		Withdrawn:   h.withdrawn.Load(),
		Resynced:    h.resynced.Load(),
		Waiting:     h.waiting.Load(),
	}
}

// FromMessage decodes the change carried by a stream entry that a [Writer]
// appended. The error wraps [ErrMalformedChange] and says what is wrong; a
// change that decodes but that no sink would accept (see [Change.Validate])
// returns that [*ChangeError].
func FromMessage(msg *streamq.Message) (Change, error) {
	if msg == nil {
		return Change{}, fmt.Errorf("%w: message is nil", ErrMalformedChange)
	}
	key, ok := msg.Headers[HeaderKey]
	if !ok {
		return Change{}, fmt.Errorf("%w: header %q is missing: the entry was not written by a writebehind.Writer", ErrMalformedChange, HeaderKey)
	}
	v := msg.Headers[HeaderVersion]
	version, err := strconv.ParseInt(v, 10, 64)
	if err != nil || version <= 0 {
		return Change{}, fmt.Errorf("%w: header %q is %q, want a positive integer", ErrMalformedChange, HeaderVersion, v)
	}
	ch := Change{Key: key, Version: version}
	if v, ok := msg.Headers[HeaderIssued]; ok {
		ch.Issued, err = strconv.ParseInt(v, 10, 64)
		if err != nil || ch.Issued < 0 {
			return Change{}, fmt.Errorf("%w: header %q is %q, want microseconds since the Unix epoch", ErrMalformedChange, HeaderIssued, v)
		}
	}
	switch op := msg.Headers[HeaderOp]; op {
	case OpSet:
		ch.Value = msg.Payload
		if ch.Value == nil {
			ch.Value = []byte{}
		}
	case OpSetFields:
		if _, reason := decodeFields(msg.Payload); reason != "" {
			return Change{}, fmt.Errorf("%w: a %q change's payload must hold the hash's fields: %s", ErrMalformedChange, OpSetFields, reason)
		}
		ch.Value, ch.Hash = msg.Payload, true
	case OpDelete:
		if len(msg.Payload) > 0 {
			return Change{}, fmt.Errorf("%w: a %q change has a %d-byte payload, want none", ErrMalformedChange, OpDelete, len(msg.Payload))
		}
		ch.Deleted = true
	default:
		return Change{}, fmt.Errorf("%w: header %q is %q, want %q, %q or %q", ErrMalformedChange, HeaderOp, op, OpSet, OpSetFields, OpDelete)
	}
	if err := ch.Validate(); err != nil {
		return Change{}, err
	}
	return ch, nil
}

// Handle adds the change of msg to the current batch and waits until the
// batch has been written. It returns nil when the sink committed it; the
// sink's error when the write failed; a [streamq.Permanent] error when msg
// does not carry a valid change (see [FromMessage]) or the sink refused it
// with a [*ChangeError]; the cause of ctx when ctx ended first (see
// [Handler] for what that means for the change); and [ErrClosed] after
// [Handler.Close].
func (h *Handler) Handle(ctx context.Context, msg *streamq.Message) error {
	ch, err := FromMessage(msg)
	if err != nil {
		h.rejected.Add(1)
		return streamq.Permanent(err)
	}
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	it := &item{ch: ch}
	b, err := h.add(it)
	if err != nil {
		return err
	}
	h.waiting.Add(1)
	defer h.waiting.Add(-1)
	select {
	case <-b.done:
		return it.err
	case <-ctx.Done():
	}
	h.mu.Lock()
	if !b.sealed {
		it.withdrawn = true
		b.live--
		b.bytes -= ch.size()
		h.mu.Unlock()
		h.withdrawn.Add(1)
		return fmt.Errorf("streamq: write-behind change %q version %d withdrawn from its batch before the write: %w", ch.Key, ch.Version, context.Cause(ctx))
	}
	h.mu.Unlock()
	// The batch is being written. Its result may have arrived meanwhile.
	select {
	case <-b.done:
		return it.err
	default:
	}
	return fmt.Errorf("streamq: write-behind change %q version %d: stopped waiting for its batch, which may still be committed (harmless: versions keep the newest): %w", ch.Key, ch.Version, context.Cause(ctx))
}

// add puts it into the current batch, starting a batch (and the flusher)
// when needed, and seals the batch when it is full.
func (h *Handler) add(it *item) (*batch, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, ErrClosed
	}
	if !h.started {
		h.started = true
		go h.flushLoop()
	}
	size := it.ch.size()
	b := h.cur
	if b != nil && b.live > 0 && b.bytes+size > h.cfg.MaxBatchBytes {
		// The change would make the batch too large: write it without.
		h.sealLocked(b)
		h.signal()
		b = nil
	}
	if b == nil {
		b = &batch{deadline: time.Now().Add(h.cfg.MaxLatency), done: make(chan struct{})}
		h.cur = b
		h.signal()
	}
	b.items = append(b.items, it)
	b.live++
	b.bytes += size
	if b.live >= h.cfg.MaxBatch || b.bytes >= h.cfg.MaxBatchBytes {
		h.sealLocked(b)
		h.signal()
	}
	return b, nil
}

// sealLocked closes b to new changes and queues it for the flusher. h.mu
// must be held and b must be h.cur.
func (h *Handler) sealLocked(b *batch) {
	b.sealed = true
	h.cur = nil
	h.sealed = append(h.sealed, b)
}

// signal wakes the flusher without blocking.
func (h *Handler) signal() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// Close stops accepting changes, writes the batch being collected and every
// batch waiting to be written, and returns once the flusher goroutine has
// returned. Call it after the consumer's Run returned: Handle calls made
// after Close return [ErrClosed]. Close is idempotent and always returns nil;
// a write that fails during Close is reported to its Handle calls.
func (h *Handler) Close() error {
	h.mu.Lock()
	h.closed = true
	started := h.started
	h.mu.Unlock()
	if started {
		h.signal()
		<-h.done
	}
	return nil
}

// flushLoop is the flusher goroutine: it writes sealed batches in order, and
// seals the current batch when its deadline passes or the handler closes.
// Every iteration either writes a batch, seals one, or waits for a signal or
// a deadline, so it never spins.
func (h *Handler) flushLoop() {
	defer close(h.done)
	timer := time.NewTimer(h.cfg.MaxLatency)
	timer.Stop()
	defer timer.Stop()
	for {
		h.mu.Lock()
		if len(h.sealed) > 0 {
			b := h.sealed[0]
			h.sealed[0] = nil
			h.sealed = h.sealed[1:]
			h.mu.Unlock()
			h.write(b)
			continue
		}
		cur, closed := h.cur, h.closed
		if cur != nil && (closed || !time.Now().Before(cur.deadline)) {
			h.sealLocked(cur)
			h.mu.Unlock()
			continue
		}
		h.mu.Unlock()
		switch {
		case cur == nil && closed:
			return
		case cur == nil:
			<-h.wake
		default:
			timer.Reset(time.Until(cur.deadline))
			select {
			case <-timer.C:
			case <-h.wake:
				timer.Stop()
			}
		}
	}
}

// write writes a sealed batch and settles its items. Changes of one key are
// coalesced to the newest. A change the sink refuses with a *ChangeError
// fails permanently, with every change of its key in the batch, and the rest
// is written again without them; a refusal wrapping ErrVersionRegressed is
// repaired instead when HandlerConfig.Writer is set (see repair).
func (h *Handler) write(b *batch) {
	live := make([]*item, 0, b.live)
	changes := make([]Change, 0, b.live)
	for _, it := range b.items {
		if !it.withdrawn {
			live = append(live, it)
			changes = append(changes, it.ch)
		}
	}
	keep, contradicting := newestPerKey(changes)
	rows := make([]Change, len(keep))
	for i, k := range keep {
		rows[i] = changes[k]
	}
	refused := make(map[string]*ChangeError) // by key, the first refusal
	for _, ce := range contradicting {
		if _, dup := refused[ce.Key]; !dup {
			refused[ce.Key] = ce
		}
	}
	var err error
	start := time.Now()
	// Bounded: each round either ends the loop or removes at least one row.
	for len(rows) > 0 {
		err = h.safeWrite(rows)
		drop := make(map[int]bool)
		for _, ce := range changeErrors(err) {
			if ce.Index < 0 || ce.Index >= len(rows) {
				continue
			}
			drop[ce.Index] = true
			if k := rows[ce.Index].Key; refused[k] == nil {
				refused[k] = ce
			}
		}
		if err == nil || len(drop) == 0 {
			break
		}
		kept := rows[:0]
		for i, row := range rows {
			if !drop[i] {
				kept = append(kept, row)
			}
		}
		rows, err = kept, nil
	}
	took := time.Since(start)
	if err != nil {
		h.writeErrors.Add(1)
		err = fmt.Errorf("streamq: write-behind batch of %d changes (%d keys): %w", b.live, len(rows), err)
	} else if len(rows) > 0 {
		h.batches.Add(1)
		h.rows.Add(int64(len(rows)))
	}
	outcomes := h.refusals(refused)
	var rejected, resynced int
	for _, it := range live {
		o, isRefused := outcomes[it.ch.Key]
		switch {
		case !isRefused:
			it.err = err
			if err == nil {
				h.changes.Add(1)
			}
		case o.err == nil:
			resynced++
		case o.permanent:
			it.err = streamq.Permanent(o.err)
			rejected++
		default:
			it.err = o.err
		}
	}
	h.rejected.Add(int64(rejected))
	h.resynced.Add(int64(resynced))
	close(b.done)
	if h.cfg.OnFlush != nil && b.live > 0 {
		size := 0
		for _, row := range rows {
			size += row.size()
		}
		h.cfg.OnFlush(FlushInfo{Changes: b.live, Rows: len(rows), Rejected: rejected, Resynced: resynced, Bytes: size, Duration: took, Err: err})
	}
}

// outcome is the result of the changes of a refused key.
type outcome struct {
	err       error // nil: the key was repaired, the changes succeed
	permanent bool  // err is final: dead-letter the changes
}

// refusals decides the outcome of the changes of each refused key: a
// permanent failure with the refusal, or, for a version that regressed when
// HandlerConfig.Writer is set, the outcome of repair.
func (h *Handler) refusals(refused map[string]*ChangeError) map[string]outcome {
	out := make(map[string]outcome, len(refused))
	var regressed map[string]*ChangeError
	for key, ce := range refused {
		if h.cfg.Writer == nil || !errors.Is(ce, ErrVersionRegressed) {
			out[key] = outcome{err: ce, permanent: true}
			continue
		}
		if regressed == nil {
			regressed = make(map[string]*ChangeError)
		}
		regressed[key] = ce
	}
	if len(regressed) > 0 {
		h.repair(regressed, out)
	}
	return out
}

// repair raises HandlerConfig.Writer's version counter to the sink's highest
// version, then queues the cached value of each key in regressed again with
// a new version, which the sink applies and which supersedes the refused
// changes of the key (the cache holds the key's newest value, written with or
// after them). It sets each key's outcome in out: nil when resynced; a
// permanent failure when the key is not cached (deleted, expired or evicted:
// only a person can tell what the row should be); the error otherwise, so
// that the changes are retried and repaired later.
func (h *Handler) repair(regressed map[string]*ChangeError, out map[string]outcome) {
	ctx, cancel := context.WithTimeout(context.Background(), h.cfg.WriteTimeout)
	defer cancel()
	w := h.cfg.Writer
	floor, err := h.maxVersion(ctx)
	var previous int64
	if err == nil {
		previous, err = w.EnsureVersionAtLeast(ctx, floor)
	}
	if err != nil {
		for key, ce := range regressed {
			out[key] = outcome{err: fmt.Errorf("%w; raising the version counter failed: %w", ce, err)}
		}
		return
	}
	var resynced, missing int
	for key, ce := range regressed {
		_, found, err := w.Resync(ctx, key)
		switch {
		case err != nil:
			out[key] = outcome{err: fmt.Errorf("%w; the counter was raised to %d, but resyncing the key failed: %w", ce, floor, err)}
		case !found:
			missing++
			out[key] = outcome{permanent: true, err: &ChangeError{Index: ce.Index, Key: key, Err: ErrVersionRegressed,
				Reason: ce.Reason + "; the counter was raised, but the key is not in the cache (deleted, expired or evicted), so it could not be resynced: " +
					"write it again through the Writer (Delete it if it was deleted)"}}
		default:
			resynced++
			out[key] = outcome{}
		}
	}
	h.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "streamq: write-behind version counter went backwards: raised it to the sink's highest version and resynced the refused keys from the cache",
		slog.String("queue", w.Queue().Name()),
		slog.Int64("counter_before", previous),
		slog.Int64("sink_max_version", floor),
		slog.Int("resynced_keys", resynced),
		slog.Int("uncached_keys", missing),
		slog.Int("failed_keys", len(regressed)-resynced-missing))
}

// safeWrite calls Sink.Write with the write timeout and turns a panic into a
// *streamq.PanicError, so a panicking sink fails one batch instead of
// stopping the flusher.
func (h *Handler) safeWrite(rows []Change) (err error) {
	ctx, cancel := context.WithTimeout(context.Background(), h.cfg.WriteTimeout)
	defer cancel()
	defer func() {
		if r := recover(); r != nil {
			err = &streamq.PanicError{Value: r, Stack: debug.Stack()}
		}
	}()
	return h.sink.Write(ctx, rows)
}

// maxVersion calls the sink's MaxVersion and turns a panic into a
// *streamq.PanicError, as safeWrite does for Write.
func (h *Handler) maxVersion(ctx context.Context) (v int64, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &streamq.PanicError{Value: r, Stack: debug.Stack()}
		}
	}()
	return h.sink.(VersionedSink).MaxVersion(ctx)
}
