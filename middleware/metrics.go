package middleware

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"golang.org/x/sync/errgroup"

	"github.com/streamq/streamq"
)

// Metric instrument names. The Prometheus exporter turns the dots into
// underscores and adds unit and type suffixes, for example
// streamq_jobs_processed_total and streamq_job_duration_seconds.
const (
	MetricProcessed    = "streamq.jobs.processed"     // counter: handler returned nil
	MetricFailed       = "streamq.jobs.failed"        // counter: handler returned an error or panicked; attribute error.type
	MetricPostponed    = "streamq.jobs.postponed"     // counter: job handed back with streamq.Postpone, e.g. by the rate limit (OnEvent); not a failure
	MetricRetried      = "streamq.jobs.retried"       // counter: failed job scheduled for a retry (OnEvent)
	MetricDeadLettered = "streamq.jobs.dead_lettered" // counter: job moved to the dead-letter stream (OnEvent); attribute streamq.dead_letter.reason
	MetricReclaimed    = "streamq.jobs.reclaimed"     // counter: job taken over from a dead consumer (OnEvent)
	MetricDeleted      = "streamq.jobs.deleted"       // counter: pending entry found deleted from the stream, its job lost (OnEvent)
	MetricClaimsLost   = "streamq.jobs.claims_lost"   // counter: running job taken over by another consumer (OnEvent)
	MetricInFlight     = "streamq.jobs.in_flight"     // up-down counter: handlers running now
	MetricDuration     = "streamq.job.duration"       // histogram, seconds: handler duration; attribute error.type on failures
	MetricLatency      = "streamq.job.latency"        // histogram, seconds: enqueue to handler start, first attempts only
	MetricQueueLength  = "streamq.queue.length"       // gauge: jobs of the stream not finished: lag plus pending (the backlog)
	MetricQueuePending = "streamq.queue.pending"      // gauge: delivered, not yet acknowledged
	MetricQueueLag     = "streamq.queue.lag"          // gauge: not yet delivered to the group
	MetricQueueDelayed = "streamq.queue.delayed"      // gauge: scheduled or waiting for a retry
	MetricQueueDead    = "streamq.queue.dead_letters" // gauge: entries in the dead-letter stream
	// MetricQueueEntries is a gauge: entries in the queue's stream,
	// including acknowledged history not trimmed yet (what
	// MetricQueueLength counted before: memory, not backlog).
	MetricQueueEntries = "streamq.queue.stream_entries"
	// MetricQueueOldestWaiting is a gauge, seconds: age of the oldest job not
	// yet delivered to the group (0 when none waits), the number an on-call
	// person watches.
	MetricQueueOldestWaiting = "streamq.queue.oldest_waiting"
)

// Instrument names of the OpenTelemetry messaging semantic conventions
// (semconv 1.27 and later), recorded beside the streamq ones above. Their
// attributes are messaging.system, messaging.operation.name,
// messaging.destination.name, messaging.consumer.group.name (consumer side,
// when known) and error.type (failures only); see [Metrics].
const (
	// MetricProcessDuration is a histogram, in seconds: the duration of
	// every handler call (a processing operation), postponed ones included.
	MetricProcessDuration = "messaging.process.duration"
	// MetricConsumedMessages is a counter: jobs handed to a handler, counted
	// when the handler starts.
	MetricConsumedMessages = "messaging.client.consumed.messages"
	// MetricSentMessages is a counter: jobs a [Producer] or [PriorityQueue]
	// tried to enqueue; error.type on those that were not enqueued.
	MetricSentMessages = "messaging.client.sent.messages"
	// MetricOperationDuration is a histogram, in seconds: the duration of
	// one Enqueue, EnqueueBatch, Push or PushBatch call of a [Producer] or
	// [PriorityQueue], with messaging.operation.type "send".
	MetricOperationDuration = "messaging.client.operation.duration"
)

// messagingBuckets returns the bucket boundaries the semantic conventions
// advise for the messaging duration histograms.
func messagingBuckets() metric.HistogramOption {
	return metric.WithExplicitBucketBoundaries(0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10)
}

