package middleware

import (
	"context"
	"errors"
	"log/slog"
	"runtime/debug"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/streamq/streamq"
)

// Log record messages written by [Logging].
const (
	LogMsgFailed    = "streamq: job failed"
	LogMsgDone      = "streamq: job done"
	LogMsgPostponed = "streamq: job postponed"
)

// LoggingConfig configures [Logging]. The zero value is valid: one record per
// failure at slog.LevelError, none for successes, no payloads.
type LoggingConfig struct {
	// FailureLevel is the level of the record written for a failed job.
	// Defaults to slog.LevelError.
	FailureLevel slog.Leveler

	// Successes, if true, writes one record per successful job at
	// slog.LevelDebug. Defaults to false.
	Successes bool

	// PayloadBytes, if positive, adds the first PayloadBytes bytes of the
	// job's payload to every record under the key "payload". Payloads often
	// hold personal data or secrets; turn this on only where the logs may
	// hold them. Defaults to 0: payloads are never logged.
	PayloadBytes int

	// Headers lists job headers whose values are added to every record as a
	// group "headers". Defaults to none.
	Headers []string
}

// Logging returns middleware that writes one structured record per failed
// job to logger (nil means slog.Default() at the time of this call), and with
// LoggingConfig.Successes one per successful job. cfg may be nil.
//
// A record has the message [LogMsgFailed] or [LogMsgDone] and the keys
// queue, msg_id, attempt (the attempt number, 1 on the first run, see
// [streamq.Message.Attempts]), deliveries, duration, and for failures error,
// error_type (panic, timeout, shutdown, claim_lost, canceled, permanent,
// retry_after, rate_limited or _OTHER) and, for panics, stack. When the
// context holds a span (put [Tracing] before Logging), trace_id and span_id
// are added. Records are written with the job's context, so a context-aware
// slog.Handler sees it. Payloads are never logged unless
// LoggingConfig.PayloadBytes asks for them.
//
// A job postponed with [streamq.Postpone] (by [RateLimiter.Middleware] when
// no token is due within its MaxWait) did not fail: it gets no failure
// record but one at slog.LevelDebug with the message [LogMsgPostponed] and
// the keys retry_in (the delay) and reason instead of error and error_type.
//
// The failed job is retried or dead-lettered by the consumer as usual;
// Logging returns the handler's error unchanged. A panic passing through
// Logging is logged (error_type panic) and continues upwards.
func Logging(logger *slog.Logger, cfg *LoggingConfig) streamq.Middleware {
	if logger == nil {
		logger = slog.Default()
	}
	var c LoggingConfig
	if cfg != nil {
		c = *cfg
		c.Headers = append([]string(nil), cfg.Headers...)
	}
	l := &logging{log: logger, cfg: c, failLevel: slog.LevelError}
	if c.FailureLevel != nil {
		l.failLevel = c.FailureLevel.Level()
	}
	return func(next streamq.Handler) streamq.Handler {
		return streamq.HandlerFunc(func(ctx context.Context, msg *streamq.Message) (err error) {
			if !l.log.Enabled(ctx, l.failLevel) && !l.log.Enabled(ctx, slog.LevelDebug) {
				// No record this job could end in would be written: no
				// clock reading, no deferred recover. Checked per job, as
				// a handler's level may change at run time.
				return next.Handle(ctx, msg)
			}
			start := time.Now()
			defer func() {
				if r := recover(); r != nil {
					l.failed(ctx, msg, time.Since(start), &streamq.PanicError{Value: r, Stack: debug.Stack()})
					panic(r)
				}
			}()
			err = next.Handle(ctx, msg)
			if err != nil {
				if pe, ok := postponement(ctx, err); ok {
					l.postponed(ctx, msg, time.Since(start), pe)
				} else {
					l.failed(ctx, msg, time.Since(start), err)
				}
			} else if l.cfg.Successes {
				l.done(ctx, msg, time.Since(start))
			}
			return err
		})
	}
}

type logging struct {
	log       *slog.Logger
	cfg       LoggingConfig
	failLevel slog.Level
}

func (l *logging) failed(ctx context.Context, msg *streamq.Message, d time.Duration, err error) {
	if !l.log.Enabled(ctx, l.failLevel) {
		return
	}
	attrs := l.attrs(ctx, msg, d, 4)
	attrs = append(attrs,
		slog.String("error", err.Error()),
		slog.String("error_type", classify(ctx, err).String()),
	)
	if pe, ok := errors.AsType[*streamq.PanicError](err); ok {
		attrs = append(attrs, slog.String("stack", string(pe.Stack)))
	}
	l.log.LogAttrs(ctx, l.failLevel, LogMsgFailed, attrs...)
}

func (l *logging) postponed(ctx context.Context, msg *streamq.Message, d time.Duration, pe *streamq.PostponeError) {
	if !l.log.Enabled(ctx, slog.LevelDebug) {
		return
	}
	attrs := l.attrs(ctx, msg, d, 2)
	attrs = append(attrs, slog.Duration("retry_in", pe.Delay))
	if pe.Err != nil {
		attrs = append(attrs, slog.String("reason", pe.Err.Error()))
	}
	l.log.LogAttrs(ctx, slog.LevelDebug, LogMsgPostponed, attrs...)
}

func (l *logging) done(ctx context.Context, msg *streamq.Message, d time.Duration) {
	if !l.log.Enabled(ctx, slog.LevelDebug) {
		return
	}
	l.log.LogAttrs(ctx, slog.LevelDebug, LogMsgDone, l.attrs(ctx, msg, d, 0)...)
}

// attrs returns the keys common to all records, with room for extra more.
func (l *logging) attrs(ctx context.Context, msg *streamq.Message, d time.Duration, extra int) []slog.Attr {
	attrs := make([]slog.Attr, 0, 9+extra)
	attrs = append(attrs,
		slog.String("queue", msg.Queue),
		slog.String("msg_id", msg.ID),
		slog.Int("attempt", msg.Attempt),
		slog.Duration("duration", d),
	)
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		attrs = append(attrs,
			slog.String("trace_id", sc.TraceID().String()),
			slog.String("span_id", sc.SpanID().String()),
		)
	}
	if n := l.cfg.PayloadBytes; n > 0 {
		p := msg.Payload
		if len(p) > n {
			p = p[:n]
		}
		attrs = append(attrs, slog.String("payload", string(p)))
	}
	if len(l.cfg.Headers) > 0 {
		hs := make([]any, 0, len(l.cfg.Headers))
		for _, k := range l.cfg.Headers {
			if v, ok := msg.Headers[k]; ok {
				hs = append(hs, slog.String(k, v))
			}
		}
		if len(hs) > 0 {
			attrs = append(attrs, slog.Group("headers", hs...))
		}
	}
	return attrs
}