// AttrDeadLetterReason is the attribute of MetricDeadLettered holding the
// dead-letter reason (streamq.ReasonMaxDeliveries, ReasonPermanent,
// ReasonMalformed).
const AttrDeadLetterReason = attribute.Key("streamq.dead_letter.reason")

// AttrKind is the attribute of a job's kind (streamq.Message.Kind) on the
// job measurements of the streamq.* instruments (processed, failed,
// in-flight, duration, latency, retried, postponed, dead-lettered). Jobs
// without a kind have no such attribute, so untyped queues keep their
// series.
const AttrKind = attribute.Key("streamq.job.kind")

// DefaultStatsTimeout bounds reading one queue's statistics during a metric
// collection when MetricsConfig.StatsTimeout is zero.
const DefaultStatsTimeout = 2 * time.Second

// maxStatsConcurrency bounds the goroutines reading queue statistics at once
// during one collection.
const maxStatsConcurrency = 8

// MetricsConfig configures [NewMetrics]. The zero value is valid.
type MetricsConfig struct {
	// MeterProvider creates the instruments. Defaults to
	// otel.GetMeterProvider() at the time NewMetrics is called (the global
	// provider delegates to one set later with otel.SetMeterProvider).
	MeterProvider metric.MeterProvider

	// Queues are the queues whose state (length, pending, lag, delayed, dead
	// letters, from [streamq.Queue.Stats]) is reported as observable gauges,
	// read from Redis at every collection. Report each queue from one
	// process only, or tell the series apart by resource attributes.
	// Defaults to none.
	Queues []*streamq.Queue

	// StatsTimeout bounds reading one queue's statistics during a
	// collection; a queue whose read fails is left out of that collection.
	// Defaults to DefaultStatsTimeout.
	StatsTimeout time.Duration

	// System is the messaging.system attribute of the semantic-convention
	// instruments (MetricProcessDuration and the others); use the same value
	// as TracingConfig.System. Defaults to DefaultMessagingSystem
	// ("streamq").
	System string

	// Group is the messaging.consumer.group.name attribute of jobs whose
	// Message.Group is empty, as TracingConfig.Group is for spans. Defaults
	// to "": such jobs' measurements have no consumer group attribute.
	Group string
}

// Metrics records job metrics with the OpenTelemetry metrics API. Create it
// with [NewMetrics], add [Metrics.Middleware] to ConsumerConfig.Middleware and
// [Metrics.OnEvent] as ConsumerConfig.OnEvent, and [Metrics.Close] it when the
// consumers have stopped. One Metrics may serve many consumers and queues;
// it is safe for concurrent use.
//
// Instruments (see the Metric constants): the counters MetricProcessed,
// MetricFailed, MetricPostponed, MetricRetried, MetricDeadLettered,
// MetricReclaimed, MetricDeleted and MetricClaimsLost; the up-down counter
// MetricInFlight; the histograms MetricDuration and MetricLatency in seconds;
// and, for MetricsConfig.Queues, the gauges MetricQueueLength,
// MetricQueuePending, MetricQueueLag, MetricQueueDelayed, MetricQueueDead
// and MetricQueueEntries.
// Every measurement has the attribute messaging.destination.name with the
// queue name.
//
// Beside them, Metrics records the instruments of the OpenTelemetry messaging
// semantic conventions, so that dashboards built for any messaging system
// work with streamq: MetricProcessDuration (every handler call, in seconds)
// and MetricConsumedMessages (jobs handed to a handler), from
// [Metrics.Middleware], with messaging.operation.name "process" and the
// consumer group; and MetricSentMessages and MetricOperationDuration
// (operation name and type "send"), from a [Producer] or [PriorityQueue]
// whose SendConfig.Metrics is this Metrics. All carry messaging.system
// (MetricsConfig.System) and messaging.destination.name, and error.type
// when the operation failed: for handlers the classes of [Tracing], for
// sends "duplicate", "queue_full", "not_replicated", "too_large",
// "invalid_header", "invalid_priority", "invalid_config", "timeout",
// "canceled" or "_OTHER".
//
// A job postponed with [streamq.Postpone] (by [RateLimiter.Middleware] when
// no token is due within its MaxWait) did not fail: it is counted in
// MetricPostponed, from the consumer's EventPostponed, and in none of
// MetricProcessed, MetricFailed and MetricDuration.
//
// MetricProcessed, MetricFailed, MetricInFlight and MetricConsumedMessages
// are observable instruments: jobs are counted in memory with atomic adds
// and the totals are reported at each collection, so that the per-job cost
// is three histogram records (MetricDuration, MetricLatency,
// MetricProcessDuration) and a few atomic operations.
type Metrics struct {
	// Counted per job with atomics in queueState and reported by observeJobs,
	// which keeps the per-job cost to three histogram records.
	processed, failed metric.Int64ObservableCounter
	inFlight          metric.Int64ObservableUpDownCounter

	retried, dead, reclaimed, deleted, claimsLost metric.Int64Counter
	postponed                                     metric.Int64Counter
	duration, latency                             metric.Float64Histogram
	length, pending, lag, delayed, deadLetters    metric.Int64ObservableGauge
	entries                                       metric.Int64ObservableGauge
	oldestWaiting                                 metric.Float64ObservableGauge

	// The semantic-convention instruments.
	processDuration, opDuration metric.Float64Histogram
	consumed                    metric.Int64ObservableCounter
	sent                        metric.Int64Counter
	system                      attribute.KeyValue
	group                       string // fallback for messages without Message.Group

	queues       []*streamq.Queue
	statsTimeout time.Duration

	// consumers holds a *consumerState by msgKey, sends a *sendState by
	// queue name: both sync.Maps for the same reason as state.
	consumers, sends sync.Map

	// state holds a *queueState by stateKey, one per queue and kind seen.
	// A sync.Map because it is read on every job and written once per
	// queue and kind: its reads take no lock.
	state sync.Map

	// lastQueue is the queueState of the job started last: consumers
	// mostly run one queue, so this spares most jobs hashing its name.
	lastQueue atomic.Pointer[queueState]

	// closeMu guards regs and closed. The callbacks never take it: the SDK
	// may hold its own lock while running a callback, and Unregister takes
	// that lock.
	closeMu sync.Mutex
	regs    []metric.Registration
	closed  bool
}

// queueState holds the counters of one queue and its prebuilt measurement
// options, so that recording a job allocates nothing.
type queueState struct {
	queue   string
	kind    string
	add     []metric.AddOption
	record  []metric.RecordOption
	observe metric.ObserveOption
	failDur [numClasses][]metric.RecordOption
	failObs [numClasses]metric.ObserveOption

	base []attribute.KeyValue // destination and kind, the attributes of add
	// deadOpts holds the options of MetricDeadLettered by reason, built
	// once per reason.
	deadOpts optCache[[]metric.AddOption]

	processed, inFlight atomic.Int64
	failed              [numClasses]atomic.Int64

	// last is the consumerState of the group whose job the queue ran
	// last: a queue is nearly always read by one group, so this spares
	// most jobs the lookup in Metrics.consumers.
	last atomic.Pointer[consumerState]
}

// stateKey identifies a queueState: a queue and a job kind.
type stateKey struct{ queue, kind string }

func newQueueState(queue, kind string) *queueState {
	base := make([]attribute.KeyValue, 0, 3)
	base = append(base, semconv.MessagingDestinationName(queue))
	if kind != "" {
		base = append(base, AttrKind.String(kind))
	}
	set := attribute.NewSet(base...)
	s := &queueState{
		queue:   queue,
		kind:    kind,
		base:    base,
		add:     []metric.AddOption{metric.WithAttributeSet(set)},
		record:  []metric.RecordOption{metric.WithAttributeSet(set)},
		observe: metric.WithAttributeSet(set),
	}
	for c := range numClasses {
		fs := attribute.NewSet(append(base[:len(base):len(base)], semconv.ErrorTypeKey.String(c.String()))...)
		s.failDur[c] = []metric.RecordOption{metric.WithAttributeSet(fs)}
		s.failObs[c] = metric.WithAttributeSet(fs)
	}
	return s
}

// msgKey identifies the consumer-side semantic-convention series of a queue
// and consumer group.
type msgKey struct{ queue, group string }

// consumerState holds the consumed-messages count of one queue and group and
// the prebuilt options of its process durations.
type consumerState struct {
	group    string // as given to consumerState, before the fallback
	observe  metric.ObserveOption
	ok       []metric.RecordOption
	fail     [numClasses][]metric.RecordOption
	consumed atomic.Int64
}

func (m *Metrics) consumerState(q *queueState, queue, group string) *consumerState {
	if s := q.last.Load(); s != nil && s.group == group {
		return s
	}
	s := m.loadConsumerState(queue, group)
	q.last.Store(s)
	return s
}

func (m *Metrics) loadConsumerState(queue, given string) *consumerState {
	group := given
	if group == "" {
		group = m.group
	}
	k := msgKey{queue, group}
	if s, ok := m.consumers.Load(k); ok {
		return s.(*consumerState)
	}
	base := make([]attribute.KeyValue, 0, 5)
	base = append(base, m.system, semconv.MessagingOperationName("process"), semconv.MessagingDestinationName(queue))
	if group != "" {
		base = append(base, semconv.MessagingConsumerGroupName(group))
	}
	set := attribute.NewSet(base...)
	s := &consumerState{
		group:   given,
		observe: metric.WithAttributeSet(set),
		ok:      []metric.RecordOption{metric.WithAttributeSet(set)},
	}
	for c := range numClasses {
		fs := attribute.NewSet(append(base[:len(base):len(base)], semconv.ErrorTypeKey.String(c.String()))...)
		s.fail[c] = []metric.RecordOption{metric.WithAttributeSet(fs)}
	}
	v, _ := m.consumers.LoadOrStore(k, s)
	return v.(*consumerState)
}

// sendState holds the prebuilt attributes of the send instruments of one
// queue.
type sendState struct {
	base   []attribute.KeyValue // system, operation name, destination
	sentOK []metric.AddOption
	durOK  []metric.RecordOption
	failed optCache[sendFailOpts] // by error.type
}

// sendFailOpts are the options of a failed send of one error class.
type sendFailOpts struct {
	sent []metric.AddOption
	dur  []metric.RecordOption
}

func (m *Metrics) sendState(queue string) *sendState {
	if s, ok := m.sends.Load(queue); ok {
		return s.(*sendState)
	}
	base := []attribute.KeyValue{m.system, semconv.MessagingOperationName("send"), semconv.MessagingDestinationName(queue)}
	s := &sendState{
		base:   base,
		sentOK: []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(base...))},
		durOK: []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(
			append(base[:len(base):len(base)], semconv.MessagingOperationTypeSend)...))},
	}
	v, _ := m.sends.LoadOrStore(queue, s)
	return v.(*sendState)
}

// recordSend records one send call of n jobs to queue that took d and
// returned ids and err. A job counts as sent without error when it got an
// ID and err is not [streamq.ErrDuplicate] (the ID of a duplicate is the
// existing job's); the others count with the error.type of err.
func (m *Metrics) recordSend(ctx context.Context, queue string, n int, ids []string, err error, d time.Duration) {
	s := m.sendState(queue)
	if err == nil {
		m.sent.Add(ctx, int64(n), s.sentOK...)
		m.opDuration.Record(ctx, d.Seconds(), s.durOK...)
		return
	}
	ok := 0
	if !errors.Is(err, streamq.ErrDuplicate) {
		for _, id := range ids {
			if id != "" {
				ok++
			}
		}
	}
	if ok > 0 {
		m.sent.Add(ctx, int64(ok), s.sentOK...)
	}
	class := sendClass(err)
	f := s.failed.get(class, func() sendFailOpts {
		attrs := append(s.base[:len(s.base):len(s.base)], semconv.ErrorTypeKey.String(class))
		return sendFailOpts{
			sent: []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(attrs...))},
			dur: []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(
				append(attrs, semconv.MessagingOperationTypeSend)...))},
		}
	})
	if n > ok {
		m.sent.Add(ctx, int64(n-ok), f.sent...)
	}
	m.opDuration.Record(ctx, d.Seconds(), f.dur...)
}

// maxCachedOpts bounds an optCache; further keys get their options built
// per call.
const maxCachedOpts = 64

// optCache holds measurement options built once per key (a dead-letter
// reason, an error class: small sets of names), so that recording a
// measurement with them does not build an attribute set each time. The zero
// value is empty and ready; it is safe for concurrent use.
type optCache[T any] struct {
	m sync.Map     // string -> T
	n atomic.Int32 // entries in m, to bound it
}

// get returns the options of key, built by build on first use.
func (c *optCache[T]) get(key string, build func() T) T {
	if v, ok := c.m.Load(key); ok {
		return v.(T)
	}
	v := build()
	if c.n.Load() >= maxCachedOpts {
		return v
	}
	if old, loaded := c.m.LoadOrStore(key, v); loaded {
		return old.(T)
	}
	c.n.Add(1)
	return v
}

// NewMetrics creates the instruments and registers the callbacks of the
// observable ones (for the queue gauges only if MetricsConfig.Queues is not
// empty). cfg may be nil. Call [Metrics.Close] to unregister them.
func NewMetrics(cfg *MetricsConfig) (*Metrics, error) {
	var c MetricsConfig
	if cfg != nil {
		c = *cfg
		c.Queues = append([]*streamq.Queue(nil), cfg.Queues...)
	}
	if c.MeterProvider == nil {
		c.MeterProvider = otel.GetMeterProvider()
	}
	if c.System == "" {
		c.System = DefaultMessagingSystem
	}
	switch {
	case c.StatsTimeout == 0:
		c.StatsTimeout = DefaultStatsTimeout
	case c.StatsTimeout < 0:
		return nil, &streamq.ConfigError{Field: "MetricsConfig.StatsTimeout", Reason: fmt.Sprintf("%s is negative: use a positive duration, or 0 for %s", c.StatsTimeout, DefaultStatsTimeout)}
	}
	for i, q := range c.Queues {
		if q == nil {
			return nil, &streamq.ConfigError{Field: fmt.Sprintf("MetricsConfig.Queues[%d]", i), Reason: "is nil: remove it"}
		}
	}
	meter := c.MeterProvider.Meter(ScopeName, metric.WithSchemaURL(semconv.SchemaURL))
	m := &Metrics{queues: c.Queues, statsTimeout: c.StatsTimeout,
		system: semconv.MessagingSystemKey.String(c.System), group: c.Group}

	var errs []error
	counter := func(name, desc string) metric.Int64Counter {
		i, err := meter.Int64Counter(name, metric.WithUnit("{job}"), metric.WithDescription(desc))
		errs = append(errs, err)
		return i
	}
	gauge := func(name, unit, desc string) metric.Int64ObservableGauge {
		i, err := meter.Int64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return i
	}
	var err error
	m.processed, err = meter.Int64ObservableCounter(MetricProcessed, metric.WithUnit("{job}"),
		metric.WithDescription("Jobs whose handler returned nil."))
	errs = append(errs, err)
	m.failed, err = meter.Int64ObservableCounter(MetricFailed, metric.WithUnit("{job}"),
		metric.WithDescription("Jobs whose handler returned an error or panicked."))
	errs = append(errs, err)
	m.inFlight, err = meter.Int64ObservableUpDownCounter(MetricInFlight, metric.WithUnit("{job}"),
		metric.WithDescription("Jobs whose handler is running."))
	errs = append(errs, err)
	m.retried = counter(MetricRetried, "Failed jobs scheduled for a retry.")
	m.postponed = counter(MetricPostponed, "Jobs handed back to run later without charging an attempt (not failures), for example by the rate limit.")
	m.dead = counter(MetricDeadLettered, "Jobs moved to the dead-letter stream.")
	m.reclaimed = counter(MetricReclaimed, "Jobs taken over from consumers that stopped answering.")
	m.deleted = counter(MetricDeleted, "Pending entries found deleted from the stream; their jobs are lost.")
	m.claimsLost = counter(MetricClaimsLost, "Running jobs taken over by another consumer.")
	m.duration, err = meter.Float64Histogram(MetricDuration, metric.WithUnit("s"),
		metric.WithDescription("Duration of one handler call."),
		metric.WithExplicitBucketBoundaries(0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 30, 60, 300))
	errs = append(errs, err)
	m.latency, err = meter.Float64Histogram(MetricLatency, metric.WithUnit("s"),
		metric.WithDescription("Time from enqueue to the start of the first attempt."),
		metric.WithExplicitBucketBoundaries(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600))
	errs = append(errs, err)
	m.processDuration, err = meter.Float64Histogram(MetricProcessDuration, metric.WithUnit("s"),
		metric.WithDescription("Duration of processing operation."), messagingBuckets())
	errs = append(errs, err)
	m.consumed, err = meter.Int64ObservableCounter(MetricConsumedMessages, metric.WithUnit("{message}"),
		metric.WithDescription("Number of messages that were delivered to the application."))
	errs = append(errs, err)
	m.sent, err = meter.Int64Counter(MetricSentMessages, metric.WithUnit("{message}"),
		metric.WithDescription("Number of messages producer attempted to send to the broker."))
	errs = append(errs, err)
	m.opDuration, err = meter.Float64Histogram(MetricOperationDuration, metric.WithUnit("s"),
		metric.WithDescription("Duration of messaging operation initiated by a producer or consumer client."), messagingBuckets())
	errs = append(errs, err)
	m.length = gauge(MetricQueueLength, "{job}", "Jobs in the queue's stream not finished yet: not yet delivered plus delivered and not acknowledged.")
	m.entries = gauge(MetricQueueEntries, "{entry}", "Entries in the queue's stream, including acknowledged history not trimmed yet.")
	m.pending = gauge(MetricQueuePending, "{job}", "Jobs delivered to a consumer and not yet acknowledged.")
	m.lag = gauge(MetricQueueLag, "{job}", "Jobs not yet delivered to the consumer group.")
	m.delayed = gauge(MetricQueueDelayed, "{job}", "Jobs scheduled for later or waiting for a retry.")
	m.deadLetters = gauge(MetricQueueDead, "{job}", "Jobs in the dead-letter stream.")
	m.oldestWaiting, err = meter.Float64ObservableGauge(MetricQueueOldestWaiting, metric.WithUnit("s"),
		metric.WithDescription("Age of the oldest job not yet delivered to the consumer group; 0 when none waits."))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("streamq: create metric instruments: %w", err)
	}
	reg, err := meter.RegisterCallback(m.observeJobs, m.processed, m.failed, m.inFlight, m.consumed)
	if err != nil {
		return nil, fmt.Errorf("streamq: register job counters: %w", err)
	}
	m.regs = append(m.regs, reg)
	if len(m.queues) > 0 {
		reg, err := meter.RegisterCallback(m.observeQueues, m.length, m.entries, m.pending, m.lag, m.delayed, m.deadLetters, m.oldestWaiting)
		if err != nil {
			_ = m.Close()
			return nil, fmt.Errorf("streamq: register queue gauges: %w", err)
		}
		m.regs = append(m.regs, reg)
	}
	return m, nil
}

// Close unregisters the callbacks of the observable instruments: the meter
// provider stops reading queue statistics from Redis, and processed, failed
// and in-flight jobs are no longer reported. Call it after the consumers
// using the Metrics have stopped. Close is idempotent.
func (m *Metrics) Close() error {
	m.closeMu.Lock()
	defer m.closeMu.Unlock()
	if m.closed {
		return nil
	}
	m.closed = true
	var errs []error
	for _, r := range m.regs {
		if err := r.Unregister(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("streamq: unregister metric callbacks: %w", err)
	}
	return nil
}

// Middleware returns the middleware that counts processed and failed jobs,
// measures handler duration and enqueue-to-start latency, and tracks the jobs
// in flight; for the semantic conventions, it counts consumed messages when
// the handler starts and records every handler call's duration in
// MetricProcessDuration. A panic passing through counts as a failure
// (error.type panic) and continues upwards. A postponed job
// ([streamq.Postpone]) is neither processed nor failed and has no
// MetricDuration; [Metrics.OnEvent] counts it. Its handler call is in
// MetricProcessDuration without error.type, like its span: postponing is
// not a failure.
//
// The latency is recorded for a job's first attempt only, from
// Message.EnqueuedAt (the producer's clock) to the handler start (the
// consumer's clock), so clock skew between machines shows in it; it
// includes the delay of jobs scheduled with ProcessAt or ProcessIn, and the
// time a postponed job waited. It is recorded when the attempt ends, unless
// the job was postponed (a postponed job's next run is its first attempt
// again), so that every job counts once.
func (m *Metrics) Middleware() streamq.Middleware {
	return func(next streamq.Handler) streamq.Handler {
		return streamq.HandlerFunc(func(ctx context.Context, msg *streamq.Message) (err error) {
			q := m.lastQueue.Load()
			if q == nil || q.queue != msg.Queue || q.kind != msg.Kind {
				q = m.queueState(msg.Queue, msg.Kind)
				m.lastQueue.Store(q)
			}
			cs := m.consumerState(q, msg.Queue, msg.Group)
			start := time.Now()
			q.inFlight.Add(1)
			cs.consumed.Add(1)
			defer func() {
				q.inFlight.Add(-1)
				if r := recover(); r != nil {
					d := time.Since(start).Seconds()
					m.recordLatency(ctx, q, msg, start)
					q.failed[classPanic].Add(1)
					m.duration.Record(ctx, d, q.failDur[classPanic]...)
					m.processDuration.Record(ctx, d, cs.fail[classPanic]...)
					panic(r)
				}
			}()
			err = next.Handle(ctx, msg)
			d := time.Since(start).Seconds()
			if err != nil {
				if _, ok := postponement(ctx, err); ok {
					// Counted by OnEvent (EventPostponed); for the
					// semantic conventions, a processing operation that
					// did not fail, as its span says.
					m.processDuration.Record(ctx, d, cs.ok...)
					return err
				}
				m.recordLatency(ctx, q, msg, start)
				c := classify(ctx, err)
				q.failed[c].Add(1)
				m.duration.Record(ctx, d, q.failDur[c]...)
				m.processDuration.Record(ctx, d, cs.fail[c]...)
				return err
			}
			m.recordLatency(ctx, q, msg, start)
			q.processed.Add(1)
			m.duration.Record(ctx, d, q.record...)
			m.processDuration.Record(ctx, d, cs.ok...)
			return nil
		})
	}
}

// recordLatency records the enqueue-to-start latency of msg, started at
// start, if this is its first attempt.
func (m *Metrics) recordLatency(ctx context.Context, q *queueState, msg *streamq.Message, start time.Time) {
	if msg.Attempt <= 1 && !msg.EnqueuedAt.IsZero() { // 0: a message built by hand
		m.latency.Record(ctx, max(start.Sub(msg.EnqueuedAt), 0).Seconds(), q.record...)
	}
}

// OnEvent counts the consumer events that handler middleware cannot see:
// retries, postponements, dead letters, reclaims, deleted entries and lost
// claims. Use it as ConsumerConfig.OnEvent, or call it from your own OnEvent
// function.
func (m *Metrics) OnEvent(ctx context.Context, e streamq.Event) {
	var kind string
	if e.Message != nil {
		kind = e.Message.Kind
	}
	a := m.queueState(e.Queue, kind)
	switch e.Kind {
	case streamq.EventRetried:
		m.retried.Add(ctx, 1, a.add...)
	case streamq.EventPostponed:
		m.postponed.Add(ctx, 1, a.add...)
	case streamq.EventDeadLettered:
		reason := e.Reason
		m.dead.Add(ctx, 1, a.deadOpts.get(reason, func() []metric.AddOption {
			attrs := append(a.base[:len(a.base):len(a.base)], AttrDeadLetterReason.String(reason))
			return []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(attrs...))}
		})...)
	case streamq.EventReclaimed:
		m.reclaimed.Add(ctx, 1, a.add...)
	case streamq.EventDeleted:
		m.deleted.Add(ctx, 1, a.add...)
	case streamq.EventClaimLost:
		m.claimsLost.Add(ctx, 1, a.add...)
	}
}

// queueState returns the state of queue and job kind, creating it on first
// use, so that its attributes are built once per kind, not per job. One is
// kept per queue and kind for the life of the Metrics (queue names come from
// the consumers' queues and kinds from the code's job types, so they are
// few).
func (m *Metrics) queueState(queue, kind string) *queueState {
	k := stateKey{queue, kind}
	if s, ok := m.state.Load(k); ok {
		return s.(*queueState)
	}
	s, _ := m.state.LoadOrStore(k, newQueueState(queue, kind))
	return s.(*queueState)
}

// observeJobs is the callback of the job counters kept in queueState.
func (m *Metrics) observeJobs(_ context.Context, o metric.Observer) error {
	m.state.Range(func(_, v any) bool {
		s := v.(*queueState)
		o.ObserveInt64(m.processed, s.processed.Load(), s.observe)
		o.ObserveInt64(m.inFlight, s.inFlight.Load(), s.observe)
		for c := range numClasses {
			// Classes that never occurred are left out rather than reported
			// as zero, to keep the number of series down.
			if n := s.failed[c].Load(); n > 0 {
				o.ObserveInt64(m.failed, n, s.failObs[c])
			}
		}
		return true
	})
	m.consumers.Range(func(_, v any) bool {
		s := v.(*consumerState)
		o.ObserveInt64(m.consumed, s.consumed.Load(), s.observe)
		return true
	})
	return nil
}

// observeQueues is the callback of the queue gauges: it reads the statistics of
// every queue, at most maxStatsConcurrency at once, each bounded by
// StatsTimeout, and observes those that could be read.
func (m *Metrics) observeQueues(ctx context.Context, o metric.Observer) error {
	stats := make([]streamq.QueueStats, len(m.queues))
	errs := make([]error, len(m.queues))
	var g errgroup.Group
	g.SetLimit(maxStatsConcurrency)
	for i, q := range m.queues {
		g.Go(func() error {
			sctx, cancel := context.WithTimeout(ctx, m.statsTimeout)
			defer cancel()
			stats[i], errs[i] = q.Stats(sctx)
			return nil
		})
	}
	_ = g.Wait() // the goroutines report through errs
	for i, q := range m.queues {
		if errs[i] != nil {
			continue
		}
		s := stats[i]
		opt := m.queueState(q.Name(), "").observe
		o.ObserveInt64(m.entries, s.Length, opt)
		o.ObserveInt64(m.pending, s.Pending, opt)
		if s.Lag >= 0 { // -1: Redis cannot tell
			o.ObserveInt64(m.lag, s.Lag, opt)
			o.ObserveInt64(m.length, s.Lag+s.Pending, opt)
		}
		o.ObserveInt64(m.delayed, s.Delayed, opt)
		o.ObserveInt64(m.deadLetters, s.DeadLetters, opt)
		o.ObserveFloat64(m.oldestWaiting, s.OldestWaiting.Seconds(), opt)
	}
	return errors.Join(errs...)
}
